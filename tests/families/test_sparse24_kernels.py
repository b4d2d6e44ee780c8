"""The 2:4 kernels' indexing, emulated exactly on the CPU: every register a lane gives mma.sp (compressed A values,
the metadata word, B values), built with the kernels' own index formulas from the arrays the family makes and
the shared-memory image the copies leave, then multiplied the way the PTX ISA defines the instruction. If the
emulated product equals A B, the kernels read the right element and the right metadata bits everywhere; the GPU
still has to confirm the instruction's definition itself. Both kernels also pass the compile-only verifier."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.sparse24_gemm.compression import decompress
from sparseditto.tools.verifier import CompileOnlyVerifier

FAMILY = get_family("sparse24_gemm")


def problem(dtype, M, K, N, seed=0):
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": M, "K": K, "N": N, "dtype": dtype})
    p = FAMILY.make_problem(spec, seed)
    A = decompress(p.inputs["A_values"], p.inputs["A_meta"], M, K)
    return p, A, to_float64(p.inputs["B"], dtype)


# ---- the instruction, as the PTX ISA defines it (sparse mma, ordered metadata, sparsity selector 0) ----------

def nibble(e, row, group):
    """The 4-bit code of `group` (of the step) in row `row` of the 16-row tile, from the lanes' metadata words:
    groups 4j .. 4j+3 come from lane 4 * (row % 8) + j, row r + 8 from the upper 16 bits."""
    word = int(e[4 * (row % 8) + group // 4])
    return (word >> (16 * (row // 8) + 4 * (group % 4))) & 0xF


def sparse_mma(compressed, e, b_dense):
    """D (16 x 8) of one mma.sp: compressed A (16 x K/2) expanded by the metadata, times B (K x 8)."""
    groups = compressed.shape[1] // 2
    a = np.zeros((16, 4 * groups))
    for r in range(16):
        for v in range(groups):
            code = nibble(e, r, v)
            first, second = code & 3, code >> 2
            assert first < second, f"row {r}, group {v}: code {code:#x} is not an ordered pair"
            a[r, 4 * v + first], a[r, 4 * v + second] = compressed[r, 2 * v], compressed[r, 2 * v + 1]
    return a @ b_dense


def halves(word):
    return int(word) & 0xFFFF, int(word) >> 16


def mma_k32(a_regs, b_regs, e, value):
    """m16n8k32, 16-bit: lane (g, t) register j holds compressed columns 2t, 2t+1 (+8 for j >= 2) of row g (+8 for
    odd j), and B rows 8j + 2t, +1 of column g. `value` turns a 16-bit pattern into its number."""
    comp, b = np.zeros((16, 16)), np.zeros((32, 8))
    for lane in range(32):
        g, t = divmod(lane, 4)
        for j in range(4):
            lo, hi = halves(a_regs[lane][j])
            row, col = g + 8 * (j & 1), 2 * t + 8 * (j >> 1)
            comp[row, col], comp[row, col + 1] = value(lo), value(hi)
            lo, hi = halves(b_regs[lane][j])
            b[8 * j + 2 * t, g], b[8 * j + 2 * t + 1, g] = value(lo), value(hi)
    return sparse_mma(comp, e, b)


def mma_k64_e4m3(a_regs, b_regs, e):
    """m16n8k64, e4m3: lane (g, t) register j byte i holds compressed column 4t + 16(j // 2) + i of row g + 8(j % 2),
    and B row 16j + 4t + i of column g."""
    comp, b = np.zeros((16, 32)), np.zeros((64, 8))
    for lane in range(32):
        g, t = divmod(lane, 4)
        for j in range(4):
            for i in range(4):
                comp[g + 8 * (j % 2), 4 * t + 16 * (j // 2) + i] = e4m3((int(a_regs[lane][j]) >> (8 * i)) & 0xFF)
                b[16 * j + 4 * t + i, g] = e4m3((int(b_regs[lane][j]) >> (8 * i)) & 0xFF)
    return sparse_mma(comp, e, b)


def f16(bits):
    return float(to_float64(np.array(bits, np.uint16), "fp16"))


def bf16(bits):
    return float(to_float64(np.array(bits, np.uint16), "bf16"))


def e4m3(bits):
    return float(to_float64(np.array(bits, np.uint8), "fp8_e4m3"))


def widen_e4m3x2(pair):
    """sp24_e4m3x2_to_f16x2."""
    out = 0
    for h in range(2):
        x = (pair >> (8 * h)) & 0xFF
        bits = 0x7E00 if x & 0x7F == 0x7F else (x & 0x7F) << 7
        out |= (bits | ((x & 0x80) << 8)) << (16 * h)
    return out


def test_e4m3_widening_is_exact_times_two_to_the_minus_8():
    for x in range(256):
        got = f16(widen_e4m3x2(x) & 0xFFFF)
        want = e4m3(x)
        if np.isnan(want):
            assert np.isnan(got)
        else:
            assert got * 256 == want, hex(x)


# ---- sp24_mma_sp: shared-memory image of a stage, ldmatrix, metadata index ------------------------------------

class Tile:
    """sp24_mma_sp's macros for one parameter set and value size."""

    def __init__(self, params, vb):
        self.__dict__.update(params)
        self.vb = vb
        self.threads = 32 * self.WM * self.WN
        self.wtm, self.wtn = self.BM // self.WM, self.BN // self.WN
        self.mt, self.nt = self.wtm // 16, self.wtn // 8
        self.a_row = self.BK // 2 * vb
        self.a_chunks = self.a_row // 16
        self.a_bytes = self.BM * self.a_row
        self.meta_row = self.BK // 16 * 8
        self.meta_bytes = self.BM // 16 * self.meta_row * 4
        self.b_row = self.BN * vb
        self.b_chunks = self.b_row // 16

    def a_offset(self, r, c):
        return r * self.a_row + ((c ^ ((r // (8 // self.a_chunks)) % self.a_chunks)) << 4)

    def b_offset(self, k, c):
        return k * self.b_row + ((c ^ (k & 7)) << 4)

    def load(self, a_bytes, meta, b_bytes, m0, n0, kt, M, N, K):
        """sp24_load_tile: the stage's bytes (a_bytes: A_values as bytes, M x K/2*vb; b_bytes: B, K x N*vb)."""
        s = np.full(self.a_bytes + self.meta_bytes + self.BK * self.b_row, 0xCD, np.uint8)  # garbage where unwritten
        k0 = kt * self.BK
        for i in range(self.BM * self.a_chunks):
            r, c = divmod(i, self.a_chunks)
            o = self.a_offset(r, c)
            s[o:o + 16] = a_bytes[m0 + r, k0 // 2 * self.vb + 16 * c:][:16] if m0 + r < M else 0
        words = s[self.a_bytes:self.a_bytes + self.meta_bytes].view(np.int32)
        for i in range(self.BM // 16 * (self.meta_row // 4)):
            mb, c = divmod(i, self.meta_row // 4)
            at = ((m0 // 16 + mb) * (K // 16) + k0 // 16) * 8 + 4 * c
            words[mb * self.meta_row + 4 * c:][:4] = meta[at:at + 4] if m0 + 16 * mb < M else 0
        bt = self.a_bytes + self.meta_bytes
        per_chunk = 16 // self.vb
        if N % per_chunk == 0:
            for i in range(self.BK * self.b_chunks):
                k, c = divmod(i, self.b_chunks)
                col = n0 + c * per_chunk
                o = bt + self.b_offset(k, c)
                s[o:o + 16] = b_bytes[k0 + k, col * self.vb:][:16] if col < N else 0
        else:
            for i in range(self.BK * self.BN):
                k, n = divmod(i, self.BN)
                o = bt + self.b_offset(k, n * self.vb // 16) + (n * self.vb) % 16
                s[o:o + self.vb] = b_bytes[k0 + k, (n0 + n) * self.vb:][:self.vb] if n0 + n < N else 0
        return s


def word_at(s, o):
    return int(s[o:o + 4].view(np.uint32)[0])


def ldmatrix_x4(s, addresses):
    """Lane l gives the address of row l % 8 of matrix l // 8; lane (g, t) gets bytes 4t .. of row g of each."""
    return [[word_at(s, addresses[8 * j + lane // 4] + 4 * (lane % 4)) for j in range(4)] for lane in range(32)]


def ldmatrix_x4_trans(s, addresses):
    """Transposed: lane (g, t) gets element g of rows 2t and 2t + 1 of each matrix (16-bit elements)."""
    def element(j, row, col):
        o = addresses[8 * j + row] + 2 * col
        return int(s[o:o + 2].view(np.uint16)[0])
    return [[element(j, 2 * (lane % 4), lane // 4) | element(j, 2 * (lane % 4) + 1, lane // 4) << 16 for j in range(4)]
            for lane in range(32)]


def tile_product(tile, s, wm, wn, path, rows_left):
    """sp24_tile_product for every lane of warp (wm, wn): its accumulators per (mt, nt) as 16 x 8 blocks; m-tiles
    from `rows_left` rows on are skipped."""
    meta = s[tile.a_bytes:tile.a_bytes + tile.meta_bytes].view(np.uint32)
    bt = tile.a_bytes + tile.meta_bytes
    acc = np.zeros((tile.mt, tile.nt, 16, 8))
    lanes = range(32)
    if path == "e4m3_native":
        for mt in range(tile.mt):
            rows = [tile.a_offset(wm * tile.wtm + mt * 16 + (l & 7) + 8 * ((l >> 3) & 1), l >> 4) for l in lanes]
            a = ldmatrix_x4(s, rows)
            e = [meta[(wm * tile.wtm // 16 + mt) * tile.meta_row + (l & 3) * 8 + (l >> 2)] for l in lanes]
            for nt in range(tile.nt):
                b = []
                for l in lanes:
                    g, t, n = l >> 2, l & 3, wn * tile.wtn + nt * 8 + (l >> 2)
                    b.append([sum(int(s[bt + tile.b_offset(16 * q + 4 * t + i, n >> 4) + (n & 15)]) << (8 * i)
                                  for i in range(4)) for q in range(4)])
                if wm * tile.wtm + mt * 16 < rows_left:
                    acc[mt, nt] += mma_k64_e4m3(a, b, e)
        return acc
    value = {"f16": f16, "bf16": bf16, "e4m3_widened": lambda bits: f16(bits) * 256.0}[path]
    for step in range(tile.BK // 32):
        for mt in range(tile.mt):
            if path == "e4m3_widened":
                a = []
                for l in lanes:
                    g, t = l >> 2, l & 3
                    regs = []
                    for j in range(4):
                        r = wm * tile.wtm + mt * 16 + g + 8 * (j & 1)
                        byte = 16 * step + 2 * t + 8 * (j >> 1)
                        o = tile.a_offset(r, byte >> 4) + (byte & 15)
                        regs.append(widen_e4m3x2(int(s[o]) | int(s[o + 1]) << 8))
                    a.append(regs)
            else:
                rows = [tile.a_offset(wm * tile.wtm + mt * 16 + (l & 7) + 8 * ((l >> 3) & 1), 2 * step + (l >> 4))
                        for l in lanes]
                a = ldmatrix_x4(s, rows)
            e = [meta[(wm * tile.wtm // 16 + mt) * tile.meta_row + (2 * step + (l & 1)) * 8 + (l >> 2)] for l in lanes]
            for nt in range(tile.nt):
                n_base = wn * tile.wtn + nt * 8
                if path == "e4m3_widened":
                    b = []
                    for l in lanes:
                        g, t, n = l >> 2, l & 3, n_base + (l >> 2)
                        regs = []
                        for q in range(4):
                            k = 32 * step + 8 * q + 2 * t
                            lo = s[bt + tile.b_offset(k, n >> 4) + (n & 15)]
                            hi = s[bt + tile.b_offset(k + 1, n >> 4) + (n & 15)]
                            regs.append(widen_e4m3x2(int(lo) | int(hi) << 8))
                        b.append(regs)
                else:
                    b = ldmatrix_x4_trans(s, [bt + tile.b_offset(32 * step + 8 * (l >> 3) + (l & 7), n_base >> 3)
                                              for l in lanes])
                if wm * tile.wtm + mt * 16 < rows_left:
                    acc[mt, nt] += mma_k32(a, b, e, value)
    return acc


def emulate_mma_kernel(p, params, dtype, path):
    M, K, N = (p.symbols[s] for s in ("M", "K", "N"))
    vb = 1 if dtype == "fp8_e4m3" else 2
    tile = Tile(params, vb)
    a_bytes = p.inputs["A_values"].view(np.uint8).reshape(M, K // 2 * vb)
    b_bytes = p.inputs["B"].view(np.uint8).reshape(K, N * vb)
    C = np.full((M, N), np.nan)
    for by in range(-(-M // tile.BM)):
        for bx in range(-(-N // tile.BN)):
            m0, n0 = by * tile.BM, bx * tile.BN
            acc = np.zeros((tile.WM, tile.WN, tile.mt, tile.nt, 16, 8))
            for kt in range(K // tile.BK):
                s = tile.load(a_bytes, p.inputs["A_meta"], b_bytes, m0, n0, kt, M, N, K)
                for wm in range(tile.WM):
                    for wn in range(tile.WN):
                        acc[wm, wn] += tile_product(tile, s, wm, wn, path, M - m0)
            for wm in range(tile.WM):
                for wn in range(tile.WN):
                    for mt in range(tile.mt):
                        for nt in range(tile.nt):
                            r, c = m0 + wm * tile.wtm + mt * 16, n0 + wn * tile.wtn + nt * 8
                            if r < M and c < N:
                                C[r:r + 16, c:c + 8] = acc[wm, wn, mt, nt][:min(16, M - r), :min(8, N - c)]
    return C


MMA_CASES = [
    ("fp16", "f16", {"BM": 32, "BN": 64, "BK": 64, "WM": 2, "WN": 1, "STAGES": 2}, (48, 128, 72)),  # M, N tails
    ("bf16", "bf16", {"BM": 64, "BN": 64, "BK": 64, "WM": 2, "WN": 2, "STAGES": 3}, (64, 64, 61)),  # odd N: scalar B
    ("fp16", "f16", {"BM": 32, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 2}, (48, 128, 136)),  # 8 warps, N tail
    ("fp8_e4m3", "e4m3_widened", {"BM": 32, "BN": 128, "BK": 64, "WM": 1, "WN": 2, "STAGES": 2}, (32, 128, 131)),
    ("fp8_e4m3", "e4m3_native", {"BM": 32, "BN": 128, "BK": 64, "WM": 2, "WN": 2, "STAGES": 2}, (32, 128, 128)),
]


@pytest.mark.parametrize(("dtype", "path", "params", "shape"), MMA_CASES, ids=[c[1] for c in MMA_CASES])
def test_sp24_mma_sp_indexing_gives_a_times_b(dtype, path, params, shape):
    M, K, N = shape
    p, A, B = problem(dtype, M, K, N, seed=3)
    np.testing.assert_allclose(emulate_mma_kernel(p, params, dtype, path), A @ B, rtol=1e-12, atol=1e-12)


def test_a_wrong_metadata_lane_is_caught_by_the_emulation():
    """The emulation is sharp: reading lane pair (t & 1) swapped misplaces values and the product changes."""
    p, A, B = problem("fp16", 16, 64, 64, seed=4)
    tile = Tile({"BM": 64, "BN": 64, "BK": 64, "WM": 1, "WN": 1, "STAGES": 2}, 2)
    s = tile.load(p.inputs["A_values"].view(np.uint8).reshape(16, 64), p.inputs["A_meta"],
                  p.inputs["B"].view(np.uint8).reshape(64, 128), 0, 0, 0, 16, 64, 64)
    meta = s[tile.a_bytes:tile.a_bytes + tile.meta_bytes].view(np.uint32)
    halves_swapped = meta.reshape(-1, 4, 8)[:, [1, 0, 3, 2], :].reshape(-1).copy()
    s[tile.a_bytes:tile.a_bytes + tile.meta_bytes] = halves_swapped.view(np.uint8)
    acc = tile_product(tile, s, 0, 0, "f16", 16)
    assert not np.allclose(np.concatenate(list(acc[0]), axis=1), A @ B)


# ---- sp24_skinny: global loads with the step's groups relabelled -------------------------------------------------

def relabel_meta(w0, w1, p):
    """sp24_relabel_meta."""
    out = 0
    for c in range(4):
        src = w0 if c < 2 else w1
        out |= ((src >> (4 * ((2 * c + p) & 3))) & 0x000F000F) << (4 * c)
    return out


def relabel_k(q, t):
    """sp24_relabel_k."""
    v = 2 * q + (t >> 1)
    return 4 * (2 * v if v < 4 else 2 * (v - 4) + 1) + 2 * (t & 1)


def emulate_skinny(p, params, dtype):
    M, K, N = (p.symbols[s] for s in ("M", "K", "N"))
    MT, NT, WARPS, UNROLL = (params[k] for k in ("MT", "NT", "WARPS", "UNROLL"))
    fp8 = dtype == "fp8_e4m3"
    vals = p.inputs["A_values"].reshape(-1).view(np.uint8 if fp8 else np.uint16)
    meta = p.inputs["A_meta"].view(np.uint32)
    Bbits = p.inputs["B"].reshape(-1).view(np.uint8 if fp8 else np.uint16)
    value = (lambda bits: f16(bits) * 256.0) if fp8 else f16 if dtype == "fp16" else bf16
    steps = K // 32
    C = np.full((M, N), np.nan)
    for block in range(-(-M // (16 * MT))):
        m0 = block * 16 * MT
        total = np.zeros((MT, NT, 16, 8))
        for warp in range(WARPS):
            for first in range(warp * UNROLL, steps, WARPS * UNROLL):
                for s in range(first, min(first + UNROLL, steps)):
                    for mt in range(MT):
                        row0 = m0 + 16 * mt
                        if row0 >= M:
                            break
                        a, e = [], []
                        for lane in range(32):
                            g, t = divmod(lane, 4)
                            at = (row0 + g) * (K // 2) + 16 * s + 4 * t
                            at8 = at + 8 * (K // 2)
                            if fp8:
                                r0 = sum(int(vals[at + i]) << (8 * i) for i in range(4))
                                r8 = sum(int(vals[at8 + i]) << (8 * i) for i in range(4))
                                a.append([widen_e4m3x2(r0 & 0xFFFF), widen_e4m3x2(r8 & 0xFFFF),
                                          widen_e4m3x2(r0 >> 16), widen_e4m3x2(r8 >> 16)])
                            else:
                                x0, y0 = int(vals[at]) | int(vals[at + 1]) << 16, int(vals[at + 2]) | int(vals[at + 3]) << 16
                                x8, y8 = int(vals[at8]) | int(vals[at8 + 1]) << 16, int(vals[at8 + 2]) | int(vals[at8 + 3]) << 16
                                a.append([x0, x8, y0, y8])
                            word = ((row0 // 16) * (K // 16) + 2 * s) * 8 + g
                            e.append(relabel_meta(int(meta[word]), int(meta[word + 8]), t & 1))
                        for nt in range(NT):
                            b = []
                            for lane in range(32):
                                g, t = divmod(lane, 4)
                                n, regs = 8 * nt + g, []
                                for q in range(4):
                                    k = 32 * s + relabel_k(q, t)
                                    lo = int(Bbits[k * N + n]) if n < N else 0
                                    hi = int(Bbits[(k + 1) * N + n]) if n < N else 0
                                    regs.append(widen_e4m3x2(lo | hi << 8) if fp8 else lo | hi << 16)
                                b.append(regs)
                            total[mt, nt] += mma_k32(a, b, e, value)
        for mt in range(MT):
            for nt in range(NT):
                r, c = m0 + 16 * mt, 8 * nt
                if r < M and c < N:
                    C[r:r + 16, c:c + 8] = total[mt, nt][:, :min(8, N - c)]
    return C


SKINNY_CASES = [
    ("fp16", {"MT": 2, "NT": 2, "WARPS": 4, "UNROLL": 2}, (48, 320, 13)),  # a missing m-tile, steps not a multiple
    ("bf16", {"MT": 1, "NT": 1, "WARPS": 2, "UNROLL": 1}, (32, 128, 8)),
    ("fp8_e4m3", {"MT": 2, "NT": 2, "WARPS": 2, "UNROLL": 4}, (32, 192, 16)),
]


@pytest.mark.parametrize(("dtype", "params", "shape"), SKINNY_CASES, ids=[c[0] for c in SKINNY_CASES])
def test_sp24_skinny_indexing_gives_a_times_b(dtype, params, shape):
    M, K, N = shape
    p, A, B = problem(dtype, M, K, N, seed=5)
    np.testing.assert_allclose(emulate_skinny(p, params, dtype), A @ B, rtol=1e-12, atol=1e-12)


# ---- the real kernels through the compile-only verifier ----------------------------------------------------------

STARTS = {"sp24_mma_sp": {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 4},
          "sp24_skinny": {"MT": 2, "NT": 2, "WARPS": 8, "UNROLL": 2}}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("kernel", sorted(STARTS))
def test_kernel_passes_the_compile_only_verifier(kernel, dtype, arch):
    N = 16 if kernel == "sp24_skinny" else 256
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": N, "dtype": dtype,
                       "arch": arch, "epilogue": {"bias": True, "activation": "gelu_tanh", "alpha": True}})
    report = CompileOnlyVerifier(arch).verify(get_kernel(kernel).instantiate(STARTS[kernel]), spec)
    assert report.compiled
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback
    assert {f.stage: f.status for f in report.feedback}["correctness"] == "not_executed"
    resources = report.resources[kernel]
    assert resources.spill_stores == 0 and resources.stack_bytes == 0, resources


def test_planner_starts_are_the_ones_verified_here():
    for N, kernel in ((16, "sp24_skinny"), (4096, "sp24_mma_sp")):
        spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": N,
                           "arch": "sm_80"})
        start = FAMILY.strategies(spec, FAMILY.features(spec))[0]
        assert (start.kernel, start.start) == (kernel, STARTS[kernel])

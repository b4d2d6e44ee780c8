"""The 2:4 kernels' indexing, emulated exactly on the CPU: every register a lane gives mma.sp (compressed A values,
the metadata word, B values), built with the kernels' own index formulas from the arrays the family makes and
the shared-memory image the copies leave, then multiplied the way the PTX ISA defines the instruction. If the
emulated product equals A B, the kernels read the right element and the right metadata bits everywhere; the GPU
still has to confirm the instruction's definition itself. Both kernels also pass the compile-only verifier."""

from __future__ import annotations

import sys

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

def nibble(e, row, group, groups):
    """The 4-bit code of `group` (of the step's `groups`) in row `row` of the 16-row tile, from the lanes' metadata
    words. 16-bit steps (8 groups): groups 4j .. 4j+3 come from lane 4 * (row % 8) + j, row r + 8 from the upper 16
    bits. 8-bit m16n8k64 (16 groups; CuTe's ELayout for it): lane 4 * (row % 8) + 2 * (group // 8) + row // 8 holds
    groups 8 (group // 8) .. +7 of that one row."""
    if groups == 16:
        word = int(e[4 * (row % 8) + 2 * (group // 8) + row // 8])
        return (word >> (4 * (group % 8))) & 0xF
    word = int(e[4 * (row % 8) + group // 4])
    return (word >> (16 * (row // 8) + 4 * (group % 4))) & 0xF


def sparse_mma(compressed, e, b_dense):
    """D (16 x 8) of one mma.sp: compressed A (16 x K/2) expanded by the metadata, times B (K x 8)."""
    groups = compressed.shape[1] // 2
    a = np.zeros((16, 4 * groups))
    for r in range(16):
        for v in range(groups):
            code = nibble(e, r, v, groups)
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
            words = [[int(meta[(wm * tile.wtm // 16 + mt) * tile.meta_row + (2 * ((l & 3) >> 1) + i) * 8 + (l >> 2)])
                      for i in (0, 1)] for l in lanes]
            # the kernel's byte permute: row g + 8 (odd t) takes the upper halves
            e = [(lo >> 16) | (hi & 0xFFFF0000) if l & 1 else (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)
                 for l, (lo, hi) in zip(lanes, words)]
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


# ---- sp24_stream: per-warp cp.async rings, 64-column pairs relabelled, B fragments staged once ------------------

def stream_b_row(j, q, t):
    """sp24s_b_row."""
    v = 2 * q + (t >> 1)
    rho = 4 * v + 2 * j if v < 4 else 4 * (v - 4) + 2 * j + 1
    return 4 * rho + 2 * (t & 1)


def stream_meta(w, shift):
    """sp24s_meta."""
    out = 0
    for c in range(4):
        out |= ((w[c] >> shift) & 0x000F000F) << (4 * c)
    return out


class Stream:
    """sp24_stream's macros and launch for one parameter set, value size and problem."""

    def __init__(self, params, vb, M, K, N, num_sms):
        self.__dict__.update(params)
        self.vb, self.M, self.K, self.N = vb, M, K, N
        self.row_bytes = 32 * vb
        self.a_bytes = 16 * self.row_bytes
        self.meta_offset = self.MT * self.UP * self.a_bytes
        self.stage_bytes = self.MT * self.UP * (self.a_bytes + 128)
        self.ring_bytes = self.STAGES * self.stage_bytes
        self.part_floats = self.MT * self.NT * 128
        self.warp_bytes = self.ring_bytes + 8 * self.part_floats
        self.pairs = K // 64
        self.slice_pairs = self.WARPS * self.UP
        self.slices = -(-K // (64 * self.slice_pairs))  # the header's grid.y
        self.tiles = -(-M // (16 * self.MT))
        self.row_groups = max(1, min(self.tiles, self.BPS * num_sms // self.slices))  # grid.x
        # the header's shared_bytes expression, which the layout must fill exactly
        assert self.WARPS * self.warp_bytes == self.WARPS * (self.STAGES * self.MT * self.UP * (512 * vb + 128)
                                                              + 2 * self.MT * self.NT * 512)

    def copy_stage(self, mem, dst, a_bytes, meta_bytes, m0, p0):
        """sp24s_copy_stage: the 16-byte chunks each lane copies (a_bytes: A_values as bytes, M x K/2*vb)."""
        cpr = self.row_bytes // 16
        a_chunks, m_chunks = self.MT * 16 * self.UP * cpr, self.MT * self.UP * 8
        for lane in range(32):
            for k in range(-(-a_chunks // 32)):
                i = lane + 32 * k
                c, u, r, mt = i % cpr, (i // cpr) % self.UP, (i // (cpr * self.UP)) % 16, i // (cpr * self.UP * 16)
                if i < a_chunks and m0 + 16 * mt < self.M and p0 + u < self.pairs:
                    src = (32 * (p0 + u)) * self.vb + 16 * c
                    o = dst + ((mt * self.UP + u) * 16 + r) * self.row_bytes + 16 * c
                    mem[o:o + 16] = a_bytes[m0 + 16 * mt + r, src:src + 16]
            for k in range(-(-m_chunks // 32)):
                i = lane + 32 * k
                c, u, mt = i % 8, (i // 8) % self.UP, i // (8 * self.UP)
                if i < m_chunks and m0 + 16 * mt < self.M and p0 + u < self.pairs:
                    word = ((m0 // 16 + mt) * (self.K // 16) + 4 * (p0 + u)) * 8 + 4 * c
                    o = dst + self.meta_offset + (mt * self.UP + u) * 128 + 16 * c
                    mem[o:o + 16] = meta_bytes[4 * word:4 * word + 16]

    def b_fragments(self, mem, scratch, b_bytes, p0, fp8):
        """sp24s_stage_b, then sp24s_b_pair for every [u][j][nt][q] of every lane."""
        rows = 64 * min(self.pairs - p0, self.UP) if p0 < self.pairs else 0
        chunks = rows * self.N * self.vb // 16
        assert chunks * 16 == rows * self.N * self.vb  # no partial chunk
        run = b_bytes[64 * p0 * self.N * self.vb:][:16 * chunks]
        mem[scratch:scratch + 16 * chunks] = run
        # the scratch must lie inside the last ring slot and the accumulator buffers (the declared constraint)
        assert scratch + 16 * chunks <= self.warp_bytes * (scratch // self.warp_bytes + 1)

        def element(k, n):
            o = scratch + (k * self.N + n) * self.vb
            return int.from_bytes(bytes(mem[o:o + self.vb]), "little")

        frags = []
        for lane in range(32):
            g, t = divmod(lane, 4)
            regs = np.zeros((self.UP, 2, self.NT, 4), dtype=np.int64)
            for u in range(self.UP):
                for j in range(2):
                    for q in range(4):
                        k = 64 * u + stream_b_row(j, q, t)
                        for nt in range(self.NT):
                            n = 8 * nt + g
                            if 64 * u < rows and n < self.N:
                                lo, hi = element(k, n), element(k + 1, n)
                                regs[u, j, nt, q] = widen_e4m3x2(lo | hi << 8) if fp8 else lo | hi << 16
            frags.append(regs)
        return frags


def emulate_stream(p, params, dtype, num_sms):
    M, K, N = (p.symbols[s] for s in ("M", "K", "N"))
    fp8 = dtype == "fp8_e4m3"
    vb = 1 if fp8 else 2
    value = (lambda bits: f16(bits) * 256.0) if fp8 else f16 if dtype == "fp16" else bf16
    k = Stream(params, vb, M, K, N, num_sms)
    a_bytes = p.inputs["A_values"].view(np.uint8).reshape(M, K // 2 * vb)
    meta_bytes = p.inputs["A_meta"].view(np.uint8).reshape(-1)
    b_bytes = p.inputs["B"].view(np.uint8).reshape(-1)
    workspace = np.full((k.slices, M, 8 * k.NT, ), np.nan)  # the harness's 0xFF fill reads as NaN
    C = np.full((M, N), np.nan)
    for s in range(k.slices):
        for x in range(k.row_groups):
            smem = np.full(k.WARPS * k.warp_bytes, 0xCD, np.uint8)  # garbage where nothing was written
            floats = np.full(k.WARPS * k.warp_bytes // 4, np.nan)  # the accumulator buffers, kept in float64 here
            units = (k.tiles - 1 - x) // k.row_groups + 1 if x < k.tiles else 0
            m0_of = [16 * k.MT * (x + n * k.row_groups) for n in range(units)]
            frags = []
            for w in range(k.WARPS):
                ring, p0 = w * k.warp_bytes, s * k.slice_pairs + w * k.UP
                for n in range(min(k.STAGES - 1, units)):
                    k.copy_stage(smem, ring + n * k.stage_bytes, a_bytes, meta_bytes, m0_of[n], p0)
                frags.append(k.b_fragments(smem, ring + (k.STAGES - 1) * k.stage_bytes, b_bytes, p0, fp8))
            for n in range(units):
                m0 = m0_of[n]
                for w in range(k.WARPS):
                    ring, p0 = w * k.warp_bytes, s * k.slice_pairs + w * k.UP
                    if n + k.STAGES - 1 < units:
                        k.copy_stage(smem, ring + ((n + k.STAGES - 1) % k.STAGES) * k.stage_bytes, a_bytes,
                                     meta_bytes, m0_of[n + k.STAGES - 1], p0)
                    stage = ring + (n % k.STAGES) * k.stage_bytes
                    acc = np.zeros((k.MT, k.NT, 16, 8))
                    for u in range(k.UP):
                        if p0 + u >= k.pairs:
                            break
                        for mt in range(k.MT):
                            if m0 + 16 * mt >= M:
                                break
                            rows = stage + (mt * k.UP + u) * k.a_bytes
                            words = smem[stage + k.meta_offset + (mt * k.UP + u) * 128:][:128].view(np.uint32)
                            a0, a1, e0, e1 = [], [], [], []
                            for lane in range(32):
                                g, t = divmod(lane, 4)
                                xy = []
                                for r in (g, g + 8):  # sp24s_a_row
                                    o = rows + r * k.row_bytes
                                    if fp8:
                                        raw = smem[o + 8 * t:o + 8 * t + 8].view(np.uint32)
                                        xy.append([widen_e4m3x2(int(raw[0]) & 0xFFFF), widen_e4m3x2(int(raw[0]) >> 16),
                                                   widen_e4m3x2(int(raw[1]) & 0xFFFF), widen_e4m3x2(int(raw[1]) >> 16)])
                                    else:
                                        xy.append([int(v) for v in smem[o + 16 * t:o + 16 * t + 16].view(np.uint32)])
                                xr, yr = xy
                                a0.append([xr[0], yr[0], xr[1], yr[1]])
                                a1.append([xr[2], yr[2], xr[3], yr[3]])
                                w4 = [int(words[8 * c + g]) for c in range(4)]
                                e0.append(stream_meta(w4, 4 * (t & 1)))
                                e1.append(stream_meta(w4, 4 * (t & 1) + 8))
                            for nt in range(k.NT):
                                b0 = [frags[w][lane][u, 0, nt] for lane in range(32)]
                                b1 = [frags[w][lane][u, 1, nt] for lane in range(32)]
                                acc[mt, nt] += mma_k32(a0, b0, e0, value) + mma_k32(a1, b1, e1, value)
                    # the warp's accumulator buffer n & 1: [mt][nt][lane][d0..d3]
                    part = np.zeros((k.MT, k.NT, 32, 4))
                    for lane in range(32):
                        g, t = divmod(lane, 4)
                        part[:, :, lane] = np.stack([acc[:, :, g, 2 * t], acc[:, :, g, 2 * t + 1],
                                                     acc[:, :, g + 8, 2 * t], acc[:, :, g + 8, 2 * t + 1]], axis=-1)
                    at = (ring + k.ring_bytes) // 4 + (n & 1) * k.part_floats
                    floats[at:at + k.part_floats] = part.reshape(-1)
                for xx in range(k.MT * k.NT * 64):  # the reducing threads
                    h, ln, tile = xx & 1, (xx >> 1) & 31, xx >> 6
                    mt, nt = divmod(tile, k.NT)
                    row, col = m0 + 16 * mt + (ln >> 2) + 8 * h, 8 * nt + 2 * (ln & 3)
                    if row >= M:
                        continue
                    s0 = s1 = 0.0
                    for w in range(k.WARPS):
                        o = (w * k.warp_bytes + k.ring_bytes) // 4 + (n & 1) * k.part_floats + (tile * 32 + ln) * 4 + 2 * h
                        s0, s1 = s0 + floats[o], s1 + floats[o + 1]
                    if k.slices == 1:
                        for c, v in ((col, s0), (col + 1, s1)):
                            if c < N:
                                C[row, c] = v
                    else:
                        workspace[s, row, col:col + 2] = (s0, s1)
    if k.slices > 1:  # sp24_stream_reduce
        for row in range(M):
            for col in range(0, N, 2):
                total = sum(workspace[s, row, col:col + 2] for s in range(k.slices))
                C[row, col:col + 2] = total[:min(2, N - col)]
    return C


STREAM_CASES = [
    # two slices, the last holding one warp's pairs; the last tile's second m-tile past M; odd N; units wrap the ring
    ("fp16", {"MT": 2, "NT": 2, "WARPS": 4, "UP": 2, "STAGES": 3, "BPS": 1}, (80, 640, 13), 1),
    # one slice (C written by the main kernel), an idle warp, one n-tile
    ("bf16", {"MT": 1, "NT": 1, "WARPS": 4, "UP": 1, "STAGES": 2, "BPS": 1}, (48, 192, 8), 2),
    # three slices, several units per block
    ("fp8_e4m3", {"MT": 1, "NT": 2, "WARPS": 4, "UP": 2, "STAGES": 4, "BPS": 2}, (64, 1152, 16), 1),
]


@pytest.mark.parametrize(("dtype", "params", "shape", "sms"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_sp24_stream_indexing_gives_a_times_b(dtype, params, shape, sms):
    M, K, N = shape
    p, A, B = problem(dtype, M, K, N, seed=6)
    np.testing.assert_allclose(emulate_stream(p, params, dtype, sms), A @ B, rtol=1e-12, atol=1e-12)


def test_a_wrong_stream_relabelling_is_caught_by_the_emulation(monkeypatch):
    """The emulation is sharp: B rows of the other mma of the pair, or the other lane pair's nibbles, change the
    product."""
    p, A, B = problem("fp16", 32, 256, 16, seed=7)
    params = {"MT": 1, "NT": 2, "WARPS": 4, "UP": 1, "STAGES": 2, "BPS": 1}
    b_row, meta = stream_b_row, stream_meta
    monkeypatch.setattr(sys.modules[__name__], "stream_b_row", lambda j, q, t: b_row(1 - j, q, t))
    assert not np.allclose(emulate_stream(p, params, "fp16", 1), A @ B)
    monkeypatch.setattr(sys.modules[__name__], "stream_b_row", b_row)
    monkeypatch.setattr(sys.modules[__name__], "stream_meta", lambda w, shift: meta(w, shift ^ 4))
    assert not np.allclose(emulate_stream(p, params, "fp16", 1), A @ B)


# ---- the real kernels through the compile-only verifier ----------------------------------------------------------

STARTS = {"sp24_mma_sp": {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 4},
          "sp24_skinny": {"MT": 2, "NT": 2, "WARPS": 8, "UNROLL": 2},
          "sp24_stream": {"MT": 1, "NT": 2, "WARPS": 16, "UP": 2, "STAGES": 3, "BPS": 1}}
SKINNY_KERNELS = {"sp24_skinny", "sp24_stream"}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("kernel", sorted(STARTS))
def test_kernel_passes_the_compile_only_verifier(kernel, dtype, arch):
    N = 16 if kernel in SKINNY_KERNELS else 256
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": N, "dtype": dtype,
                       "arch": arch, "epilogue": {"bias": True, "activation": "gelu_tanh", "alpha": True}})
    report = CompileOnlyVerifier(arch).verify(get_kernel(kernel).instantiate(STARTS[kernel]), spec)
    assert report.compiled
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback
    assert {f.stage: f.status for f in report.feedback}["correctness"] == "not_executed"
    for entry, resources in report.resources.items():
        assert resources.spill_stores == 0 and resources.stack_bytes == 0, (entry, resources)


def test_sp24_stream_streams_a_with_16_byte_copies_and_keeps_b_in_registers():
    """The decode start's machine code: A and its metadata arrive by 16-byte cp.async only (no register loads of A
    in the loop), B by 16-byte loads once, no local memory, and registers for 512 threads on one SM."""
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 11008, "K": 4096, "N": 16,
                       "dtype": "fp16", "arch": "sm_90a"})
    report = CompileOnlyVerifier("sm_90a").verify(get_kernel("sp24_stream").instantiate(STARTS["sp24_stream"]), spec)
    sass = report.stage("static").evidence["sass"]["sp24_stream"]
    assert sass["async_copies"] > 0 and sass["global_loads_128"] >= 1
    assert sass["local_loads"] + sass["local_stores"] == 0
    assert report.resources["sp24_stream"].registers <= 128


def test_planner_starts_are_the_ones_verified_here():
    def starts(N, arch):
        spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": N, "arch": arch})
        return [(s.kernel, s.start) for s in FAMILY.strategies(spec, FAMILY.features(spec))]

    assert starts(4096, "sm_80")[0] == ("sp24_mma_sp", STARTS["sp24_mma_sp"])
    for arch in ("sm_80", "sm_90a"):
        skinny = starts(16, arch)
        assert [kernel for kernel, _ in skinny] == ["sp24_stream", "sp24_skinny", "sp24_mma_sp"]
        assert skinny[0][1] == STARTS["sp24_stream"]
        assert skinny[1][1] == STARTS["sp24_skinny"]

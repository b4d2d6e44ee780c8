"""sp24_wgmma_sp's indexing, emulated exactly on the CPU: the bytes its TMA copies and cp.async copies leave in a
stage (with the swizzles as functions of the shared-memory address), the matrix descriptors it builds (decoded field
by field and read back the way the PTX ISA defines K-major and MN-major swizzled layouts), the metadata word each
lane supplies, the sparse product as the ISA defines wgmma.mma_async.sp m64nNk32 (warp w gives rows 16w .. 16w+15
with the mma.sp m16n8k32 metadata figure, selector 0: lanes 0 and 1 of each quad), the accumulator fragment and the
epilogue's placement. If the emulated C equals A B, every index is right under those definitions; the GPU still has
to confirm the definitions themselves (the descriptor reading a swizzled tile from a start inside a swizzle row, the
proxy fence after cp.async). With CLUSTER = 2 the emulation runs both blocks of a cluster, each TMA thread writing its
share of the declared A and metadata boxes into every block. The mbarrier protocol, that of a cluster included, is
checked by a model under random schedules, and the kernel passes the compile-only verifier."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.agents.planner import offline_plan
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.sparse24_gemm import WGMMA_FP8_START, WGMMA_START
from sparseditto.tools.expr import evaluate
from sparseditto.tools.families.sparse24_gemm.compression import decompress
from sparseditto.tools.verifier import CompileOnlyVerifier

from test_sparse24_wgmma_gpu import FP8_VARIANTS  # the e4m3 variants its GPU test runs (the planner's start first)

FAMILY = get_family("sparse24_gemm")
SMEM_BASE = 3 * 1024  # where the rounded-up dynamic shared memory starts: any multiple of 1024
VALID_WORD = 0x44444444  # the kernel's stand-in for zero-filled metadata: positions 0 and 1 in every group


def problem(dtype, M, K, N, seed):
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": M, "K": K, "N": N, "dtype": dtype})
    p = FAMILY.make_problem(spec, seed)
    A = decompress(p.inputs["A_values"], p.inputs["A_meta"], M, K)
    return p, A, to_float64(p.inputs["B"], dtype)


# ---- shared memory as the hardware sees it ------------------------------------------------------------------------

SWIZZLE_MODES = {1: 128, 2: 64, 3: 32}  # descriptor's 2-bit mode -> swizzle span in bytes


def swizzle(addr, span):
    """The 16-byte chunk bits of a shared-memory address XOR-ed with the bits just above the span's row (TMA's and
    wgmma's swizzles are both this function of the address; span 128: bits 4..6 ^= 7..9, 64: 4..5 ^= 7..8)."""
    addr = np.asarray(addr)
    if span is None:
        return addr
    return addr ^ (((addr >> 7) & (span // 16 - 1)) << 4)


class Smem:
    """The block's dynamic shared memory, garbage where nothing was written."""

    def __init__(self, nbytes):
        self.b = np.full(nbytes, 0xCD, np.uint8)

    def write(self, addr, data):
        self.b[np.asarray(addr) - SMEM_BASE] = data

    def read16(self, addr):
        """16-bit patterns at byte addresses (any shape)."""
        a = np.asarray(addr) - SMEM_BASE
        return self.b[a].astype(np.uint16) | (self.b[a + 1].astype(np.uint16) << 8)

    def read8(self, addr):
        return self.b[np.asarray(addr) - SMEM_BASE]

    def read32(self, addr):
        a = np.asarray(addr) - SMEM_BASE
        return sum(self.b[a + i].astype(np.uint32) << (8 * i) for i in range(4))


def tma_2d(smem, dst, rows, x, y, box_w, box_h, elem, span):
    """cp.async.bulk.tensor.2d: the box (box_w elements, box_h rows) at element x, row y of `rows` (a 2-D uint8 view,
    one row per tensor row), zeros outside, written densely from `dst` then swizzled by address."""
    H, W = rows.shape
    box = np.zeros((box_h, box_w * elem), np.uint8)
    r1, c1 = min(H, y + box_h), min(W, (x + box_w) * elem)
    if r1 > y and c1 > x * elem:
        box[:r1 - y, :c1 - x * elem] = rows[y:r1, x * elem:c1]
    offs = dst + np.arange(box_h)[:, None] * (box_w * elem) + np.arange(box_w * elem)[None, :]
    smem.write(swizzle(offs, span), box)
    return box.size  # the bytes the copy credits to the mbarrier


# ---- the kernel's formulas, mirrored ------------------------------------------------------------------------------

KERNEL = get_kernel("sp24_wgmma_sp")
FP8_KERNEL = get_kernel("sp24_wgmma_sp_fp8")  # the same code for e4m3: B transposed first, K-major, k64 steps


class Kernel:
    def __init__(self, params, value_bytes=2):
        self.__dict__.update(params)
        self.ref = KERNEL if value_bytes == 2 else FP8_KERNEL  # the header whose launches and tensor maps apply
        self.vb = value_bytes
        self.kmajor = value_bytes == 1  # B_KMAJOR
        self.bt = None  # e4m3: Bt, once the transposition ran
        self.consumers = params.get("CONSUMERS", 2)  # the emulated cases name it only where it is 3
        self.env = {**params, "CONSUMERS": self.consumers, "value_bytes": value_bytes}
        self.slabs = self.BM // (64 * self.consumers)
        self.mma_n = 128 if self.consumers == 3 and self.BN == 256 else self.BN  # MMA_N: one instruction's columns
        self.parts, self.acc = self.BN // self.mma_n, self.mma_n // 2
        self.k_step = 64 // value_bytes  # K_STEP
        self.steps = self.BK // self.k_step
        self.b_bytes = self.BK * self.BN * value_bytes
        self.a_bytes = self.BM * self.BK // 2 * value_bytes
        self.a_boxes = self.a_bytes // (64 * self.BM)
        self.e_bytes = self.BM * self.BK // 8
        self.stage_bytes = -(-(self.b_bytes + self.a_bytes + self.e_bytes) // 1024) * 1024  # whole kilobytes


def desc(addr, lead, stride, mode):
    """sp24w_desc."""
    return ((addr & 0x3FFFF) >> 4) | ((lead >> 4) << 16) | ((stride >> 4) << 32) | (mode << 62)


def b_chunk_offset(kern, k, c):
    """Byte offset in the stage's B of 16-byte chunk c (8 columns) of row k (sp24w_load_b)."""
    return (c // 8) * (kern.BK * 128) + k * 128 + (((c % 8) ^ (k % 8)) << 4)


def load_b(kern, smem, stage, Bbits, k0, n0, N, K):
    """sp24w_load_b over all 128 producer threads: returns how many of them arrive (each once per stage)."""
    vb = Bbits.reshape(K, N)
    if N % 8 == 0:
        for i in range(kern.BK * kern.BN // 8):
            k, c = divmod(i, kern.BN // 8)
            valid = k0 + k < K and n0 + 8 * c < N
            chunk = vb[k0 + k, n0 + 8 * c:n0 + 8 * c + 8].view(np.uint8) if valid else np.zeros(16, np.uint8)
            smem.write(stage + b_chunk_offset(kern, k, c) + np.arange(16), chunk)
    else:
        for i in range(kern.BK * kern.BN):
            k, n = divmod(i, kern.BN)
            v = int(vb[k0 + k, n0 + n]) if k0 + k < K and n0 + n < N else 0
            o = stage + (n // 64) * (kern.BK * 128) + k * 128 + ((((n % 64) // 8) ^ (k % 8)) << 4) + 2 * (n % 8)
            smem.write([o, o + 1], [v & 0xFF, v >> 8])
    return 128


def declared_box(kern, name, **symbols):
    """A tensor map's box from the kernel's header (inner dimension first)."""
    return tuple(evaluate(e, {**kern.env, **symbols}) for e in kern.ref.tensor_maps[name].box)


def tma_share(kern, smems, s, p, kt, m0, rank):
    """The TMA thread of the cluster's block `rank`, iteration kt: its share of the A boxes and of the metadata box
    (boxes as declared; rows rank * BM/CLUSTER on), written to the same offsets of every block in `smems` (the
    multicast; one block without clusters). Returns the bytes credited to each block's full barrier."""
    M, K = p.symbols["M"], p.symbols["K"]
    stage = SMEM_BASE + s * kern.stage_bytes
    a_rows = p.inputs["A_values"].view(np.uint8).reshape(M, K // 2 * kern.vb)  # K/2 values per row
    e_rows = p.inputs["A_meta"].view(np.uint8).reshape(M // 16, 2 * K)  # K/2 words per 16-row block
    (a_w, a_h), (e_w, e_h) = declared_box(kern, "tmap_A"), declared_box(kern, "tmap_E")
    row = rank * (kern.BM // kern.CLUSTER)  # the kernel's `row`
    credited = 0
    for smem in smems:
        for j in range(kern.a_boxes):
            credited += tma_2d(smem, stage + kern.b_bytes + j * kern.BM * 64 + row * 64, a_rows,
                               kt * kern.BK // 2 + j * (64 // kern.vb), m0 + row, a_w, a_h, kern.vb, 64)
        credited += tma_2d(smem, stage + kern.b_bytes + kern.a_bytes + row * kern.BK // 8, e_rows, kt * kern.BK // 2,
                           (m0 + row) // 16, e_w, e_h, 4, None)
    return credited // len(smems)


def fill_stage(kern, smems, s, p, kt, m0, n0s):
    """Every block's producer, iteration kt into stage s (the blocks of one cluster, columns n0s): returns the byte
    count each block's TMA thread announces and the bytes credited to each block's barrier. B goes by TMA (the
    declared box, 128-byte swizzle, into each block alone) with BTMA = 1 and N a multiple of 8, else by cp.async."""
    M, K, N = (p.symbols[x] for x in ("M", "K", "N"))
    credited = sum(tma_share(kern, smems, s, p, kt, m0, rank) for rank in range(len(smems)))
    stage = SMEM_BASE + s * kern.stage_bytes
    if kern.kmajor:  # Bt (N x K) by TMA, always: boxes of 128 columns of K and BN rows, 128-byte swizzle
        if kern.bt is None:  # the sequence's first launch, once per call
            kern.bt = transpose_b(p.inputs["B"].view(np.uint8).reshape(-1), N, K).reshape(N, K)
        bt_rows = kern.bt
        box_w, box_h = declared_box(kern, "tmap_B", N=N, K=K)
        span = int(kern.ref.tensor_maps["tmap_B"].swizzle.removesuffix("B"))
        b_credited = [sum(tma_2d(smem, stage + j * kern.BN * 128, bt_rows, kt * kern.BK + 128 * j, n0, box_w, box_h, 1,
                                 span) for j in range(kern.BK // 128)) for smem, n0 in zip(smems, n0s)]
        assert len(set(b_credited)) == 1
        return kern.a_bytes + kern.e_bytes + kern.b_bytes, credited + b_credited[0]
    if kern.BTMA and N % 8 == 0:
        b_rows = p.inputs["B"].view(np.uint8).reshape(K, 2 * N)
        box_w, box_h = declared_box(kern, "tmap_B", N=N, K=K)
        span = int(KERNEL.tensor_maps["tmap_B"].swizzle.removesuffix("B"))  # as declared
        b_credited = [sum(tma_2d(smem, stage + j * kern.BK * 128, b_rows, n0 + 64 * j, kt * kern.BK, box_w, box_h, 2,
                                 span) for j in range(kern.BN // 64)) for smem, n0 in zip(smems, n0s)]
        assert len(set(b_credited)) == 1
        return kern.a_bytes + kern.e_bytes + kern.b_bytes, credited + b_credited[0]
    for smem, n0 in zip(smems, n0s):
        load_b(kern, smem, stage, p.inputs["B"].reshape(-1).view(np.uint16), kt * kern.BK, n0, N, K)
    return kern.a_bytes + kern.e_bytes, credited


def meta_word(kern, smem, stage, c, l, w, k, lane, pair_swap=False):
    """sp24w_load_meta: the metadata register of lane `lane` of warp w for slab l, step k, from the stage's stored
    words (16-bit: one word as it is; e4m3: one row's halves of two words, side by side). `pair_swap` swaps the lanes
    of each pair (the wrong word, or the wrong row's halves)."""
    block = stage + kern.b_bytes + kern.a_bytes + 4 * (4 * (c * kern.slabs + l) + w) * (kern.BK // 2)
    if not kern.kmajor:
        j = (lane & 1) ^ int(pair_swap)
        return int(smem.read32(block + 4 * ((2 * k + j) * 8 + lane // 4)))
    t = lane & 3
    low, high = (int(smem.read32(block + 4 * ((4 * k + 2 * (t >> 1) + i) * 8 + lane // 4))) for i in (0, 1))
    if (t & 1) ^ int(pair_swap):  # row g + 8: the upper halves
        return (low >> 16) | (high & 0xFFFF0000)
    return (low & 0xFFFF) | ((high & 0xFFFF) << 16)


def consumer_descriptors(kern, stage, c, l, k, p, a_mode=2):
    """The A and B descriptors of consumer c's instruction for slab l, step k and part p (columns p MMA_N ..)."""
    a_base, b_base = stage + kern.b_bytes, stage
    a_addr = a_base + (k // 2) * (kern.BM * 64) + (c * kern.slabs + l) * 64 * 64 + 32 * (k % 2)
    if kern.kmajor:
        return desc(a_addr, 16, 512, a_mode), desc(b_base + (k // 2) * (kern.BN * 128) + p * kern.mma_n * 128 + 64 * (k % 2),
                                                   16, 1024, 1)
    b_addr = b_base + p * (kern.mma_n // 64) * (kern.BK * 128) + 4096 * k
    return desc(a_addr, 16, 512, a_mode), desc(b_addr, kern.BK * 128, 1024, 1)


# ---- the instruction, as the PTX ISA defines it -----------------------------------------------------------------

def decode(d):
    return ((d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4, d >> 62)


def read_k_major(smem, d, rows, row_bytes, elem=2):
    """A K-major swizzled operand: element (row m, byte b) sits at start + (m % 8) * span + (m // 8) * stride + b
    before the swizzle (8-row core-matrix groups, rows one swizzle span apart); returns 16- or 8-bit patterns."""
    start, _, stride, mode = decode(d)
    span = SWIZZLE_MODES[mode]
    m, b = np.arange(rows)[:, None], np.arange(0, row_bytes, elem)[None, :]
    return (smem.read16 if elem == 2 else smem.read8)(swizzle(start + (m % 8) * span + (m // 8) * stride + b, span))


def read_mn_major(smem, d, k_rows, cols):
    """An MN-major swizzled operand: element (k, n) at start + (n % W) * 2 + (n // W) * lead + (k % 8) * span
    + (k // 8) * stride before the swizzle, W = span / 2 columns per swizzle row."""
    start, lead, stride, mode = decode(d)
    span = SWIZZLE_MODES[mode]
    k, n = np.arange(k_rows)[:, None], np.arange(cols)[None, :]
    w = span // 2
    return smem.read16(swizzle(start + (n % w) * 2 + (n // w) * lead + (k % 8) * span + (k // 8) * stride, span))


def wgmma_sp(d_acc, a_desc, b_desc, e, smem, n, value, accumulate, elem=2):
    """wgmma.mma_async.sp m64nNk32 (16-bit: A K-major, B MN-major) or m64nNk64 (e4m3: both K-major), A and B from
    shared memory, selector 0. `e[w][lane]` is the metadata register of lane `lane` of warp w: 16-bit (the mma.sp
    m16n8k32 figure), lane 4g + t (t = 0, 1) holds groups 4t .. 4t+3 of row g in its low half and of row g + 8 in
    its high half; e4m3 (CuTe's ELayout_64x64 for 8-bit sparse GMMA), lane 4g + t holds groups 8 (t // 2) ..
    8 (t // 2) + 7 of row g + 8 (t % 2). `d_acc[w][lane]` its N/2 accumulators (d[4j+2h+x] holds row
    16w + lane/4 + 8h, column 8j + 2(lane%4) + x)."""
    k = 64 // elem  # logical columns of K per instruction
    comp = value(read_k_major(smem, a_desc, 64, 32, elem))  # 64 x k/2 compressed, 32 bytes a row
    b = value(read_mn_major(smem, b_desc, k, n)) if elem == 2 else value(read_k_major(smem, b_desc, n, k, 1)).T
    a = np.zeros((64, k))
    for w in range(4):
        for r in range(16):
            g, h = r % 8, r // 8
            for v in range(k // 4):  # group v of the step's k logical columns
                if elem == 2:  # lane 4g + v // 4, nibble v % 4 of half h
                    code = (int(e[w][4 * g + v // 4]) >> (16 * h + 4 * (v % 4))) & 0xF
                else:  # lane 4g + 2 (v // 8) + h, nibble v % 8
                    code = (int(e[w][4 * g + 2 * (v // 8) + h]) >> (4 * (v % 8))) & 0xF
                first, second = code & 3, code >> 2
                assert first < second, f"warp {w} row {r} group {v}: code {code:#x} is not valid metadata"
                a[16 * w + r, 4 * v + first] = comp[16 * w + r, 2 * v]
                a[16 * w + r, 4 * v + second] = comp[16 * w + r, 2 * v + 1]
    prod = a @ b
    for w in range(4):
        for lane in range(32):
            g, t = divmod(lane, 4)
            for i in range(n // 2):
                row, col = 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)
                d_acc[w][lane][i] = prod[row, col] + (d_acc[w][lane][i] if accumulate else 0.0)


def f16(bits):
    return to_float64(np.asarray(bits, np.uint16), "fp16")


def bf16(bits):
    return to_float64(np.asarray(bits, np.uint16), "bf16")


def e4m3(bits):
    return to_float64(np.asarray(bits, np.uint8), "fp8_e4m3")


VALUES = {"fp16": f16, "bf16": bf16, "fp8_e4m3": e4m3}


def byte_perm(x, y, selector):
    """__byte_perm: byte i of the result is byte (selector >> 4 i) & 7 of y:x."""
    both = [(x >> 8 * i) & 0xFF for i in range(4)] + [(y >> 8 * i) & 0xFF for i in range(4)]
    return sum(both[(selector >> 4 * i) & 7] << 8 * i for i in range(4))


def transpose_b(b, N, K):
    """sp24w_transpose_b over its whole grid (B's bytes, flat): Bt's bytes, flat; every byte written once. Each block
    stores a 128 x 128 tile's 16-byte chunks at chunk ^ (row / 16 % 8), then thread t reads 16 words down the rows
    16 (t % 8) .. at column word t / 8 and turns them into 4 rows of Bt with byte permutes."""
    bt = np.full(N * K, -1, np.int16)  # the runner's 0xFF fill, told apart from any byte written
    for n0 in range(0, N, 128):
        for k0 in range(0, K, 128):  # K is a multiple of 64: the last tile may be half
            tile = np.zeros((128, 8, 16), np.uint8)
            for i in range(128 * 8):
                r, q = i // 8, i % 8
                n, chunk = n0 + 16 * q, np.zeros(16, np.uint8)
                if k0 + r < K:
                    if N % 16 == 0:  # 16-byte loads, whole chunks in or out
                        if n < N:
                            chunk = b[(k0 + r) * N + n:(k0 + r) * N + n + 16]
                    else:
                        for j in range(16):
                            if n + j < N:
                                chunk[j] = b[(k0 + r) * N + n + j]
                tile[r, q ^ (r // 16 % 8)] = chunk
            words = tile.reshape(-1).view("<u4")
            for tid in range(256):
                kc, g = tid % 8, tid // 8
                if k0 + 16 * kc >= K:
                    continue
                w = [int(words[(16 * kc + j) * 32 + 4 * ((g // 4) ^ kc) + g % 4]) for j in range(16)]
                out = np.zeros((4, 4), np.uint32)
                for m in range(4):
                    lo01, lo23 = byte_perm(w[4 * m], w[4 * m + 1], 0x5140), byte_perm(w[4 * m + 2], w[4 * m + 3], 0x5140)
                    hi01, hi23 = byte_perm(w[4 * m], w[4 * m + 1], 0x7362), byte_perm(w[4 * m + 2], w[4 * m + 3], 0x7362)
                    out[:, m] = (byte_perm(lo01, lo23, 0x5410), byte_perm(lo01, lo23, 0x7632),
                                 byte_perm(hi01, hi23, 0x5410), byte_perm(hi01, hi23, 0x7632))
                for i in range(4):
                    n = n0 + 4 * g + i
                    if n < N:
                        at = n * K + k0 + 16 * kc
                        assert (bt[at:at + 16] == -1).all()
                        bt[at:at + 16] = out[i].view(np.uint8)
    assert (bt >= 0).all()
    return bt.astype(np.uint8)


def tile_of(kern, linear, cols, rows, bx):
    """sp24w_tile: the (m0, n0) of tile `linear` for the block of grid index bx."""
    first = linear // (kern.RASTER * cols) * kern.RASTER
    height = min(rows - first, kern.RASTER)
    within = linear - first * cols
    return (first + within % height) * kern.BM, ((within // height) * kern.CLUSTER + bx % kern.CLUSTER) * kern.BN

# ---- the whole kernel ---------------------------------------------------------------------------------------------

def block_tile(kern, grid, bx, by):
    """The one tile of block (bx, by) without PERSIST."""
    cols = grid[0] // kern.CLUSTER
    return tile_of(kern, by * cols + bx // kern.CLUSTER, cols, grid[1], bx)


def emulate(p, params, dtype, pair_swap=False, a_mode=2, num_sms=3):
    kern = Kernel(params, 1 if dtype == "fp8_e4m3" else 2)
    M, K, N = (p.symbols[x] for x in ("M", "K", "N"))
    value = VALUES[dtype]
    tiles = -(-K // kern.BK)
    C = np.full((M, N), np.nan)
    env = {**kern.env, "M": M, "K": K, "N": N, "num_sms": num_sms}
    grid = [evaluate(e, env) for e in kern.ref.kernels[-1].grid]  # the GEMM, last of the sequence
    cluster = [evaluate(e, env) for e in kern.ref.kernels[-1].cluster]
    assert cluster == [kern.CLUSTER, 1, 1] and grid[0] % cluster[0] == 0
    cols, rows = -(-N // kern.BN), -(-M // kern.BM)  # tiles of C
    if kern.PERSIST:  # grid[0] blocks, each taking every grid[0]-th tile
        assert grid[1] == 1 and grid[0] == min(cols * rows, num_sms)
        work = [([b], list(range(b, cols * rows, grid[0])), cols, rows) for b in range(grid[0])]
    else:  # a block per tile; one cluster: blocks bx0 .. bx0 + CLUSTER - 1, same rows
        assert grid[1] == rows and grid[0] * kern.BN >= N > (grid[0] - kern.CLUSTER) * kern.BN  # no empty cluster
        work = [(list(range(bx0, bx0 + kern.CLUSTER)), [by * (grid[0] // kern.CLUSTER) + bx0 // kern.CLUSTER],
                 grid[0] // kern.CLUSTER, rows) for by in range(grid[1]) for bx0 in range(0, grid[0], kern.CLUSTER)]
    done = []
    for bxs, linears, tile_cols, tile_rows in work:
        smems = [Smem(kern.STAGES * kern.stage_bytes) for _ in bxs]
        # never zeroed, and kept from one tile to the next: scale-d 0 first
        accs = [np.full((kern.consumers, kern.slabs, kern.parts, 4, 32, kern.acc), np.nan) for _ in bxs]
        it = 0  # k-tiles over all the block's tiles: the stage and its round
        for linear in linears:
            taken = [tile_of(kern, linear, tile_cols, tile_rows, bx) for bx in bxs]
            (m0,) = {m for m, _ in taken}
            n0s = [n for _, n in taken]
            assert n0s == [n0s[0] + r * kern.BN for r in range(kern.CLUSTER)]  # the multicast's peers: neighbours
            done += taken
            for kt in range(tiles):
                s = it % kern.STAGES
                announced, credited = fill_stage(kern, smems, s, p, kt, m0, n0s)
                assert announced == credited, "expect_tx must equal the bytes the copies deliver"
                stage = SMEM_BASE + s * kern.stage_bytes
                for smem, acc in zip(smems, accs):
                    consume(kern, smem, acc, stage, kt, value, pair_swap, a_mode)
                it += 1
            for n0, acc in zip(n0s, accs):
                store(kern, C, acc, m0, n0)
    blocks_x = kern.CLUSTER * -(-cols // kern.CLUSTER)  # a cluster's second block may lie past N
    assert sorted(done) == [(m * kern.BM, n * kern.BN) for m in range(rows)
                            for n in range(blocks_x if not kern.PERSIST else cols)]
    return C


def consume(kern, smem, acc, stage, kt, value, pair_swap, a_mode):
    """Every consumer warpgroup of one block on the tile in `stage`."""
    for c in range(kern.consumers):
        for l in range(kern.slabs):
            for k in range(kern.steps):
                e = [[meta_word(kern, smem, stage, c, l, w, k, lane, pair_swap) for lane in range(32)] for w in range(4)]
                e = [[word or VALID_WORD for word in warp] for warp in e]
                for p in range(kern.parts):
                    a_d, b_d = consumer_descriptors(kern, stage, c, l, k, p, a_mode)
                    wgmma_sp(acc[c, l, p], a_d, b_d, e, smem, kern.mma_n, value, kt > 0 or k > 0, kern.vb)


def store(kern, C, acc, m0, n0):
    """The epilogue's placement (a block whose columns all lie past N stores nothing)."""
    M, N = C.shape
    for c in range(kern.consumers):
        for l in range(kern.slabs):
            for w in range(4):
                for lane in range(32):
                    g, t = divmod(lane, 4)
                    for h in range(2):
                        row = m0 + 64 * (c * kern.slabs + l) + 16 * w + g + 8 * h
                        if row >= M:
                            continue
                        for p in range(kern.parts):
                            for j in range(kern.mma_n // 8):
                                for x in range(2):
                                    col = n0 + p * kern.mma_n + 8 * j + 2 * t + x
                                    if col < N:
                                        C[row, col] = acc[c, l, p, w, lane, 4 * j + 2 * h + x]


CASES = [
    # whole slabs past M, K not a multiple of BK (half a tile of zero fill), N a multiple of 8 with a tail in the
    # second 64-column block of the last tile: the cp.async path
    ("fp16", {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0}, (208, 320, 200)),
    # two slabs per consumer, N not a multiple of 8 and past 64 columns: the element path
    ("bf16", {"BM": 256, "BN": 128, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0}, (272, 192, 125)),
    # clusters of two sharing A: 3 column tiles, so the last cluster's second block lies wholly past N; rows past M
    # in the second block row, whose share of A (rows 128 .. 255) is all zero fill; the element path
    ("fp16", {"BM": 256, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 2, "BTMA": 0, "RASTER": 1, "PERSIST": 0}, (272, 128, 140)),
    # one slab per consumer (each block's share is the other's slab), BK = 128 (two A boxes per stage), N a multiple
    # of 8: the cp.async path
    ("bf16", {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 2, "BTMA": 0, "RASTER": 1, "PERSIST": 0}, (144, 192, 384)),
    # B by TMA: the 64-column boxes, zero past K (half a tile) and past N (the second block of the last tile)
    ("fp16", {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0}, (208, 320, 200)),
    # B by TMA in clusters: the last cluster's second block's boxes lie wholly past N (all zero fill)
    ("bf16", {"BM": 256, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 2, "BTMA": 1, "RASTER": 1, "PERSIST": 0}, (272, 128, 136)),
    # BTMA = 1 with N not a multiple of 8: the element path
    ("bf16", {"BM": 256, "BN": 128, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0}, (272, 192, 125)),
    # tiles in groups of 4 rows swept column by column, a last group of 1 row (5 tile rows)
    ("fp16", {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 1, "RASTER": 4, "PERSIST": 0}, (560, 128, 200)),
    # the same with clusters of two: the peers stay neighbours in their row
    ("bf16", {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 2, "BTMA": 1, "RASTER": 4, "PERSIST": 0}, (560, 128, 200)),
    # persistent: 3 blocks over 5 x 4 tiles, bands of 4 rows, the accumulators and the stage rounds carried from
    # tile to tile; B by TMA, then by cp.async (N not a multiple of 8, 5 k-tiles per tile against 3 stages)
    ("fp16", {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 4, "PERSIST": 1}, (560, 128, 200)),
    ("bf16", {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 1}, (560, 320, 197)),
    # three consumer warpgroups of one slab each, 256 columns as two 128-column instructions: B by TMA with the last
    # tile's second part wholly past N, the second tile row's consumers 1 and 2 wholly past M, stages of 46 KB rounded up
    ("fp16", {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0,
              "CONSUMERS": 3}, (208, 192, 320)),
    # the same by the element path, three tile rows
    ("bf16", {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 2, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0,
              "CONSUMERS": 3}, (400, 128, 300)),
    # persistent, one 128-column instruction per slab, two A boxes per stage
    ("fp16", {"BM": 192, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 4, "PERSIST": 1,
              "CONSUMERS": 3}, (560, 320, 200)),
    # e4m3 (sp24_wgmma_sp_fp8): B transposed, then by TMA K-major. Slabs past M, 2.5 k-tiles (zero fill past K in
    # A, metadata and Bt; the transposition's last tile half), N a multiple of 16 with a tail inside the last tile
    # (the transposition's 16-byte path)
    ("fp8_e4m3", {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0},
     (208, 320, 208)),
    # two slabs per consumer, two Bt boxes per stage (BK 256), N odd (the transposition's byte path), bands of 4 rows
    ("fp8_e4m3", {"BM": 256, "BN": 128, "BK": 256, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 4, "PERSIST": 0},
     (272, 448, 125)),
    # clusters of two sharing A, the last cluster's second block wholly past N
    ("fp8_e4m3", {"BM": 256, "BN": 64, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 2, "BTMA": 1, "RASTER": 1, "PERSIST": 0},
     (272, 192, 136)),
    # persistent over 5 x 3 tiles; 256-column instructions on one slab per consumer
    ("fp8_e4m3", {"BM": 128, "BN": 64, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 4, "PERSIST": 1},
     (560, 384, 130)),
    ("fp8_e4m3", {"BM": 128, "BN": 256, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0},
     (144, 256, 300)),
]


@pytest.mark.parametrize(("dtype", "params", "shape"), CASES,
                         ids=[f"{c[0]}-cluster{c[1]['CLUSTER']}-btma{c[1]['BTMA']}-raster{c[1]['RASTER']}-persist{c[1]['PERSIST']}-{c[1]['BM']}x{c[1]['BN']}-n{c[2][2]}"
                              for c in CASES])
def test_emulated_kernel_gives_a_times_b(dtype, params, shape):
    M, K, N = shape
    p, A, B = problem(dtype, M, K, N, seed=7)
    np.testing.assert_allclose(emulate(p, params, dtype), A @ B, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("raster", [1, 4, 8, 16])
def test_the_tile_order_covers_every_tile_once_and_keeps_the_resident_blocks_in_a_band(raster, cluster):
    """The first RASTER * clusters-per-row blocks launched take RASTER whole tile rows' worth of columns from the first
    tile rows only; every tile is taken once, whatever the grid."""
    kern = Kernel({"BM": 128, "BN": 128, "CLUSTER": cluster, "RASTER": raster, "BK": 64, "STAGES": 3})
    for rows, cols in ((1, 2), (5, 8), (21, 6), (32, 64), (33, 14)):
        grid = (cols, rows)
        order = [block_tile(kern, grid, bx, by) for by in range(rows) for bx in range(cols)]
        assert sorted(order) == [(m * 128, n * 128) for m in range(rows) for n in range(cols)]
        band = order[:min(raster, rows) * cols]
        assert {m // 128 for m, _ in band} == set(range(min(raster, rows)))
        if raster > 1 and rows >= raster:
            assert order[cluster][0] == 128  # the second cluster launched is the next row's, not the next column's


def test_a_wrong_metadata_lane_pair_changes_the_product():
    p, A, B = problem("fp16", 128, 64, 64, seed=8)
    params = {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0}
    assert not np.allclose(emulate(p, params, "fp16", pair_swap=True), A @ B)
    p, A, B = problem("fp8_e4m3", 128, 128, 64, seed=8)  # four lanes of a quad: 0 <-> 1 and 2 <-> 3
    params = {"BM": 128, "BN": 64, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0}
    assert not np.allclose(emulate(p, params, "fp8_e4m3", pair_swap=True), A @ B)


def test_e4m3_needs_each_lanes_row_assembled_not_the_stored_word_as_it_is(monkeypatch):
    """Handing lane 4g + t the stored word (16-row block, 4k + t, g), 16 columns of two rows as the 16-bit lanes take
    them, instead of one row's 32 columns gives a wrong e4m3 product (or codes no instruction accepts)."""
    def as_stored(kern, smem, stage, c, l, w, k, lane, pair_swap=False):
        block = stage + kern.b_bytes + kern.a_bytes + 4 * (4 * (c * kern.slabs + l) + w) * (kern.BK // 2)
        return int(smem.read32(block + 4 * ((4 * k + (lane & 3)) * 8 + lane // 4)))

    p, A, B = problem("fp8_e4m3", 128, 128, 64, seed=8)
    params = {"BM": 128, "BN": 64, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0}
    np.testing.assert_allclose(emulate(p, params, "fp8_e4m3"), A @ B, rtol=1e-12, atol=1e-12)
    monkeypatch.setitem(globals(), "meta_word", as_stored)
    try:
        wrong = emulate(p, params, "fp8_e4m3")
    except AssertionError:  # a nibble pair that names no two positions
        return
    assert not np.allclose(wrong, A @ B)


def test_a_wrong_swizzle_in_the_a_descriptor_changes_the_product():
    """128-byte instead of the 64-byte swizzle TMA wrote: rows read their compressed values from the wrong chunks."""
    p, A, B = problem("bf16", 128, 64, 64, seed=9)
    params = {"BM": 128, "BN": 64, "BK": 64, "STAGES": 3, "LAG": 2, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0}
    assert not np.allclose(emulate(p, params, "bf16", a_mode=1), A @ B)


def test_stored_metadata_has_no_zero_word():
    """The kernel turns zero words into a valid code: only TMA's zero fill may be zero, never a stored word."""
    p, _, _ = problem("fp16", 64, 256, 8, seed=10)
    assert (p.inputs["A_meta"] != 0).all()


def test_shared_memory_holds_stages_barriers_and_alignment():
    for params in ({"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 2, "CLUSTER": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0},
                   {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 2, "CLUSTER": 2, "BTMA": 0, "RASTER": 1, "PERSIST": 0},
                   {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "BTMA": 1, "RASTER": 8, "PERSIST": 0,
                    "CONSUMERS": 3}):
        kern = Kernel(params)
        declared = evaluate(KERNEL.kernels[0].shared_bytes, kern.env)
        assert declared == kern.STAGES * kern.stage_bytes + 16 * kern.STAGES + 1024  # stages, barriers, rounding
        assert kern.stage_bytes % 1024 == 0  # every stage in the same swizzle phase (192 rows: 46592 -> 47104 bytes)


# ---- the mbarrier protocol ---------------------------------------------------------------------------------------

class Mbarrier:
    """Phase-counting model: try_wait.parity(P) succeeds once the phase of parity P has completed, which a fresh
    barrier counts as true for P = 1 (the phase before its first). A phase completes once its arrivals are all in
    and its transaction count is back to zero (complete_tx may come before the expect_tx: the count goes negative)."""

    def __init__(self, count):
        self.count, self.pending, self.phase, self.tx = count, count, 0, 0

    def arrive(self):
        self.pending -= 1
        self._complete()

    def expect_tx(self, n):
        """mbarrier.arrive.expect_tx: raise the transaction count, then arrive."""
        self.tx += n
        self.arrive()

    def complete_tx(self, n):
        self.tx -= n
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def passed(self, parity):
        return (self.phase & 1) != parity


def consumer_program(tiles, inflight):
    """The consumer loop of the kernel for INFLIGHT = 0 and 1, transcribed step by step: ("wait", t) the full barrier
    of tile t (then its metadata words), ("issue", t, first) its group, ("retire", n) wgmma.wait_group n, ("release",
    t) the empty-barrier arrivals for tile t's stage."""
    ops = []
    if inflight == 0:
        for kt in range(tiles):
            ops += [("wait", kt), ("issue", kt, kt == 0), ("retire", 0), ("release", kt)]
        return ops
    ops.append(("wait", 0))
    for kt in range(0, tiles, 2):
        ops += [("issue", kt, kt == 0), ("retire", 1)] + ([("release", kt - 1)] if kt > 0 else [])
        if kt + 1 == tiles:
            break
        ops += [("wait", kt + 1), ("issue", kt + 1, False), ("retire", 1), ("release", kt)]
        if kt + 2 < tiles:
            ops.append(("wait", kt + 2))
    return ops + [("retire", 0), ("release", tiles - 1)]


class Consumer:
    """One consumer running a program: the groups in flight, the stages they read, the tiles released in order."""

    def __init__(self, program, stages):
        self.ops, self.pc, self.stages = program, 0, stages
        self.flight, self.issued, self.released = [], 0, 0
        self.reading = [False] * stages  # a group in flight reads the stage

    def blocked(self, full):
        """Whether the next step waits for a full barrier that has not completed."""
        op = self.ops[self.pc]
        return op[0] == "wait" and not full[op[1] % self.stages].passed((op[1] // self.stages) & 1)

    def step(self, held):
        """The next step; returns the tile whose stage it releases, else None. `held(s)`: the tiles stage s holds."""
        op = self.ops[self.pc]
        self.pc += 1
        if op[0] == "issue":
            kt, s = op[1], op[1] % self.stages
            assert kt == self.issued and op[2] == (kt == 0), f"tile {kt} issued out of order or with a wrong scale-d"
            assert held(s) == kt, f"consumer reads {held(s)} for tile {kt}"
            self.reading[s], self.issued = True, self.issued + 1
            self.flight.append(kt)
        elif op[0] == "retire":
            while len(self.flight) > op[1]:
                self.reading[self.flight.pop(0) % self.stages] = False
        elif op[0] == "release":
            assert op[1] == self.released, f"tile {op[1]} released out of order"
            self.released += 1
            return op[1]
        return None

    def done(self):
        return self.pc == len(self.ops)


PIPELINES = [(2, 1, 7, 0), (3, 1, 3, 0), (3, 2, 9, 0), (4, 2, 11, 0), (5, 4, 2, 0), (5, 4, 13, 0),
             (3, 1, 7, 1), (3, 1, 8, 1), (4, 2, 1, 1), (4, 2, 9, 1), (6, 2, 13, 1), (6, 4, 12, 1), (5, 3, 2, 1)]


@pytest.mark.parametrize(("stages", "lag", "tiles", "inflight"), PIPELINES)
def test_pipeline_never_reads_early_nor_overwrites_unreleased_stages(stages, lag, tiles, inflight, program=None):
    """The kernel's parities and signalling points, under random interleavings of the producer and the consumers
    (one agent stands for each side): the producer signals tile t once it has issued tile t + lag (all at the end),
    the consumer runs the kernel's loop (with INFLIGHT = 1 it releases tile t - 1 only after issuing tile t and
    waiting for all groups but that one: two tiles are read at once); every read sees its own tile, no stage is
    refilled while a group in flight reads it, every tile is released once, none hangs."""
    rng = np.random.default_rng(stages * 1000 + lag * 100 + tiles * 10 + inflight)
    for _ in range(200):
        full = [Mbarrier(1) for _ in range(stages)]
        empty = [Mbarrier(1) for _ in range(stages)]
        held = [None] * stages  # which tile a stage holds
        cons = Consumer(program or consumer_program(tiles, inflight), stages)
        prod, signalled = 0, 0
        while not cons.done():
            if prod == tiles:  # after the loop: wait_group 0, then the last tiles signalled in order
                while signalled < tiles:
                    full[signalled % stages].arrive()
                    signalled += 1
            can_produce = prod < tiles and empty[prod % stages].passed(((prod // stages) & 1) ^ 1)
            can_consume = not cons.blocked(full)
            assert can_produce or can_consume, f"deadlock at producer {prod}, consumer step {cons.ops[cons.pc]}"
            if can_produce and (not can_consume or rng.random() < 0.5):
                s = prod % stages
                assert not cons.reading[s], f"tile {prod} overwrites stage {s} while tile {held[s]} is read"
                held[s] = prod
                if prod >= lag:
                    full[(prod - lag) % stages].arrive()
                    signalled += 1
                prod += 1
            elif (released := cons.step(held.__getitem__)) is not None:
                empty[released % stages].arrive()
        assert cons.issued == cons.released == tiles and not cons.flight


def test_a_lag_of_stages_or_more_deadlocks():
    """Why the header requires LAG + INFLIGHT < STAGES, here with INFLIGHT = 0: the producer would wait for a stage
    whose tile it has not signalled."""
    with pytest.raises(AssertionError, match="deadlock"):
        test_pipeline_never_reads_early_nor_overwrites_unreleased_stages(3, 3, 9, 0)


def test_one_group_in_flight_needs_one_stage_more():
    """Why the header requires LAG + INFLIGHT < STAGES: waiting for tile t the consumer still holds tile t - 1, so the
    producer, which signals t only after issuing t + LAG, needs a stage more; the same depth suffices without it."""
    test_pipeline_never_reads_early_nor_overwrites_unreleased_stages(3, 2, 9, 0)
    with pytest.raises(AssertionError, match="deadlock"):
        test_pipeline_never_reads_early_nor_overwrites_unreleased_stages(3, 2, 9, 1)


def test_releasing_a_tile_before_its_group_retired_lets_the_producer_overwrite_it():
    """The release of tile t - 1 must follow wait_group 1: moved before it, a stage is refilled while read."""
    tiles, ops = 9, consumer_program(9, 1)
    early = []
    for op in ops:  # each ("retire", 1), ("release", t) pair swapped
        if op[0] == "release" and early and early[-1] == ("retire", 1):
            early.insert(len(early) - 1, op)
        else:
            early.append(op)
    assert early != ops
    with pytest.raises(AssertionError, match="overwrites"):
        test_pipeline_never_reads_early_nor_overwrites_unreleased_stages(3, 1, tiles, 1, program=early)


def run_cluster_pipeline(rng, stages, lag, tiles, cluster=2, remote_release=True, empty_count=None, exit_barrier=True,
                         inflight=0):
    """One random schedule of the kernel's protocol with CLUSTER > 1: per block a producer (the 128 B copiers and the
    TMA thread as one agent) and a consumer (its eight warps as one agent, running consumer_program for INFLIGHT).
    Asynchronous events are in flight until the schedule delivers them, in any order: each TMA share lands in every
    block (complete_tx on that block's full barrier), each consumer release reaches the peers' empty barriers. Checks
    that no write lands in a stage before that block's consumers released its previous tile nor while they read it,
    that every read sees its own tile in all shares and in B, that nothing arrives or lands in a block that has
    exited, and that none hangs."""
    blocks = range(cluster)
    full = [[Mbarrier(2) for _ in range(stages)] for _ in blocks]  # FULL_ARRIVALS: B landed + the expect_tx
    empty = [[Mbarrier(empty_count or cluster) for _ in range(stages)] for _ in blocks]  # EMPTY_ARRIVALS
    held_a = [[[None] * cluster for _ in range(stages)] for _ in blocks]  # tile of each share of A in each stage
    held_b = [[None] * stages for _ in blocks]
    consumers = [Consumer(consumer_program(tiles, inflight), stages) for _ in blocks]
    prod, signalled = [0] * cluster, [0] * cluster
    done_p, done_c, exited = [False] * cluster, [False] * cluster, [False] * cluster
    in_flight = []  # ("copy", block, stage, share, tile) or ("arrive", block, stage, from block)
    arrived = 0  # threads (agents) at the cluster's exit barrier

    def may_write(b, s, kt, what):
        assert not exited[b], f"{what} of tile {kt} lands in block {b} after it exited"
        assert not consumers[b].reading[s], f"{what} of tile {kt} overwrites stage {s} of block {b} while it is read"
        assert kt < stages or consumers[b].released > kt - stages, \
            f"{what} of tile {kt} overwrites stage {s} of block {b} before tile {kt - stages} was released there"

    while not all(exited):
        actions = []
        for b in blocks:
            s_p = prod[b] % stages
            if prod[b] < tiles and empty[b][s_p].passed(((prod[b] // stages) & 1) ^ 1):
                actions.append(("produce", b))
            if prod[b] == tiles and not done_p[b]:
                actions.append(("producer_end", b))
            if not consumers[b].done() and not consumers[b].blocked(full[b]):
                actions.append(("consume", b))
            # the exit barrier's arrive (.release) follows the consumer's remote arrivals: they have been performed
            if consumers[b].done() and not done_c[b] and not [e for e in in_flight if e[0] == "arrive" and e[3] == b]:
                actions.append(("consumer_end", b))
            ready = arrived == 2 * cluster if exit_barrier else done_p[b] and done_c[b]
            if ready and not exited[b]:
                actions.append(("exit", b))
        actions += [("deliver", i) for i in range(len(in_flight))]
        assert actions, (f"deadlock: producers at {prod}, consumers at {[c.ops[c.pc:c.pc + 1] for c in consumers]}, "
                         f"{arrived} at the exit barrier")
        kind, b = actions[rng.integers(len(actions))]  # b: the block, or for "deliver" the event's index
        if kind == "produce":  # after the empty wait: expect_tx, the TMA shares, this block's B copies
            kt = prod[b]
            s = kt % stages
            may_write(b, s, kt, "B")
            held_b[b][s] = kt
            full[b][s].expect_tx(cluster)  # every share's bytes land on this block's barrier
            in_flight += [("copy", d, s, b, kt) for d in blocks]  # the multicast: this block's share to every block
            if kt >= lag:
                full[b][(kt - lag) % stages].arrive()
                signalled[b] += 1
            prod[b] += 1
        elif kind == "producer_end":  # wait_group 0, the last tiles' B signalled, the exit barrier's arrive
            while signalled[b] < tiles:
                full[b][signalled[b] % stages].arrive()
                signalled[b] += 1
            done_p[b], arrived = True, arrived + 1
        elif kind == "consume":  # a read sees every A share and B of its tile; a release arrives here and at the peers
            def held(s, b=b):  # the tile in stage s, or what each share and B hold when they differ
                return held_b[b][s] if held_a[b][s] == [held_b[b][s]] * cluster else (held_a[b][s], held_b[b][s])

            if (kt := consumers[b].step(held)) is not None:
                s = kt % stages
                empty[b][s].arrive()
                if remote_release:
                    in_flight += [("arrive", d, s, b) for d in blocks if d != b]
        elif kind == "consumer_end":
            done_c[b], arrived = True, arrived + 1
        elif kind == "exit":
            assert not [e for e in in_flight if e[1] == b], f"block {b} exits with {in_flight} still on the way"
            exited[b] = True
        else:  # "deliver"
            event = in_flight.pop(b)
            if event[0] == "copy":
                _, d, s, share, kt = event
                may_write(d, s, kt, f"A share {share}")
                held_a[d][s][share] = kt
                full[d][s].complete_tx(1)
            else:
                _, d, s, _ = event
                assert not exited[d], f"a release arrives at block {d} after it exited"
                empty[d][s].arrive()


@pytest.mark.parametrize(("stages", "lag", "tiles", "inflight"),
                         [(2, 1, 7, 0), (3, 1, 3, 0), (3, 2, 9, 0), (4, 2, 11, 0), (6, 2, 13, 0), (5, 4, 2, 0),
                          (3, 1, 7, 1), (4, 2, 10, 1), (6, 2, 13, 1), (6, 4, 1, 1)])
def test_cluster_pipeline_never_overwrites_a_stage_before_both_blocks_released_it(stages, lag, tiles, inflight):
    rng = np.random.default_rng(stages * 1000 + lag * 100 + tiles * 10 + inflight)
    for _ in range(300):
        run_cluster_pipeline(rng, stages, lag, tiles, inflight=inflight)


def test_one_group_in_flight_in_a_cluster_needs_one_stage_more():
    rng = np.random.default_rng(5)
    with pytest.raises(AssertionError, match="deadlock"):
        for _ in range(300):
            run_cluster_pipeline(rng, 3, 2, 9, inflight=1)


def test_a_release_sent_to_its_own_block_only_deadlocks_or_overwrites():
    """Each consumer warp must arrive on its peer's empty barrier too: without that arrival the peer's producer
    waits forever for a count of both blocks, and with a count of its own block only it multicasts into stages the
    other block still reads."""
    rng = np.random.default_rng(3)
    with pytest.raises(AssertionError, match="deadlock"):
        run_cluster_pipeline(rng, 3, 2, 9, remote_release=False)
    with pytest.raises(AssertionError, match="overwrites"):
        for _ in range(300):
            run_cluster_pipeline(rng, 3, 2, 9, remote_release=False, empty_count=1)


def test_a_block_leaving_without_the_cluster_barrier_can_still_be_written():
    """The exit barrier: a block whose own work is done may still receive its peer's last releases."""
    rng = np.random.default_rng(4)
    with pytest.raises(AssertionError, match="exit"):
        for _ in range(300):
            run_cluster_pipeline(rng, 3, 2, 9, exit_barrier=False)


# ---- the real kernel through the compile-only verifier, and the planner's start ---------------------------------

# 192 x 256 tiles on three consumer warpgroups (bench/explore_kernels.py times both, last)
THREE_CONSUMERS = [{"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8,
                    "PERSIST": persist, "CONSUMERS": 3} for persist in (0, 1)]

@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("params", [
    WGMMA_START, {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 128, "BN": 64, "BK": 64, "STAGES": 6, "LAG": 4, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
    {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 1, "CONSUMERS": 2},
    *THREE_CONSUMERS],
    ids=["start", "tall", "narrow", "cluster", "inflight", "inflight-cluster", "inflight-wide", "btma-inflight", "btma-cluster",
         "persistent", "three-consumers", "three-consumers-persistent"])
def test_kernel_passes_the_compile_only_verifier(dtype, params):
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": 4096, "dtype": dtype,
                       "arch": "sm_90a", "epilogue": {"bias": True, "activation": "gelu_tanh", "alpha": True}})
    report = CompileOnlyVerifier("sm_90a").verify(KERNEL.instantiate(params), spec)
    assert report.compiled
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback
    assert {f.stage: f.status for f in report.feedback}["correctness"] == "not_executed"
    resources = report.resources["sp24_wgmma_sp"]
    assert resources.spill_stores == 0 and resources.stack_bytes == 0, resources
    assert resources.registers <= 168, resources  # 384 threads on one SM's 64K registers


@pytest.mark.parametrize("params", FP8_VARIANTS, ids=[f"{p['BM']}x{p['BN']}x{p['BK']}-cluster{p['CLUSTER']}-inflight"
                                                     f"{p['INFLIGHT']}-persist{p['PERSIST']}" for p in FP8_VARIANTS])
def test_the_e4m3_sequence_passes_the_compile_only_verifier(params):
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": 4096, "dtype": "fp8_e4m3",
                       "arch": "sm_90a", "epilogue": {"bias": True, "activation": "relu", "alpha": True}})
    report = CompileOnlyVerifier("sm_90a").verify(FP8_KERNEL.instantiate(params), spec)
    assert report.compiled
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback
    for entry in ("sp24_wgmma_sp", "sp24w_transpose_b"):
        resources = report.resources[entry]
        assert resources.spill_stores == 0 and resources.stack_bytes == 0, resources
    assert report.resources["sp24_wgmma_sp"].registers <= 168


def test_hopper_compute_bound_specs_start_with_wgmma_and_keep_mma_sp_behind_it():
    def starts(**over):
        spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": 4096, **over})
        return [(s.kernel, s.start) for s in offline_plan(spec).strategies]

    first, second = starts(arch="sm_90a")
    assert first == ("sp24_wgmma_sp", WGMMA_START) and second[0] == "sp24_mma_sp"
    assert starts(arch="sm_90")[0][0] == "sp24_wgmma_sp"
    assert [k for k, _ in starts(arch="sm_80")] == ["sp24_mma_sp"]
    assert starts(arch="sm_90a", dtype="fp8_e4m3") == [("sp24_wgmma_sp_fp8", WGMMA_FP8_START), second]
    assert [k for k, _ in starts(arch="sm_90a", N=128)] == ["sp24_mma_sp"]
    assert [k for k, _ in starts(arch="sm_90a", N=16)] == ["sp24_stream", "sp24_skinny", "sp24_mma_sp"]


@pytest.mark.parametrize(("N", "lags"), [(4096, [1]), (4100, [1, 2])])
def test_lag_is_searched_only_where_b_goes_by_cp_async(N, lags):
    """LAG paces the cp.async copies of B: with B by TMA (N a multiple of 8) every LAG compiles to the same behaviour,
    so the search space keeps one value there."""
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 4096, "K": 4096, "N": N, "dtype": "fp16",
                       "arch": "sm_90a"})
    wgmma = next(s for s in offline_plan(spec).strategies if s.kernel == "sp24_wgmma_sp")
    assert wgmma.start["BTMA"] == 1 and wgmma.space["LAG"] == lags

/*---
name: spmv_csr_nonempty
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: empty_rows
summary: >
  For matrices whose rows are mostly empty (hypersparse matrices, tall LP matrices, graphs with isolated
  vertices). The preparation `nonempty_rows` lists the nonempty rows once with their extents, so the walk spends
  no thread on an empty row and never reads an empty row's pointers: rows longer than LONG_ROW get a warp each
  (its 32 / GROUP groups take consecutive slices and add up with shuffles), the others GROUP lanes each (16-byte
  loads of 4 nonzeros per lane as in spmv_csr_vec4). The same launch's last
  blocks store the zeros of the empty rows: each owns 16 * BLOCK consecutive rows, marks the nonempty ones among
  them in a shared bitmap from the sorted list, and stores 0 to the others with coalesced writes. Every y is
  written once, by one thread: no race between the walk and the fill, whichever runs first.
preparation: nonempty_rows
streams: [colind, values, walk_row, walk_start, walk_end, fill_rows, fill_first]
parameters:
  GROUP: [1, 2, 4, 8, 16]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  LONG_ROW: [32, 64, 128, 256, 512]
  HINT: [0, 1]
kernels:
  - entry: spmv_nonempty
    grid: ["ceil_div(n_long * 32, BLOCK) + ceil_div(n_short * GROUP, BLOCK) + n_fill_blocks", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [colind, values, x, y, walk_row, walk_start, walk_end, fill_rows, fill_first, n_long, n_short, n_fill_blocks, M, nnz]
---*/
// Blocks [0, LB), LB = ceil(n_long * 32 / BLOCK): warp w walks list entry w (a long row), each of its 32 / GROUP
// groups a consecutive slice of the row (quad-aligned bounds), then the groups' sums are added across the warp.
// Blocks [LB, LB + SB), SB = ceil(n_short * GROUP / BLOCK): group g of those blocks walks entry n_long + g.
// An entry i is row walk_row[i], nonzeros walk_start[i] .. walk_end[i] - 1; the first lane of its warp (long) or
// group (short) stores y. One call site walks both kinds: two inlined walks made ptxas spill in 16-bit types.
// Blocks LB + SB + f fill: rows f * F .. (f + 1) * F - 1 (F = SD_FILL_ROWS), of which fill_rows[fill_first[f] ..
// fill_first[f+1]) are nonempty; every other row of the range gets 0.
#define SD_FILL_ROWS (16 * BLOCK)
#define SD_SLICES (32 / GROUP)

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_nonempty(const int* __restrict__ colind, const value_t* __restrict__ values,
              const value_t* __restrict__ x, value_t* __restrict__ y,
              const int* __restrict__ walk_row, const int* __restrict__ walk_start, const int* __restrict__ walk_end,
              const int* __restrict__ fill_rows, const int* __restrict__ fill_first,
              int n_long, int n_short, int n_fill_blocks, int M, int nnz)
{
    const int long_blocks = (int)(((long long)n_long * 32 + BLOCK - 1) / BLOCK);
    const int short_blocks = (int)(((long long)n_short * GROUP + BLOCK - 1) / BLOCK);
    const int b = (int)blockIdx.x;
    if (b >= long_blocks + short_blocks) {  // the fill: a branch the whole block takes
        __shared__ unsigned nonempty[SD_FILL_ROWS / 32];
        const int f = b - long_blocks - short_blocks;
        const long long base = (long long)f * SD_FILL_ROWS;
        for (int w = threadIdx.x; w < SD_FILL_ROWS / 32; w += BLOCK) nonempty[w] = 0u;
        __syncthreads();
        const int last = __ldg(fill_first + f + 1);
        for (int i = __ldg(fill_first + f) + threadIdx.x; i < last; i += BLOCK) {
            const int r = (int)(__ldg(fill_rows + i) - base);
            atomicOr(&nonempty[r >> 5], 1u << (r & 31));
        }
        __syncthreads();
        for (int r = threadIdx.x; r < SD_FILL_ROWS && base + r < M; r += BLOCK)
            if (!((nonempty[r >> 5] >> (r & 31)) & 1u)) y[base + r] = sd_from_f32(0.f);
        return;
    }
    const bool is_long = b < long_blocks;  // also a branch the whole block takes
    const int per_entry = is_long ? 32 : GROUP;
    const long long e = ((long long)(is_long ? b : b - long_blocks) * BLOCK + threadIdx.x) / per_entry;
    const bool valid = e < (is_long ? n_long : n_short);
    const int i = (int)e + (is_long ? 0 : n_long);
    const int lane = threadIdx.x % GROUP;
    int lo = valid ? __ldg(walk_start + i) : 0;
    int hi = valid ? __ldg(walk_end + i) : 0;
    if (is_long) {  // group s of the warp: quads [base + s * step, base + (s + 1) * step) of the row
        const int base = lo & ~3;
        const int step = ((hi - base + SD_SLICES - 1) / SD_SLICES + 3) & ~3;
        const int s = (threadIdx.x % 32) / GROUP;
        lo = max(lo, base + s * step);
        hi = min(hi, base + (s + 1) * step);
    }
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();
    float acc = sd_quad_walk<GROUP, UNROLL, HINT, 0>(colind, values, x, lo, hi, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (is_long) {  // the groups' sums, held by lanes 0, GROUP, 2 GROUP, ..., onto lane 0
#pragma unroll
        for (int offset = 16; offset >= GROUP; offset >>= 1)
            acc += __shfl_down_sync(SD_FULL_MASK, acc, offset);
    }
    if (valid && threadIdx.x % per_entry == 0) y[__ldg(walk_row + i)] = sd_from_f32(acc);
}

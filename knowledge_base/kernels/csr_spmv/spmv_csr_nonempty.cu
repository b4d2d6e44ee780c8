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
  vertices). The preparation `nonempty_rows` lists the nonempty rows once with their extents, so the walk (GROUP
  lanes per row, 16-byte loads of 4 nonzeros per lane as in spmv_csr_vec4) spends no warp on an empty row and
  never reads an empty row's pointers. The same launch's last blocks store the zeros of the empty rows: each
  owns 8 * BLOCK consecutive rows, marks the nonempty ones among them in a shared bitmap from the list, and
  stores 0 to the others with coalesced writes. Every y is written once, by one thread: no race between the
  walk and the fill, whichever runs first.
preparation: nonempty_rows
parameters:
  GROUP: [1, 2, 4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  HINT: [0, 1]
kernels:
  - entry: spmv_nonempty
    grid: ["ceil_div(n_nonempty * GROUP, BLOCK) + n_fill_blocks", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [colind, values, x, y, nz_rows, nz_ptr, fill_first, n_nonempty, n_fill_blocks, M, nnz]
---*/
// Blocks [0, W) with W = gridDim.x - n_fill_blocks walk: thread t belongs to group t / GROUP, which owns
// nonempty row i = t / GROUP, nonzeros nz_ptr[i] .. nz_ptr[i+1]; lane 0 stores y[nz_rows[i]].
// Blocks W + f fill: rows f * F .. (f + 1) * F - 1 (F = SD_FILL_ROWS), of which nz_rows[fill_first[f] ..
// fill_first[f+1]) are nonempty; every other row of the range gets 0.
#define SD_FILL_ROWS (8 * BLOCK)

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_nonempty(const int* __restrict__ colind, const value_t* __restrict__ values,
              const value_t* __restrict__ x, value_t* __restrict__ y,
              const int* __restrict__ nz_rows, const int* __restrict__ nz_ptr,
              const int* __restrict__ fill_first, int n_nonempty, int n_fill_blocks, int M, int nnz)
{
    const int walk_blocks = (int)gridDim.x - n_fill_blocks;
    if ((int)blockIdx.x >= walk_blocks) {  // the fill: a branch the whole block takes
        __shared__ unsigned nonempty[SD_FILL_ROWS / 32];
        const int f = (int)blockIdx.x - walk_blocks;
        const long long base = (long long)f * SD_FILL_ROWS;
        for (int w = threadIdx.x; w < SD_FILL_ROWS / 32; w += BLOCK) nonempty[w] = 0u;
        __syncthreads();
        const int last = __ldg(fill_first + f + 1);
        for (int i = __ldg(fill_first + f) + threadIdx.x; i < last; i += BLOCK) {
            const int r = (int)(__ldg(nz_rows + i) - base);
            atomicOr(&nonempty[r >> 5], 1u << (r & 31));
        }
        __syncthreads();
        for (int r = threadIdx.x; r < SD_FILL_ROWS && base + r < M; r += BLOCK)
            if (!((nonempty[r >> 5] >> (r & 31)) & 1u)) y[base + r] = sd_from_f32(0.f);
        return;
    }
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long i = t / GROUP;
    const bool valid = i < n_nonempty;
    const int start = valid ? __ldg(nz_ptr + i) : 0;
    const int end = valid ? __ldg(nz_ptr + i + 1) : 0;
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();

    float acc = sd_quad_walk<GROUP, UNROLL, HINT, 0>(colind, values, x, start, end, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0) y[__ldg(nz_rows + i)] = sd_from_f32(acc);
}

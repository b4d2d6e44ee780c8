/*---
name: spmv_csr_vec4
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: vector
summary: >
  A group of GROUP lanes per row; each lane reads 4 consecutive nonzeros with one 16-byte load of
  column indices (and one 16- or 8-byte load of values), aligned to 4 elements and masked to the row,
  so every lane has 4*UNROLL independent gathers of x in flight. The matrix is streamed (no L1
  allocation; HINT=1 adds an L2 evict-first policy so x stays in L2). Best for rows of similar
  length: pick GROUP*4*UNROLL near the typical row length. XL selects the x gather: 0 through the
  read-only path with L1 allocation, 1 cached in L2 only (ld.global.cg).
measured:  # H200 (sm_90), offline pipeline runs; median of 30 with L2 flushed
  - {spec: spmv_fp32_uniform, gpu: NVIDIA H200, params: {BLOCK: 256, GROUP: 4, HINT: 1, UNROLL: 2, XL: 0}, median_us: 125.8, best_baseline: cusparse_spmv_csr_alg1_pre,
     best_baseline_us: 131.4, speedup: 1.04, source: evals/results/core_pipeline_h200.md}
  - {spec: spmv_fp32_powerlaw, gpu: NVIDIA H200, params: {BLOCK: 256, GROUP: 8, HINT: 1, UNROLL: 2, XL: 0}, median_us: 663.8, best_baseline: cusparse_spmv_default_pre,
     best_baseline_us: 133.0, speedup: 0.2, source: evals/results/core_pipeline_h200.md}
streams: [rowptr, colind, values]
parameters:
  GROUP: [1, 2, 4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  HINT: [0, 1]
  XL: [0, 1]
kernels:
  - entry: spmv_csr_vec4
    grid: ["ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, M, nnz]
---*/
// Mapping: thread t belongs to group t / GROUP, which owns row t / GROUP. The row's nonzeros
// [start, end) are covered by aligned quads q = start & ~3, q + 4, ...; lane l of the group takes quads
// l, l + GROUP, ... (UNROLL of them per step, all loads issued before the FMAs). Elements of a quad
// outside the row are masked (column -1, no gather). The group reduces with shuffles; lane 0 writes.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_csr_vec4(const int* __restrict__ rowptr, const int* __restrict__ colind,
              const value_t* __restrict__ values, const value_t* __restrict__ x,
              value_t* __restrict__ y, int M, int nnz)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    const int start = valid ? __ldg(rowptr + row) : 0;
    const int end = valid ? __ldg(rowptr + row + 1) : 0;
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();

    float acc = sd_quad_walk<GROUP, UNROLL, HINT, XL>(colind, values, x, start, end, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0) y[row] = sd_from_f32(acc);
}

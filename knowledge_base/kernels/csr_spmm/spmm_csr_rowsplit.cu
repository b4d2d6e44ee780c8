/*---
name: spmm_csr_rowsplit
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: row_split
summary: >
  Row-split SpMM: a group of LANES lanes per row of A (32 / LANES rows per warp) and a tile of
  LANES*VW columns of B/C per group, with 16-byte loads of B rows. Narrow products (N = 32 in fp32)
  keep 16-byte loads and every lane busy with 8 lanes a row instead of 32 lanes of 4-byte loads:
  three times fewer shuffles and loads a product. Rows of B are gathered through L1/L2; best when B
  rows are reused by neighbouring rows or the density is low.
measured:  # H200 (sm_90), offline pipeline runs; median of 30 with L2 flushed
  - {spec: spmm_fp32_1pct, gpu: NVIDIA H200, params: {LANES: 32, UNROLL: 8, VW: 4, WARPS: 4}, median_us: 21.1, best_baseline: cusparse_spmm_csr_alg3_row_pre,
     best_baseline_us: 23.9, speedup: 1.13, source: evals/results/core_pipeline_h200.md}
  - {spec: spmm_fp32_5pct, gpu: NVIDIA H200, params: {LANES: 32, UNROLL: 8, VW: 4, WARPS: 4}, median_us: 72.8, best_baseline: cusparse_spmm_csr_alg3_row,
     best_baseline_us: 76.1, speedup: 1.04, source: evals/results/core_pipeline_h200.md}
  - {spec: spmm_fp16_1pct, gpu: NVIDIA H200, params: {LANES: 32, UNROLL: 4, VW: 8, WARPS: 2}, median_us: 18.6, best_baseline: cusparse_spmm_csr_alg3_row_pre,
     best_baseline_us: 16.5, speedup: 0.89, source: evals/results/core_pipeline_h200.md}
  - {spec: spmm_fp16_5pct, gpu: NVIDIA H200, params: {LANES: 32, UNROLL: 4, VW: 8, WARPS: 4}, median_us: 61.2, best_baseline: cublas_dense_gemm_torch,
     best_baseline_us: 21.5, speedup: 0.35, source: evals/results/core_pipeline_h200.md}
streams: [rowptr, colind, values]
parameters:
  VW: [1, 2, 4, 8]
  LANES: [4, 8, 16, 32]
  WARPS: [2, 4, 8, 16]
  UNROLL: [2, 4, 8]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "VW * value_bytes <= 16"
  - "value_bytes == 4 or VW >= 2"
  - "LANES == 4 or LANES * VW <= 2 * N"  # at most half of a group's lanes idle
kernels:
  - entry: spmm_csr_rowsplit
    grid: ["ceil_div(M, WARPS * (32 // LANES))", "ceil_div(N, LANES * VW)", "1"]
    block: ["32 * WARPS", "1", "1"]
    args: [rowptr, colind, values, B, C, M, N]
---*/
// Mapping: lane group g (lanes g*LANES .. +LANES) of warp w in block (bx, by) computes
// C[row, c0 : c0 + LANES*VW) for row = (bx*WARPS + w) * (32/LANES) + g and c0 = by*LANES*VW; lane l of
// the group owns the VW consecutive columns c0 + l*VW. The group reads LANES nonzeros of its row at once
// (one coalesced load), broadcasts each (column, value) pair with shuffles inside the group and gathers
// the matching row slice of B with one VW-wide load per lane; UNROLL gathers are issued before their
// FMAs so that several rows of B are in flight (sd_group_walk, the family's prelude). Groups of one warp run their own rows' trip counts:
// every shuffle names only its group's lanes. B and C are row-major with N columns.
#define RPW (32 / LANES)

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_rowsplit(const int* __restrict__ rowptr, const int* __restrict__ colind,
                  const value_t* __restrict__ values, const value_t* __restrict__ B,
                  value_t* __restrict__ C, int M, int N)
{
    const int lane = threadIdx.x % 32, group = lane / LANES, gl = lane % LANES;
    const int row = (blockIdx.x * WARPS + threadIdx.x / 32) * RPW + group;
    if (row >= M) return;  // the row is uniform across the group: whole groups leave
    const unsigned gmask = LANES == 32 ? SD_FULL_MASK : ((1u << (LANES % 32)) - 1u) << (group * LANES);
    const int c0 = blockIdx.y * (LANES * VW) + gl * VW;
    const bool vec_ok = (N % VW == 0) && (c0 + VW <= N);
    const int start = __ldg(rowptr + row), end = __ldg(rowptr + row + 1);

    float acc[VW];
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[v] = 0.f;

    sd_group_walk<LANES, UNROLL, VW>(colind, values, start, end, LANES, gl, gmask, B, N, c0, vec_ok, acc);
    value_t* crow = C + (long long)row * N + c0;
#pragma unroll
    for (int v = 0; v < VW; ++v)
        if (c0 + v < N) crow[v] = sd_from_f32(acc[v]);
}

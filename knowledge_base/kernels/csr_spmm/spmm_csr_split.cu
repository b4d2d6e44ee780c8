/*---
name: spmm_csr_split
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: skewed
summary: >
  Row-split SpMM for skewed row lengths (power-law graphs, circuits with dense rows): in row split a
  group of lanes walks its whole row, so one row of thousands of nonzeros keeps one warp busy long after
  the rest have finished. Here rows longer than LONG_ROW are cut into chunks of CHUNK nonzeros (the
  preparation `long_row_chunk_ptr`), each taken by a whole warp whose lane groups share it out and
  meet by shuffles; a row of one chunk is written by its warp, the others leave fp32 partial rows in a
  workspace that a second launch sums in chunk order (no atomics: the same sum on every call). Short
  rows run as in spmm_csr_rowsplit: LANES lanes a row, VW columns a lane, UNROLL gathers in flight.
measured:  # H200 (sm_90), offline pipeline runs of session 20, each against the best cuSPARSE configuration
  - {spec: circuit_5m-spmm-fp32-n32, gpu: NVIDIA H200, params: {VW: 4, LANES: 8, WARPS: 4, UNROLL: 8, LONG_ROW: 128, CHUNK: 512},
     median_us: 183.9, best_baseline: cusparse_spmm_csr_alg3_row, best_baseline_us: 298.2, speedup: 1.62,
     source: evals/results/issue14_h200/spmm_skewed_session20_results.jsonl}
  - {spec: lp_wide_6m-spmm-fp32-n32, gpu: NVIDIA H200, params: {VW: 4, LANES: 8, WARPS: 4, UNROLL: 8, LONG_ROW: 128, CHUNK: 512},
     median_us: 262.0, best_baseline: cusparse_spmm_csr_alg3_row_pre, best_baseline_us: 299.2, speedup: 1.14,
     source: evals/results/issue14_h200/spmm_skewed_session20_results.jsonl}
  - {spec: lp_wide_6m-spmm-fp32-n128, gpu: NVIDIA H200, params: {VW: 4, LANES: 8, WARPS: 2, UNROLL: 4, LONG_ROW: 128, CHUNK: 512},
     median_us: 890.0, best_baseline: cusparse_spmm_csr_alg2_row, best_baseline_us: 619.4, speedup: 0.70,
     source: evals/results/issue14_h200/spmm_skewed_session20_results.jsonl}
preparation: long_row_chunk_ptr
streams: [rowptr, colind, values, chunk_long_index, chunk_start, long_rows, long_chunk_ptr, multi_rows]
parameters:
  VW: [1, 2, 4, 8]
  LANES: [4, 8, 16, 32]
  WARPS: [2, 4, 8]
  UNROLL: [2, 4, 8]
  LONG_ROW: [128, 256, 512, 1024]
  CHUNK: [256, 512, 1024, 2048]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "VW * value_bytes <= 16"
  - "value_bytes == 4 or VW >= 2"
  - "LANES == 4 or LANES * VW <= 2 * N"  # at most half of a group's lanes idle
  - "CHUNK >= LONG_ROW"  # a chunk holds at least as much as the longest short row
workspace:
  partial: {dtype: fp32, size: "max(n_long_chunks, 1) * N"}
kernels:
  - entry: spmm_split_main
    grid: ["ceil_div(n_long_chunks, WARPS) + ceil_div(M, WARPS * (32 // LANES))", "ceil_div(N, LANES * VW)", "1"]
    block: ["32 * WARPS", "1", "1"]
    args: [rowptr, colind, values, B, C, partial, chunk_long_index, chunk_start, long_rows, long_chunk_ptr,
           n_long_chunks, M, N]
  - entry: spmm_split_finish
    grid: ["max(n_multi_rows, 1)", "ceil_div(N, 128)", "1"]
    block: ["128", "1", "1"]
    args: [partial, long_chunk_ptr, long_rows, multi_rows, C, n_multi_rows, N]
---*/
// Kernel 1, blocks [0, CB) with CB = ceil(n_long_chunks / WARPS): warp w of block bx takes chunk
// c = bx*WARPS + w, nonzeros [chunk_start[c], min(+CHUNK, row end)) of row long_rows[chunk_long_index[c]]. Its
// RPW = 32 / LANES lane groups take batches of LANES nonzeros in turn (group g: batches g, g + RPW, ...), add
// their sums by xor shuffles across groups, and group 0 stores the chunk's columns c0 .. c0 + VW (c0 =
// by*LANES*VW + lane*VW): into C when the row has this one chunk, else into partial[c][.]. Blocks >= CB: group g
// of warp w takes row ((bx - CB)*WARPS + w)*RPW + g as spmm_csr_rowsplit does, unless it is longer than LONG_ROW.
// Kernel 2: block (b, by) sums, in chunk order, the partial rows of long row multi_rows[b] (a row of several
// chunks) for columns by*128 + thread and stores them in C. Long chunks come first in the grid, so they start
// early and the short rows fill in behind them.
#define RPW (32 / LANES)

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_split_main(const int* __restrict__ rowptr, const int* __restrict__ colind,
                const value_t* __restrict__ values, const value_t* __restrict__ B, value_t* __restrict__ C,
                float* __restrict__ partial, const int* __restrict__ chunk_long_index,
                const int* __restrict__ chunk_start, const int* __restrict__ long_rows,
                const int* __restrict__ long_chunk_ptr, int n_long_chunks, int M, int N)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = lane / LANES, gl = lane % LANES;
    const unsigned gmask = LANES == 32 ? SD_FULL_MASK : ((1u << (LANES % 32)) - 1u) << (group * LANES);
    const int c0 = blockIdx.y * (LANES * VW) + gl * VW;
    const bool vec_ok = (N % VW == 0) && (c0 + VW <= N);
    float acc[VW];
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[v] = 0.f;

    const int chunk_blocks = (n_long_chunks + WARPS - 1) / WARPS;
    if ((int)blockIdx.x < chunk_blocks) {
        const int chunk = blockIdx.x * WARPS + warp;
        if (chunk >= n_long_chunks) return;  // whole warps leave together
        const int i = __ldg(chunk_long_index + chunk), row = __ldg(long_rows + i);
        const int begin = __ldg(chunk_start + chunk), end = min(begin + CHUNK, __ldg(rowptr + row + 1));
        sd_group_walk<LANES, UNROLL, VW>(colind, values, begin + group * LANES, end, 32, gl, gmask, B, N, c0, vec_ok,
                                         acc);
        // the groups' sums meet; every lane of the warp is here
#pragma unroll
        for (int offset = LANES; offset < 32; offset <<= 1)
#pragma unroll
            for (int v = 0; v < VW; ++v) acc[v] += __shfl_xor_sync(SD_FULL_MASK, acc[v], offset);
        if (group != 0) return;
        if (__ldg(long_chunk_ptr + i + 1) - __ldg(long_chunk_ptr + i) == 1) {
            value_t* crow = C + (long long)row * N + c0;
#pragma unroll
            for (int v = 0; v < VW; ++v)
                if (c0 + v < N) crow[v] = sd_from_f32(acc[v]);
        } else {
            float* prow = partial + (long long)chunk * N + c0;
#pragma unroll
            for (int v = 0; v < VW; ++v)
                if (c0 + v < N) prow[v] = acc[v];
        }
        return;
    }
    const long long row = ((long long)(blockIdx.x - chunk_blocks) * WARPS + warp) * RPW + group;
    if (row >= M) return;  // the row is uniform across the group: whole groups leave
    const int start = __ldg(rowptr + row), end = __ldg(rowptr + row + 1);
    if (end - start > LONG_ROW) return;  // its chunks took it
    sd_group_walk<LANES, UNROLL, VW>(colind, values, start, end, LANES, gl, gmask, B, N, c0, vec_ok, acc);
    value_t* crow = C + row * N + c0;
#pragma unroll
    for (int v = 0; v < VW; ++v)
        if (c0 + v < N) crow[v] = sd_from_f32(acc[v]);
}

extern "C" __global__ void __launch_bounds__(128)
spmm_split_finish(const float* __restrict__ partial, const int* __restrict__ long_chunk_ptr,
                  const int* __restrict__ long_rows, const int* __restrict__ multi_rows,
                  value_t* __restrict__ C, int n_multi_rows, int N)
{
    const int col = blockIdx.y * 128 + threadIdx.x;
    if ((int)blockIdx.x >= n_multi_rows || col >= N) return;  // also when no row has several chunks
    const int i = __ldg(multi_rows + blockIdx.x);
    const int lo = __ldg(long_chunk_ptr + i), hi = __ldg(long_chunk_ptr + i + 1);
    float sum = 0.f;
    for (int k = lo; k < hi; ++k) sum += __ldcg(partial + (long long)k * N + col);
    C[(long long)__ldg(long_rows + i) * N + col] = sd_from_f32(sum);
}

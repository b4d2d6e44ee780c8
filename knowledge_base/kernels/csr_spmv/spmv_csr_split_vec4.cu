/*---
name: spmv_csr_split_vec4
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: skewed
summary: >
  For skewed (power-law) row lengths, with 16-byte loads of 4 nonzeros per lane as in spmv_csr_vec4.
  One launch does both parts: its first blocks cut rows longer than LONG_ROW into chunks of CHUNK
  nonzeros, one warp per chunk, each writing its partial sum to an fp32 workspace (no atomics, no
  zeroing); the remaining blocks treat the short rows with GROUP lanes per row. A second small launch
  sums the partials of the rows longer than CHUNK (several chunks), one block per such row; a row of
  one chunk is written directly by its warp. Needs the preparation `long_row_chunk_ptr`. EARLY 1 (sm_90)
  lets the second kernel begin once the first one's last block has started: where no row has several chunks it
  has nothing to add, and its launch then overlaps the first's tail instead of following it.
preparation: long_row_chunk_ptr
measured:  # H200 (sm_90), offline pipeline runs; median of 30 with L2 flushed
  - {spec: spmv_fp32_powerlaw, gpu: NVIDIA H200, params: {BLOCK: 256, CHUNK: 4096, GROUP: 4, HINT: 1, LONG_ROW: 64, UNROLL: 2}, median_us: 141.1, best_baseline: cusparse_spmv_default_pre,
     best_baseline_us: 131.9, speedup: 0.93, source: evals/results/core_pipeline_h200_powerlaw_rerun.md}
streams: [rowptr, colind, values, chunk_long_index, chunk_start, long_rows, long_chunk_ptr, multi_rows]
parameters:
  GROUP: [1, 2, 4, 8, 16]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  LONG_ROW: [32, 64, 128, 256, 512]
  CHUNK: [256, 512, 1024, 2048, 4096]
  HINT: [0, 1]
  EARLY: [0, 1]
workspace:
  partial: {dtype: fp32, size: "max(n_long_chunks, 1)"}
kernels:
  - entry: spmv_split4_main
    grid: ["ceil_div(n_long_chunks * 32, BLOCK) + ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, partial, chunk_long_index, chunk_start, long_rows, n_long_chunks, M, nnz]
  - entry: spmv_split4_finish
    grid: ["max(n_multi_rows, 1)", "1", "1"]
    block: ["256", "1", "1"]
    early: "EARLY"
    args: [partial, long_chunk_ptr, long_rows, multi_rows, y, n_multi_rows]
---*/
// Kernel 1, blocks [0, LB) with LB = ceil(n_long_chunks * 32 / BLOCK): warp w takes chunk
// [chunk_start[w], min(+CHUNK, row end)) of long row long_rows[chunk_long_index[w]], walks it in aligned
// quads (lane l: quads l, l + 32, ..., UNROLL per step), reduces across the warp and stores partial[w].
// Blocks >= LB: as spmv_csr_vec4 over all rows, skipping rows longer than LONG_ROW. Long-row chunks come
// first in the grid so they start early and the short rows fill in behind them.
// Kernel 2: block b takes long row i = multi_rows[b] (a row of several chunks), sums
// partial[long_chunk_ptr[i] .. long_chunk_ptr[i+1]) and writes y[long_rows[i]]. Rows of one chunk were
// written by their warp in kernel 1 (partial is never read for them).
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_split4_main(const int* __restrict__ rowptr, const int* __restrict__ colind,
                 const value_t* __restrict__ values, const value_t* __restrict__ x,
                 value_t* __restrict__ y, float* __restrict__ partial,
                 const int* __restrict__ chunk_long_index, const int* __restrict__ chunk_start,
                 const int* __restrict__ long_rows, int n_long_chunks, int M, int nnz)
{
    if (EARLY) sd_allow_next_launch();  // the finish may start once the last block has started
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();
    const int long_blocks = (int)(((long long)n_long_chunks * 32 + BLOCK - 1) / BLOCK);
    if ((int)blockIdx.x < long_blocks) {
        const int warp = (blockIdx.x * BLOCK + threadIdx.x) / 32;
        const int lane = threadIdx.x % 32;
        if (warp >= n_long_chunks) return;  // whole warps leave together
        const int row = __ldg(long_rows + __ldg(chunk_long_index + warp));
        const int begin = __ldg(chunk_start + warp);
        const int row_end = __ldg(rowptr + row + 1);
        const int end = min(begin + CHUNK, row_end);
        // the row's only chunk: the warp owns the whole row and writes y itself
        const bool single = begin == __ldg(rowptr + row) && row_end - begin <= CHUNK;
        float acc = sd_quad_walk<32, UNROLL, HINT, 0>(colind, values, x, begin, end, lane, nnz, pol);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            acc += __shfl_down_sync(SD_FULL_MASK, acc, offset);
        if (lane == 0) {
            if (single) y[row] = sd_from_f32(acc);
            else partial[warp] = acc;
        }
        return;
    }
    const long long t = (long long)(blockIdx.x - long_blocks) * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    const int start = valid ? __ldg(rowptr + row) : 0;
    int end = valid ? __ldg(rowptr + row + 1) : 0;
    const bool is_long = end - start > LONG_ROW;
    if (is_long) end = start;
    float acc = sd_quad_walk<GROUP, UNROLL, HINT, 0>(colind, values, x, start, end, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0 && !is_long) y[row] = sd_from_f32(acc);
}

extern "C" __global__ void __launch_bounds__(256)
spmv_split4_finish(const float* __restrict__ partial, const int* __restrict__ long_chunk_ptr,
                   const int* __restrict__ long_rows, const int* __restrict__ multi_rows,
                   value_t* __restrict__ y, int n_multi_rows)
{
    __shared__ float red[8];
    // the preparation's arrays first (with EARLY, while the first kernel still runs), then its partial sums
    const bool active = (int)blockIdx.x < n_multi_rows;
    const int i = active ? __ldg(multi_rows + blockIdx.x) : 0;
    const int lo = active ? __ldg(long_chunk_ptr + i) : 0, hi = active ? __ldg(long_chunk_ptr + i + 1) : 0;
    if (EARLY) sd_wait_earlier_launches();
    if (!active) return;  // the whole block leaves (also when there are none)
    float acc = 0.f;
    // through L2 (ld.global.cg), never the non-coherent path: with EARLY this grid began before those writes
    for (int j = lo + threadIdx.x; j < hi; j += 256) acc += __ldcg(partial + j);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) s += red[w];
        y[__ldg(long_rows + i)] = sd_from_f32(s);
    }
}

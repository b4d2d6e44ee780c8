/*---
name: spmv_csr_split_long
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: skewed
summary: >
  For skewed (power-law) row lengths. Short rows go to a lane group as in the vector kernel; rows
  longer than LONG_ROW are cut into chunks of CHUNK nonzeros, one warp per chunk, whose partial sums
  meet in an fp32 workspace by atomics. Needs the one-time preparation `long_row_chunks`.
preparation: long_row_chunks
parameters:
  GROUP: [2, 4, 8, 16]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  LONG_ROW: [64, 128, 256, 512]
  CHUNK: [256, 512, 1024]
workspace:
  long_acc: {dtype: fp32, size: "max(n_long_rows, 1)"}
kernels:
  - entry: spmv_split_short_rows
    grid: ["ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, long_acc, n_long_rows, M]
  - entry: spmv_split_long_chunks
    grid: ["ceil_div(max(n_long_chunks, 1) * 32, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, long_acc, chunk_long_index, chunk_start, long_rows, n_long_chunks]
  - entry: spmv_split_write_long
    grid: ["ceil_div(max(n_long_rows, 1), BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [long_acc, long_rows, y, n_long_rows]
---*/
// Kernel 1 (short rows): as spmv_csr_vector, but a row longer than LONG_ROW is skipped; the same
// launch zeroes the fp32 workspace that collects the long rows. Kernel 2 (long rows): warp w takes
// chunk w = [chunk_start[w], min(chunk_start[w] + CHUNK, row end)) of long row long_rows[i],
// i = chunk_long_index[w], reduces it across the warp and adds it to long_acc[i] atomically.
// Kernel 3 converts the long-row sums to the output type. Launch order makes the zeroing visible.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_split_short_rows(const int* __restrict__ rowptr, const int* __restrict__ colind,
                      const value_t* __restrict__ values, const value_t* __restrict__ x,
                      value_t* __restrict__ y, float* __restrict__ long_acc, int n_long_rows, int M)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (t < n_long_rows) long_acc[t] = 0.f;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    int start = valid ? __ldg(rowptr + row) : 0;
    int end = valid ? __ldg(rowptr + row + 1) : 0;
    const bool is_long = end - start > LONG_ROW;
    if (is_long) end = start;

    float acc = 0.f;
    for (int j = start + lane; j < end; j += GROUP * UNROLL) {
        int cols[UNROLL];
        float vals[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int jj = j + u * GROUP;
            cols[u] = jj < end ? __ldcs(colind + jj) : -1;
            vals[u] = jj < end ? sd_to_f32(__ldcs(values + jj)) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (cols[u] >= 0) acc += vals[u] * sd_to_f32(__ldg(x + cols[u]));
        }
    }
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0 && !is_long) y[row] = sd_from_f32(acc);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_split_long_chunks(const int* __restrict__ rowptr, const int* __restrict__ colind,
                       const value_t* __restrict__ values, const value_t* __restrict__ x,
                       float* __restrict__ long_acc, const int* __restrict__ chunk_long_index,
                       const int* __restrict__ chunk_start, const int* __restrict__ long_rows,
                       int n_long_chunks)
{
    const long long warp = ((long long)blockIdx.x * BLOCK + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= n_long_chunks) return;  // whole warps leave together
    const int i = __ldg(chunk_long_index + warp);
    const int row = __ldg(long_rows + i);
    const int begin = __ldg(chunk_start + warp);
    const int end = min(begin + CHUNK, __ldg(rowptr + row + 1));

    float acc = 0.f;
    for (int j = begin + lane; j < end; j += 32 * UNROLL) {
        int cols[UNROLL];
        float vals[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int jj = j + u * 32;
            cols[u] = jj < end ? __ldcs(colind + jj) : -1;
            vals[u] = jj < end ? sd_to_f32(__ldcs(values + jj)) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (cols[u] >= 0) acc += vals[u] * sd_to_f32(__ldg(x + cols[u]));
        }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset);
    if (lane == 0) atomicAdd(long_acc + i, acc);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_split_write_long(const float* __restrict__ long_acc, const int* __restrict__ long_rows,
                      value_t* __restrict__ y, int n_long_rows)
{
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n_long_rows) y[long_rows[i]] = sd_from_f32(long_acc[i]);
}

/*---
name: spmv_csr_vector
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: vector
summary: >
  A group of GROUP lanes per row (GROUP=1 is the classic scalar row-per-thread kernel). Good for
  rows of similar length; pick GROUP near the mean row length divided by UNROLL.
parameters:
  GROUP: [1, 2, 4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
kernels:
  - entry: spmv_csr_vector
    grid: ["ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, M]
---*/
// Mapping: thread t of the grid belongs to group t / GROUP, which owns row t / GROUP. The group's
// lanes walk the row with stride GROUP and keep UNROLL independent gathers of x in flight, then
// reduce with shuffles inside the group. The matrix arrays are streamed (.cs loads, read once),
// x is read through the read-only path so the few reuses it has stay in L1.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_csr_vector(const int* __restrict__ rowptr, const int* __restrict__ colind,
                const value_t* __restrict__ values, const value_t* __restrict__ x,
                value_t* __restrict__ y, int M)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    const int start = valid ? __ldg(rowptr + row) : 0;
    const int end = valid ? __ldg(rowptr + row + 1) : 0;

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
    if (valid && lane == 0) y[row] = sd_from_f32(acc);
}

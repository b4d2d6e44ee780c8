/*---
name: spmv_sell_c_sigma
family: csr_spmv
operation: spmv
format: sell_c_sigma
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: sell
summary: >
  SELL-C-sigma: rows sorted by length within windows of SIGMA rows, cut into slices of C rows, each slice
  padded to its longest row and stored column-major, so the C threads of a slice (one per row) read C
  consecutive column indices and values at every step: fully coalesced matrix loads with no shuffles or
  reductions. Sorting keeps the rows of a slice of similar length, so little padding is stored and the
  threads of a warp finish together. Each thread stops at its row's true length (padding is never read
  or multiplied). Best for short, moderately varying rows; very long rows serialise on one thread.
  Needs the preparation `sell_c_sigma` (its padded copy of the matrix is built once).
preparation: sell_c_sigma
streams: [sell_cols, sell_vals, slice_ptr, slice_len, row_perm, row_len]
parameters:
  C: [8, 16, 32]
  SIGMA: [256, 1024, 4096, 16384]
  BLOCK: [128, 256]
constraints:
  - "BLOCK % C == 0"
  - "SIGMA % C == 0"
kernels:
  - entry: spmv_sell_c_sigma
    grid: ["ceil_div(max(n_slices, 1) * C, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [sell_cols, sell_vals, slice_ptr, slice_len, row_perm, row_len, x, y, n_slices, sell_nnz, M, K]
---*/
// Mapping: thread t serves sorted row r = t (slice s = r / C, lane r % C). Element j of the row lies at
// slice_ptr[s] + j * C + lane, so a slice's C threads read consecutive addresses at every step. The row's
// length is clamped to its slice's padded length and to the stored array; columns outside [0, K) are
// skipped. The row is walked four elements a step, all four loaded (masked by the length) before the products. Every thread with r < M writes y[row_perm[r]] (0 for an empty row), so every y is written once.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_sell_c_sigma(const int* __restrict__ sell_cols, const value_t* __restrict__ sell_vals,
                  const int* __restrict__ slice_ptr, const int* __restrict__ slice_len,
                  const int* __restrict__ row_perm, const int* __restrict__ row_len,
                  const value_t* __restrict__ x, value_t* __restrict__ y,
                  int n_slices, int sell_nnz, int M, int K)
{
    const long long r = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const long long s = r / C;
    if (s >= n_slices || r >= M) return;
    const int lane = (int)(r % C);
    const long long base = (long long)__ldg(slice_ptr + s) + lane;
    int len = min(__ldg(row_len + r), __ldg(slice_len + s));
    if (base >= sell_nnz) len = 0;
    else len = (int)min((long long)len, ((long long)sell_nnz - base + C - 1) / C);

    float acc[2] = {0.0f, 0.0f};
    // four elements a step, every load of the step issued before any product (a row of 1-4 elements costs one
    // round trip for its columns and values and one for x); even elements add into acc[0], odd ones into acc[1]
    for (int j = 0; j < len; j += 4) {
        int c[4];
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const long long i = base + (long long)(j + u) * C;
            c[u] = j + u < len ? __ldg(sell_cols + i) : -1;
            v[u] = j + u < len ? sd_to_f32(__ldg(sell_vals + i)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if ((unsigned)c[u] < (unsigned)K) acc[u & 1] = fmaf(v[u], sd_to_f32(__ldg(x + c[u])), acc[u & 1]);
    }
    const int row = __ldg(row_perm + r);
    if ((unsigned)row < (unsigned)M) y[row] = sd_from_f32(acc[0] + acc[1]);
}

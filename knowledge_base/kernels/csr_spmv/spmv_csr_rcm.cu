/*---
name: spmv_csr_rcm
family: csr_spmv
operation: spmv
format: csr_rcm
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: reordered
summary: >
  CSR renumbered by reverse Cuthill-McKee (square matrices; others keep their order): a mesh or road grid stored in a scattered order
  gathers x from random sectors at every nonzero, 8 times the bytes it uses in fp32. The preparation
  `rcm_reordered` renumbers rows and columns together so that the matrix is banded again; every call first
  writes x in the new order (one coalesced pass, reading x once), then walks the renumbered rows, whose
  gathers now fall on few sectors shared by neighbouring rows, and stores each row's sum at its original
  place. Both launches are part of the call. The row walk is spmv_csr_vec4's (GROUP lanes per row, aligned
  16-byte loads of 4 nonzeros, UNROLL of them in flight).
preparation: rcm_reordered
streams: [rcm_rowptr, rcm_colind, rcm_vals, rcm_row, rcm_col]
parameters:
  GROUP: [1, 2, 4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
workspace:
  x_new: {dtype: value, size: "max(rcm_cols, 1)"}
kernels:
  - entry: spmv_rcm_permute_x
    grid: ["ceil_div(max(rcm_cols, 1), 256)", "1", "1"]
    block: ["256", "1", "1"]
    args: [rcm_col, x, x_new, rcm_cols, K]
  - entry: spmv_rcm_rows
    grid: ["ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rcm_rowptr, rcm_colind, rcm_vals, rcm_row, x_new, y, M, nnz]
---*/
// x_new[j] = x[rcm_col[j]] for every renumbered column j, 0 for a column past x (a tall matrix's, never read): the
// gather reads each element of x once.
extern "C" __global__ void __launch_bounds__(256)
spmv_rcm_permute_x(const int* __restrict__ rcm_col, const value_t* __restrict__ x, value_t* __restrict__ x_new,
                   int rcm_cols, int K)
{
    const int j = blockIdx.x * 256 + threadIdx.x;
    if (j >= rcm_cols) return;
    const int src = __ldg(rcm_col + j);
    x_new[j] = src < K ? __ldg(x + src) : sd_from_f32(0.f);
}

// The walk of spmv_csr_vec4 over the renumbered rows (group t / GROUP owns row t / GROUP; aligned quads of 16-byte
// loads, UNROLL in flight, the matrix streamed with an L2 evict-first policy so that x_new stays in L2), its sum
// stored at the row's original place.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_rcm_rows(const int* __restrict__ rcm_rowptr, const int* __restrict__ rcm_colind,
              const value_t* __restrict__ rcm_vals, const int* __restrict__ rcm_row,
              const value_t* __restrict__ x_new, value_t* __restrict__ y, int M, int nnz)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    const int start = valid ? __ldg(rcm_rowptr + row) : 0;
    const int end = valid ? __ldg(rcm_rowptr + row + 1) : 0;
    const unsigned long long pol = sd_policy_evict_first();

    float acc = sd_quad_walk<GROUP, UNROLL, 1, 0>(rcm_colind, rcm_vals, x_new, start, end, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0) y[__ldg(rcm_row + row)] = sd_from_f32(acc);
}

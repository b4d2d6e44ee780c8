/*---
name: spmv_bsr
family: csr_spmv
operation: spmv
format: bsr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: dense_blocks
summary: >
  For matrices made of small dense blocks (FEM meshes with B unknowns per node, block-diagonal systems). The
  preparation `bsr_masked` cuts the matrix into B x B blocks and stores each block that holds a nonzero whole,
  with one column index per block instead of one per nonzero and a B*B-bit mask of the entries present. An
  fp32 nonzero then costs about 4 + 4/B^2 + mask/B^2 bytes instead of CSR's 8 (u16's 6): 1.3-1.4x fewer bytes
  at B = 3-8 when the blocks are full. A warp takes one block row; lane l < 32 - 32 % B works on row l % B of
  every (32 / B)-th block, loading the row's B values (the block's values are contiguous across its B lanes) and
  the B entries of x the block covers (one broadcast load for the block's lanes), UNROLL blocks' loads issued
  before any product. Only entries whose mask bit is set are added, so filled-in zeros never meet an Inf or NaN
  in x. The lanes of each row add up through shared memory and lanes 0 .. B-1 store the block row's B outputs.
  Fast only where the blocks are nearly full (the planner prices the fill from the features).
preparation: bsr_masked
streams: [bsr_ptr, bsr_col, bsr_vals, bsr_mask]
parameters:
  B: [2, 3, 4, 6, 8]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
kernels:
  - entry: spmv_bsr
    grid: ["ceil_div(n_brows * 32, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [bsr_ptr, bsr_col, bsr_vals, bsr_mask, x, y, n_brows, M, K]
---*/
// Warp w (global) takes block row w: blocks bsr_ptr[w] .. bsr_ptr[w+1]. Lane l < SD_LANES has row r = l % B and
// block slot j = l / B: blocks lo + j, lo + j + SD_PER, ... Each block b gives the lane its row's B values at
// bsr_vals[(b * B + r) * B + c] and x[bsr_col[b] * B + c] (c = 0 .. B-1; the column clamped into [0, K) for the
// load: only a set mask bit, bit r * B + c of bsr_mask[b], adds the product, and a set bit's column is < K). The
// row's sum is the sum of the parts of lanes r, r + B, ..., which lane r reads from shared memory and stores to
// y[w * B + r] when that row is < M. Every y is written once, 0 for an empty block row.
#if B * B <= 16
typedef unsigned short bsr_mask_t;
#elif B * B <= 32
typedef unsigned int bsr_mask_t;
#else
typedef unsigned long long bsr_mask_t;
#endif
#define SD_PER (32 / B)        // blocks a warp works on per step
#define SD_LANES (SD_PER * B)  // lanes in use; the other 32 % B lanes only take part in the reduction

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_bsr(const int* __restrict__ bsr_ptr, const int* __restrict__ bsr_col, const value_t* __restrict__ bsr_vals,
         const bsr_mask_t* __restrict__ bsr_mask, const value_t* __restrict__ x, value_t* __restrict__ y,
         int n_brows, int M, int K)
{
    __shared__ float s_part[BLOCK];
    const int lane = threadIdx.x % 32;
    const long long brow = ((long long)blockIdx.x * BLOCK + threadIdx.x) / 32;
    if (brow >= n_brows) return;  // whole warps: BLOCK is a multiple of 32
    const int r = lane % B, j = lane / B;
    const int lo = __ldg(bsr_ptr + brow), hi = __ldg(bsr_ptr + brow + 1);
    float acc = 0.f;
    if (lane < SD_LANES) {
        for (int b0 = lo + j; b0 < hi; b0 += SD_PER * UNROLL) {
            float v[UNROLL][B], xv[UNROLL][B];
            bsr_mask_t m[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int b = b0 + u * SD_PER;
                const int bb = b < hi ? b : b0;  // past the row's blocks: load from one of its own, add nothing
                const long long c0 = (long long)__ldg(bsr_col + bb) * B;
                m[u] = b < hi ? __ldg(bsr_mask + bb) : (bsr_mask_t)0;
                const value_t* vals = bsr_vals + ((long long)bb * B + r) * B;
#pragma unroll
                for (int c = 0; c < B; ++c) {
                    v[u][c] = sd_to_f32(__ldcs(vals + c));
                    xv[u][c] = sd_to_f32(__ldg(x + min(c0 + c, (long long)K - 1)));
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int c = 0; c < B; ++c)
                    if ((m[u] >> (r * B + c)) & 1u) acc = fmaf(v[u][c], xv[u][c], acc);
        }
    }
    s_part[threadIdx.x] = acc;
    __syncwarp();
    if (lane < B) {
        const int first = threadIdx.x - lane;  // the warp's first slot
        float sum = 0.f;
        for (int k = 0; k < SD_PER; ++k) sum += s_part[first + lane + k * B];
        const long long row = brow * B + lane;
        if (row < M) y[row] = sd_from_f32(sum);
    }
}

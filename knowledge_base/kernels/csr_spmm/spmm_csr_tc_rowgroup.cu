/*---
name: spmm_csr_tc_rowgroup
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp16, bf16]
archs: [sm_80, sm_90]
strategy: tensor_core
summary: >
  Tensor-core SpMM for 16-bit values with fp32 accumulation and exact products. Rows of A are taken in
  groups of 8; a group's nonzeros are scattered into a dense 8 x U tile in shared memory, U being the
  union of the group's column indices (from the preparation `row_group_union`, which depends on the
  pattern only; values are read from CSR). Each warp multiplies the gathered rows of B by that tile
  with mma.m16n8k16 (C transposed: 16 output columns x 8 rows x 16 union columns per instruction),
  loading B rows straight from global memory with 16-byte loads and pairing them into fragments with
  byte permutes. A block takes one group: its WN x WK warps share the tile, WN column tiles side by
  side and WK warps splitting the union columns (their partial sums meet in shared memory). Pays off
  when the 8 rows of a group share columns (banded, clustered or reordered matrices). Measured on the
  H200 in one run (fp16, M=K=4096, N=256; evals/results/explore_session3_h200.json, call 11): banded 5%
  (2.8 rows per union column) 33.4 us against 61.7 for row split, 43.5 for cuSPARSE and 22.3 for dense
  cuBLAS; uniform 1% / 5% 21.1 / 65.4 us, slower than row split (18.7 / 61.3). Held-out shapes and the
  sanitizer were run at WK=1 only. B must be finite (a zero weight times Inf is NaN, as in dense GEMM).
preparation: row_group_union
streams: [rowptr, values, nnz_tile_pos, group_cols, group_ptr]
parameters:
  MT: [4, 8, 16]
  WN: [1, 2, 4, 8]
  WK: [1, 2, 4]
  KB: [1, 2, 4, 8]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "WN == 1 or 16 * MT * (WN - 1) < N"
kernels:
  - entry: spmm_csr_tc_rowgroup
    grid: ["n_groups", "ceil_div(N, 16 * MT * WN)", "1"]
    block: ["32 * WN * WK", "1", "1"]
    shared_bytes: "8 * (max_union + 8) * 2 + max_union * 4 + (WK - 1) * WN * 32 * MT * 16"
    args: [rowptr, values, nnz_tile_pos, group_cols, group_ptr, B, C, M, N, max_union]
---*/
// Mapping: block (bx, by) owns row group grp = bx (rows 8*grp .. +8); warp (wn, wk) owns the 16*MT output
// columns from cb = (by*WN + wn)*16*MT and takes the k-steps wk, wk + WK, ... of 16 union columns each.
// The mma computes D = A_op * B_op with
//   A_op[m][k] = B[col(k)][f(t, m)]   (16 output columns x 16 union columns, one m-tile t of MT)
//   B_op[k][n] = A[8*grp + n][col(k)]  (the group's tile in shared memory, 0 where A has no entry)
//   D[m][n]    = C[8*grp + n][f(t, m)]
// with f(t, m) = cb + 2*MT*(m % 8) + 2*t + m / 8, so that lane (g = lane / 4, q = lane % 4) needs, for
// all its m-tiles, only the 2*MT consecutive columns cb + 2*MT*g .. of four B rows (union columns 2q,
// 2q+1, 2q+8, 2q+9 of the step) and ends up owning the same 2*MT consecutive columns of C rows 2q and
// 2q+1 of the group. Fragment pairs along k are formed from two B rows with one byte permute each.
// The group's union columns are staged in shared memory next to its tile (the group's nonzeros are
// contiguous in CSR, so all lanes scatter them at once), and a warp issues the B-row loads of KB steps
// before their mma instructions, so KB steps of gathers are in flight together.
#define CPT (2 * MT)          // columns of B and C per lane
#define WORDS (CPT / 2)       // 32-bit words per lane and B row (= MT)

// The lane's CPT columns of B row k, as WORDS words of two values (zeros past N).
__device__ __forceinline__ void sd_load_row(const value_t* __restrict__ B, int k, int c0, int N, unsigned (&w)[WORDS]) {
    const value_t* src = B + (long long)k * N + c0;
    if (N % 8 == 0 && c0 + CPT <= N) {
#pragma unroll
        for (int v = 0; v < WORDS / 4; ++v) {
            const uint4 p = __ldg(reinterpret_cast<const uint4*>(src) + v);
            w[4 * v] = p.x; w[4 * v + 1] = p.y; w[4 * v + 2] = p.z; w[4 * v + 3] = p.w;
        }
    } else {
#pragma unroll
        for (int v = 0; v < WORDS; ++v) {
            const unsigned lo = c0 + 2 * v < N ? __ldg(src + 2 * v) : 0u;
            const unsigned hi = c0 + 2 * v + 1 < N ? __ldg(src + 2 * v + 1) : 0u;
            w[v] = lo | (hi << 16);
        }
    }
}

// The 4 B rows of one k-step (union columns k0 + 2q, +1, +8, +9), CPT columns each.
__device__ __forceinline__ void sd_load_step(const value_t* __restrict__ B, const int* cols, int k0, int q, int c0, int N,
                                             unsigned (&w)[4][WORDS]) {
    sd_load_row(B, cols[k0 + 2 * q], c0, N, w[0]);
    sd_load_row(B, cols[k0 + 2 * q + 1], c0, N, w[1]);
    sd_load_row(B, cols[k0 + 2 * q + 8], c0, N, w[2]);
    sd_load_row(B, cols[k0 + 2 * q + 9], c0, N, w[3]);
}

// One k-step: MT mma instructions on the rows in w and the tile's weights b0, b1.
__device__ __forceinline__ void sd_mma_step(float (&acc)[MT][4], const unsigned (&w)[4][WORDS], const value_t* weights) {
    const unsigned b0 = *reinterpret_cast<const unsigned*>(weights);
    const unsigned b1 = *reinterpret_cast<const unsigned*>(weights + 8);
#pragma unroll
    for (int t = 0; t < MT; ++t)
        sd_mma_16816(acc[t], __byte_perm(w[0][t], w[1][t], 0x5410), __byte_perm(w[0][t], w[1][t], 0x7632),
                     __byte_perm(w[2][t], w[3][t], 0x5410), __byte_perm(w[2][t], w[3][t], 0x7632), b0, b1);
}

#define WARPS (WN * WK)

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_tc_rowgroup(const int* __restrict__ rowptr, const value_t* __restrict__ values,
                     const int* __restrict__ nnz_tile_pos, const int* __restrict__ group_cols,
                     const int* __restrict__ group_ptr, const value_t* __restrict__ B,
                     value_t* __restrict__ C, int M, int N, int max_union)
{
    extern __shared__ __align__(16) unsigned char sd_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wn = warp % WN, wk = warp / WN;
    const int grp = blockIdx.x;
    const int stride = max_union + 8;  // elements per tile row; +8 keeps the fragment reads conflict-free
    value_t* tile = reinterpret_cast<value_t*>(sd_smem);
    int* cols = reinterpret_cast<int*>(sd_smem + 8 * stride * 2);
    float* partial = reinterpret_cast<float*>(sd_smem + 8 * stride * 2 + max_union * 4);
    const int u0 = __ldg(group_ptr + grp), width = __ldg(group_ptr + grp + 1) - u0;
    const int nz_lo = __ldg(rowptr + 8 * grp), nz_hi = __ldg(rowptr + min(8 * grp + 8, M));

    // the group's union columns, and its tile: zeros, then its nonzeros at their tile positions
    for (int e = threadIdx.x; e < width; e += 32 * WARPS) cols[e] = __ldg(group_cols + u0 + e);
    for (int e = threadIdx.x; e < 8 * (width / 8); e += 32 * WARPS) {
        const int r = e / (width / 8), c = (e % (width / 8)) * 8;
        *reinterpret_cast<uint4*>(tile + r * stride + c) = make_uint4(0u, 0u, 0u, 0u);
    }
    __syncthreads();
    for (int j = nz_lo + threadIdx.x; j < nz_hi; j += 32 * WARPS) tile[__ldg(nnz_tile_pos + j)] = __ldg(values + j);
    __syncthreads();

    const int g = lane / 4, q = lane % 4;
    const int c0 = (blockIdx.y * WN + wn) * 16 * MT + CPT * g;
    const value_t* weights = tile + g * stride + 2 * q;
    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

    constexpr int STEP = 16 * WK;  // union columns between a warp's consecutive steps
    for (int k0 = 16 * wk; k0 < width; k0 += KB * STEP) {
        unsigned w[KB][4][WORDS];
#pragma unroll
        for (int b = 0; b < KB; ++b)
            if (k0 + b * STEP < width) sd_load_step(B, cols, k0 + b * STEP, q, c0, N, w[b]);
#pragma unroll
        for (int b = 0; b < KB; ++b)
            if (k0 + b * STEP < width) sd_mma_step(acc, w[b], weights + k0 + b * STEP);
    }

    if (WK > 1) {  // the warps with wk > 0 hand their sums to the wk = 0 warp of their column tile
        if (wk > 0) {
            float* mine = partial + (((wk - 1) * WN + wn) * 32 + lane) * 4 * MT;
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i) mine[4 * t + i] = acc[t][i];
        }
        __syncthreads();
        if (wk > 0) return;
        for (int k = 1; k < WK; ++k) {
            const float* theirs = partial + (((k - 1) * WN + wn) * 32 + lane) * 4 * MT;
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[t][i] += theirs[4 * t + i];
        }
    }
    if (c0 >= N) return;

    // acc[t] = {C[r0][c0+2t], C[r0+1][c0+2t], C[r0][c0+2t+1], C[r0+1][c0+2t+1]} with r0 = 8*grp + 2q
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = 8 * grp + 2 * q + h;
        if (row >= M) continue;
        value_t* dst = C + (long long)row * N + c0;
        if (N % 8 == 0 && c0 + CPT <= N) {
#pragma unroll
            for (int v = 0; v < WORDS / 4; ++v) {
                uint4 p;
                unsigned* pw = reinterpret_cast<unsigned*>(&p);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int t = 4 * v + i;
                    pw[i] = (unsigned)sd_from_f32(acc[t][h]) | ((unsigned)sd_from_f32(acc[t][2 + h]) << 16);
                }
                reinterpret_cast<uint4*>(dst)[v] = p;
            }
        } else {
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                if (c0 + 2 * t < N) dst[2 * t] = sd_from_f32(acc[t][h]);
                if (c0 + 2 * t + 1 < N) dst[2 * t + 1] = sd_from_f32(acc[t][2 + h]);
            }
        }
    }
}

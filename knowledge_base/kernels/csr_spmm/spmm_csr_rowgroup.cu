/*---
name: spmm_csr_rowgroup
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: row_group
summary: >
  Row-group SpMM on CUDA cores, exact in every dtype (fp32 included): a warp takes a group of ROWS (8
  or 16) consecutive rows of A and gathers each row of B that the group touches once, for all its rows,
  where row split gathers it once per nonzero. The gathers of B through L2 bound row split on
  banded, FEM and clustered matrices (at N = 128 fp32 each nonzero gathers a 512-byte B row: 5 GB for
  10M nonzeros, against about 600 MB that A, B and C take from DRAM); here they shrink by the group's column sharing (`group_overlap`). The
  preparation `row_group_union` lists each group's union of columns with a mask of the rows holding
  each; the warp scatters its group's values into a tile in shared memory and multiplies present
  entries only (an Inf in B reaches only the rows that reference it). Lanes split as RSUB = 32 / LANES
  subsets of LANES lanes that share out the union's columns (each B piece is loaded by one lane only);
  each lane owns VW consecutive columns (one 16-byte load) of all ROWS rows, and the subsets' partial sums
  meet by shuffles at the end. A warp covers SLABS column slabs of LANES x VW in turn, so that A, its
  tile places and the union are read once for SLABS slabs.
measured:  # H200 (sm_90), offline pipeline runs of session 19 (groups of 8 rows), each against the best cuSPARSE configuration
  - {spec: band_narrow_10m-spmm-fp32-n32, gpu: NVIDIA H200, params: {LANES: 8, SLABS: 1, UNROLL: 2, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 129.7, best_baseline: cusparse_spmm_csr_alg3_row, best_baseline_us: 295.5, speedup: 2.28,
     source: evals/results/issue14_h200/spmm_session19_a_results.jsonl}
  - {spec: fem3d_b4_8m-spmm-fp32-n32, gpu: NVIDIA H200, params: {LANES: 8, SLABS: 1, UNROLL: 2, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 72.3, best_baseline: cusparse_spmm_csr_alg3_row_pre, best_baseline_us: 123.9, speedup: 1.71,
     source: evals/results/issue14_h200/spmm_session19_a_results.jsonl}
  - {spec: fem3d_b4_8m-spmm-fp32-n128, gpu: NVIDIA H200, params: {LANES: 8, SLABS: 1, UNROLL: 2, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 232.6, best_baseline: cusparse_spmm_csr_alg2_row, best_baseline_us: 471.6, speedup: 2.03,
     source: evals/results/issue14_h200/spmm_session19_a_results.jsonl}
  - {spec: band_narrow_10m-spmm-fp32-n128, gpu: NVIDIA H200, params: {LANES: 32, SLABS: 1, UNROLL: 4, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 325.1, best_baseline: cusparse_spmm_default_row, best_baseline_us: 577.3, speedup: 1.78,
     source: evals/results/issue14_h200/spmm_session19_b_results.jsonl}
  - {spec: blockdiag_8_32_10m-spmm-fp32-n32, gpu: NVIDIA H200, params: {LANES: 8, SLABS: 1, UNROLL: 2, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 118.7, best_baseline: cusparse_spmm_csr_alg3_row_pre, best_baseline_us: 223.2, speedup: 1.88,
     source: evals/results/issue14_h200/spmm_session19_c_results.jsonl}
  - {spec: blockdiag_8_32_10m-spmm-fp32-n128, gpu: NVIDIA H200, params: {LANES: 32, SLABS: 1, UNROLL: 4, VW: 4, WARPS: 4, ROWS: 8},
     median_us: 290.0, best_baseline: cusparse_spmm_csr_alg2_row, best_baseline_us: 621.5, speedup: 2.14,
     source: evals/results/issue14_h200/spmm_session19_c_results.jsonl}
preparation: row_group_union
streams: [rowptr, values, nnz_tile_pos, group_cols, group_ptr, group_mask]
parameters:
  LANES: [4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  WARPS: [1, 2, 4, 8]
  VW: [1, 2, 4, 8]
  SLABS: [1, 2, 4, 8]
  ROWS: [8, 16]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "VW * value_bytes <= 16"
  - "value_bytes == 4 or VW >= 2"
  - "LANES == 4 or LANES * VW <= 2 * N"  # at most half of a subset's lanes idle
  - "SLABS == 1 or LANES * VW * (SLABS - 1) < N"  # no slab without columns
  - "ROWS * VW <= 64"  # the accumulators of a lane's ROWS rows stay in registers
kernels:
  - entry: spmm_csr_rowgroup
    grid: ["ceil_div(n_groups, WARPS)", "ceil_div(N, LANES * VW * SLABS)", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "WARPS * ROWS * (max_union + 8) * 4"
    args: [rowptr, values, nnz_tile_pos, group_cols, group_ptr, group_mask, B, C, M, N, n_groups, max_union]
---*/
// Mapping: warp w of block (bx, by) takes row group grp = bx*WARPS + w (rows ROWS*grp .. +ROWS, ROWS 8 or 16: 16
// rows share more columns, so fewer B rows are gathered a row, at twice the accumulators). Lane l is in subset
// s = l / LANES and owns piece p = l % LANES: columns c0 = (by*SLABS + slab)*LANES*VW + p*VW .. +VW of B and C, for
// slab = 0 .. SLABS-1 in turn. The warp's tile (ROWS x max_union + 8 floats in shared memory) receives the group's
// nonzeros at their places (`nnz_tile_pos`); nothing else of it is ever read, so it is not cleared. Subset s takes
// the union columns in chunks of UNROLL, chunk s, s + RSUB, ... (the padded union, a multiple of 16 wide with
// padding masked 0, makes every chunk whole); for each (group_cols[u], mask group_mask[u]) its lanes load their
// piece of that B row once and add weight x piece to each of the ROWS rows whose mask bit is set. Then the subsets'
// partial sums are reduced and scattered in log2(RSUB) shuffle steps, halving the rows each lane keeps, until
// subset s holds the totals of rows s*RPL .. +RPL, which it stores.
#define RSUB (32 / LANES)
#define RPL (ROWS / RSUB)

// VW values to p (aligned to VW elements) with one store of VW * value bytes.
__device__ __forceinline__ void sd_store_piece(value_t* __restrict__ p, const float (&v)[VW]) {
    __align__(16) value_t e[VW];
#pragma unroll
    for (int i = 0; i < VW; ++i) e[i] = sd_from_f32(v[i]);
    constexpr int BYTES = VW * (int)sizeof(value_t);
    if constexpr (BYTES == 16) *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
    else if constexpr (BYTES == 8) *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(e);
    else if constexpr (BYTES == 4) *reinterpret_cast<unsigned*>(p) = *reinterpret_cast<const unsigned*>(e);
    else p[0] = e[0];
}

// One reduce-scatter step between subsets `bit` apart: of the LIVE rows in acc[0 .. LIVE), the lane keeps the upper
// half when its subset has `bit` set and the lower half otherwise, adds the partner's sums of that half, and sends
// the partner the other half; the kept rows move to acc[0 .. LIVE/2).
template <int LIVE>
__device__ __forceinline__ void sd_halve_rows(float (&acc)[ROWS][VW], int bit, bool upper) {
#pragma unroll
    for (int i = 0; i < LIVE / 2; ++i)
#pragma unroll
        for (int v = 0; v < VW; ++v) {
            const float keep = upper ? acc[i + LIVE / 2][v] : acc[i][v];
            const float send = upper ? acc[i][v] : acc[i + LIVE / 2][v];
            acc[i][v] = keep + __shfl_xor_sync(SD_FULL_MASK, send, bit * LANES);
        }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_rowgroup(const int* __restrict__ rowptr, const value_t* __restrict__ values,
                  const int* __restrict__ nnz_tile_pos, const int* __restrict__ group_cols,
                  const int* __restrict__ group_ptr, const int* __restrict__ group_mask,
                  const value_t* __restrict__ B, value_t* __restrict__ C, int M, int N, int n_groups,
                  int max_union)
{
    extern __shared__ __align__(16) unsigned char sd_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int grp = blockIdx.x * WARPS + warp;
    if (grp >= n_groups) return;  // whole warps leave; the block has no barrier
    const int stride = max_union + 8;
    float* tile = reinterpret_cast<float*>(sd_smem) + warp * ROWS * stride;
    const int u0 = __ldg(group_ptr + grp), width = __ldg(group_ptr + grp + 1) - u0;
    const int nz_lo = __ldg(rowptr + ROWS * grp), nz_hi = __ldg(rowptr + min(ROWS * grp + ROWS, M));
    for (int j = nz_lo + lane; j < nz_hi; j += 32) tile[__ldg(nnz_tile_pos + j)] = sd_to_f32(__ldg(values + j));
    __syncwarp();

    const int sub = lane / LANES;
#pragma unroll 1
    for (int slab = 0; slab < SLABS; ++slab) {
        const int c0 = ((blockIdx.y * SLABS + slab) * LANES + lane % LANES) * VW;
        if (c0 - lane % LANES * VW >= N) break;  // the slab is past N for the whole warp
        const bool active = c0 < N, vec_ok = (N % VW == 0) && (c0 + VW <= N);
        float acc[ROWS][VW];
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
#pragma unroll
            for (int v = 0; v < VW; ++v) acc[i][v] = 0.f;

        for (int u = sub * UNROLL; u < width; u += RSUB * UNROLL) {
            float b[UNROLL][VW];
            unsigned rows[UNROLL];
#pragma unroll
            for (int q = 0; q < UNROLL; ++q) {
                const int k = __ldg(group_cols + u0 + u + q);
                rows[q] = (unsigned)__ldg(group_mask + u0 + u + q);
                const value_t* brow = B + (long long)k * N + c0;
                if (vec_ok) {
                    sd_load_vec<VW>(brow, b[q]);
                } else {
#pragma unroll
                    for (int v = 0; v < VW; ++v) b[q][v] = active && c0 + v < N ? sd_to_f32(__ldg(brow + v)) : 0.f;
                }
            }
#pragma unroll
            for (int q = 0; q < UNROLL; ++q)
#pragma unroll
                for (int i = 0; i < ROWS; ++i)
                    if (rows[q] & (1u << i)) {
                        const float w = tile[i * stride + u + q];
#pragma unroll
                        for (int v = 0; v < VW; ++v) acc[i][v] += w * b[q][v];
                    }
        }

        // every lane takes part in the shuffles, those past N included
        if constexpr (RSUB >= 8) sd_halve_rows<ROWS * 8 / RSUB>(acc, 4, sub & 4);
        if constexpr (RSUB >= 4) sd_halve_rows<ROWS * 4 / RSUB>(acc, 2, sub & 2);
        if constexpr (RSUB >= 2) sd_halve_rows<ROWS * 2 / RSUB>(acc, 1, sub & 1);

        if (!active) continue;
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
            const int row = ROWS * grp + sub * RPL + i;
            if (row >= M) break;
            value_t* crow = C + (long long)row * N + c0;
            float out[VW];
#pragma unroll
            for (int v = 0; v < VW; ++v) out[v] = acc[i][v];
            if (vec_ok) {
                sd_store_piece(crow, out);
            } else {
#pragma unroll
                for (int v = 0; v < VW; ++v)
                    if (c0 + v < N) crow[v] = sd_from_f32(out[v]);
            }
        }
    }
}

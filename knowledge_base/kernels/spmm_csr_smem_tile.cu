/*---
name: spmm_csr_smem_tile
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: smem_tile
summary: >
  Row-split SpMM that stages a KC x (32*CPL) tile of B in shared memory and lets a block of
  WARPS*RPW rows consume it, so that gathered B rows come from shared memory (one conflict-free
  wavefront per 32 lanes) instead of L2. Each nonzero is read as one packed (column, value) pair
  with a warp-uniform load. Needs column indices sorted within each row (canonical CSR) and the
  one-time preparation `packed_pairs`. Measured on the H200 (M=K=4096, N=256, 1-5% density): 3-10x
  slower than spmm_csr_rowsplit, bound by the latency of its per-row cursor loop (bench/NOTES.md).
preparation: packed_pairs
parameters:
  CPL: [1, 2, 4, 8]
  WARPS: [4, 8, 16, 32]
  RPW: [1, 2, 4, 8, 16]
  KC: [64, 128, 256, 512, 1024]
  UNROLL: [2, 4, 8]
kernels:
  - entry: spmm_csr_smem_tile
    grid: ["ceil_div(M, WARPS * RPW)", "ceil_div(N, 32 * CPL)", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "KC * 32 * CPL * value_bytes"
    args: [rowptr, pairs, B, C, M, N, K]
---*/
// Mapping: block (bx, by) owns rows [bx*WARPS*RPW, +WARPS*RPW) and columns [by*TW, +TW), TW = 32*CPL.
// Warp w owns RPW consecutive rows of that range; lane l owns columns by*TW + l*CPL .. + CPL, so one
// gathered row of the B tile is read by the warp as one contiguous 4*CPL*32-byte span: no bank
// conflicts whatever the column index. K is walked in chunks of KC rows: the block copies
// B[k0:k0+KC, tile] into shared memory (16-byte copies when N allows), then every warp advances a
// cursor per row through the nonzeros whose column falls in the chunk (columns are sorted within a
// row, so the cursor only moves forward). Pairs are read UNROLL at a time with warp-uniform loads,
// so the gathers and FMAs of UNROLL nonzeros are independent. Accumulators stay in registers.
#define TW (32 * CPL)

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_smem_tile(const int* __restrict__ rowptr, const int2* __restrict__ pairs,
                   const value_t* __restrict__ B, value_t* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) unsigned char sd_smem[];
    value_t* tile = reinterpret_cast<value_t*>(sd_smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int col_base = blockIdx.y * TW;
    const int c0 = col_base + lane * CPL;
    const int row0 = (blockIdx.x * WARPS + warp) * RPW;

    int cursor[RPW], stop[RPW];
    float acc[RPW][CPL];
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
        const int r = row0 + i;
        cursor[i] = r < M ? __ldg(rowptr + r) : 0;
        stop[i] = r < M ? __ldg(rowptr + r + 1) : 0;
#pragma unroll
        for (int v = 0; v < CPL; ++v) acc[i][v] = 0.f;
    }

    constexpr int VEC = 16 / (int)sizeof(value_t);   // elements per 16-byte copy
    constexpr int VECS_PER_ROW = TW / VEC > 0 ? TW / VEC : 1;
    const bool vec_copy = (TW % VEC == 0) && (N % VEC == 0) && (col_base + TW <= N);

    for (int k0 = 0; k0 < K; k0 += KC) {
        const int rows_here = min(KC, K - k0);
        __syncthreads();  // the previous chunk is no longer read
        if (vec_copy) {
            for (int e = threadIdx.x; e < rows_here * VECS_PER_ROW; e += 32 * WARPS) {
                const int r = e / VECS_PER_ROW, v = e % VECS_PER_ROW;
                const uint4 chunk = __ldg(reinterpret_cast<const uint4*>(B + (long long)(k0 + r) * N + col_base) + v);
                reinterpret_cast<uint4*>(tile + r * TW)[v] = chunk;
            }
        } else {
            for (int e = threadIdx.x; e < rows_here * TW; e += 32 * WARPS) {
                const int r = e / TW, c = e % TW;
                tile[r * TW + c] = col_base + c < N ? __ldg(B + (long long)(k0 + r) * N + col_base + c) : sd_from_f32(0.f);
            }
        }
        __syncthreads();
        const int k_hi = k0 + rows_here;

#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            bool more = cursor[i] < stop[i];
            while (more) {
                int2 pr[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u)
                    pr[u] = cursor[i] + u < stop[i] ? __ldg(pairs + cursor[i] + u) : make_int2(K, 0);
                int taken = 0;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    if (pr[u].x < k_hi) {
                        float b[CPL];
                        const value_t* src = tile + (pr[u].x - k0) * TW + lane * CPL;
                        if constexpr (CPL * sizeof(value_t) >= 4) {
                            // CPL consecutive values, 4/8/16-byte aligned: one shared-memory load
                            if constexpr (CPL * sizeof(value_t) == 16) {
                                const uint4 raw = *reinterpret_cast<const uint4*>(src);
                                const value_t* vv = reinterpret_cast<const value_t*>(&raw);
#pragma unroll
                                for (int v = 0; v < CPL; ++v) b[v] = sd_to_f32(vv[v]);
                            } else if constexpr (CPL * sizeof(value_t) == 8) {
                                const uint2 raw = *reinterpret_cast<const uint2*>(src);
                                const value_t* vv = reinterpret_cast<const value_t*>(&raw);
#pragma unroll
                                for (int v = 0; v < CPL; ++v) b[v] = sd_to_f32(vv[v]);
                            } else if constexpr (CPL * sizeof(value_t) == 32) {
                                const uint4 raw0 = reinterpret_cast<const uint4*>(src)[0];
                                const uint4 raw1 = reinterpret_cast<const uint4*>(src)[1];
                                const value_t* v0 = reinterpret_cast<const value_t*>(&raw0);
                                const value_t* v1 = reinterpret_cast<const value_t*>(&raw1);
#pragma unroll
                                for (int v = 0; v < CPL / 2; ++v) { b[v] = sd_to_f32(v0[v]); b[v + CPL / 2] = sd_to_f32(v1[v]); }
                            } else {
#pragma unroll
                                for (int v = 0; v < CPL; ++v) b[v] = sd_to_f32(src[v]);
                            }
                        } else {
#pragma unroll
                            for (int v = 0; v < CPL; ++v) b[v] = sd_to_f32(src[v]);
                        }
                        const float a = __int_as_float(pr[u].y);
#pragma unroll
                        for (int v = 0; v < CPL; ++v) acc[i][v] += a * b[v];
                        ++taken;
                    }
                }
                cursor[i] += taken;
                more = taken == UNROLL && cursor[i] < stop[i];
            }
        }
    }

#pragma unroll
    for (int i = 0; i < RPW; ++i) {
        const int r = row0 + i;
        if (r < M) {
#pragma unroll
            for (int v = 0; v < CPL; ++v)
                if (c0 + v < N) C[(long long)r * N + c0 + v] = sd_from_f32(acc[i][v]);
        }
    }
}

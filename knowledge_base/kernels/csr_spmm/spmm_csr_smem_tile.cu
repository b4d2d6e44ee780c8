/*---
name: spmm_csr_smem_tile
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: smem_tile
summary: >
  SpMM with a column slice of B held in shared memory: a block owns TW = LPR*16/value_bytes columns
  of B and C (each B row of the slice is LPR 16-byte pieces) and many rows of A, and walks K in
  chunks of KC rows of B staged in shared memory, so every gathered B row comes from shared memory
  instead of L2, and B crosses L2 once per block instead of once per nonzero. A group of LPR lanes
  owns one row at a time; each of its lanes reads one 16-byte piece of the gathered B row, so the
  group reads a whole contiguous row slice (conflict-free). Needs column indices sorted within each
  row (canonical CSR). Measured on the H200 (M=K=4096, N=256, 1-5% density;
  evals/results/explore_session3_h200.json, call 3): 1.2-2.1x slower than spmm_csr_rowsplit (best LPR=8
  WARPS=32 RPG=1 KC=512 UNROLL=4: 44.1 / 92.2 us fp32 1% / 5%, 37.9 / 72.0 us fp16), bound by the latency
  of the per-row peeks and the synchronous chunk copies.
streams: [rowptr, colind, values]
parameters:
  LPR: [4, 8, 16, 32]
  WARPS: [4, 8, 16, 32]
  RPG: [1, 2, 4, 8]
  KC: [256, 512, 1024, 1536, 2048]
  UNROLL: [2, 4, 8]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "KC * LPR * 16 <= 200 * 1024"
kernels:
  - entry: spmm_csr_smem_tile
    grid: ["ceil_div(M, WARPS * (32 // LPR) * RPG)", "ceil_div(N, LPR * (16 // value_bytes))", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "min(KC, K) * LPR * 16"
    args: [rowptr, colind, values, B, C, M, N, K]
---*/
// Mapping: block (bx, by) owns columns [by*TW, +TW) and rows [bx*RPB, +RPB), RPB = WARPS*(32/LPR)*RPG.
// Lane group g of warp w (lanes g*LPR .. +LPR) owns RPG consecutive rows; lane l of the group owns
// the VPL columns by*TW + l*VPL .. +VPL (one 16-byte piece). For each chunk of KC rows of B the block
// copies B[k0:k0+KC, tile] into shared memory, then each group works on its RPG rows together: it peeks at
// the next LPR nonzeros of each row (one coalesced load of columns and values per row, all RPG loads in
// flight at once); since columns are sorted, the ones inside the chunk are a prefix, counted with a
// ballot. The group then
// broadcasts them UNROLL at a time with shuffles; every lane reads its 16-byte piece of the gathered
// row from shared memory and does VPL FMAs. Loop counts are kept warp-uniform (the longest group
// sets them; the others run masked, reading row 0 of the chunk with a zero weight), so shuffles and
// ballots always see the full warp. Accumulators stay in registers across chunks.
#define VPL (16 / (int)sizeof(value_t))
#define TW (LPR * VPL)
#define GPW (32 / LPR)
#define RPB (WARPS * GPW * RPG)
#define GROUP_BITS (LPR == 32 ? 0xffffffffu : ((1u << (LPR % 32)) - 1u))

union sd_piece {
    uint4 raw;
    value_t v[VPL];
};

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_smem_tile(const int* __restrict__ rowptr, const int* __restrict__ colind,
                   const value_t* __restrict__ values, const value_t* __restrict__ B,
                   value_t* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) unsigned char sd_smem[];
    uint4* tile = reinterpret_cast<uint4*>(sd_smem);  // chunk row r, piece p: tile[r * LPR + p]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = lane / LPR, gl = lane % LPR;
    const int col_base = blockIdx.y * TW;
    const int c0 = col_base + gl * VPL;
    const int row0 = blockIdx.x * RPB + (warp * GPW + group) * RPG;
    const bool vec_b = N % VPL == 0;

    int cursor[RPG], stop[RPG];
    float acc[RPG][VPL];
#pragma unroll
    for (int i = 0; i < RPG; ++i) {
        const int r = row0 + i;
        cursor[i] = r < M ? __ldg(rowptr + r) : 0;
        stop[i] = r < M ? __ldg(rowptr + r + 1) : 0;
#pragma unroll
        for (int q = 0; q < VPL; ++q) acc[i][q] = 0.f;
    }

    for (int k0 = 0; k0 < K; k0 += KC) {
        const int rows_here = min(KC, K - k0);
        const int k_hi = k0 + rows_here;
        __syncthreads();  // every group is done with the previous chunk
        for (int e = threadIdx.x; e < rows_here * LPR; e += 32 * WARPS) {
            const int r = e / LPR, c = col_base + (e % LPR) * VPL;
            const value_t* src = B + (long long)(k0 + r) * N + c;
            sd_piece piece;
            if (vec_b && c + VPL <= N) {
                piece.raw = __ldg(reinterpret_cast<const uint4*>(src));
            } else {
#pragma unroll
                for (int q = 0; q < VPL; ++q) piece.v[q] = c + q < N ? __ldg(src + q) : sd_from_f32(0.f);
            }
            tile[e] = piece.raw;
        }
        __syncthreads();

        bool more[RPG];  // the same for every lane of a group
        bool any = false;
#pragma unroll
        for (int i = 0; i < RPG; ++i) {
            more[i] = cursor[i] < stop[i];
            any |= more[i];
        }
        while (__any_sync(SD_FULL_MASK, any)) {
            // the peeks of all RPG rows are issued together, so their loads are in flight at once
            int col[RPG];
            float val[RPG];
#pragma unroll
            for (int i = 0; i < RPG; ++i) {
                const int j = cursor[i] + gl;
                col[i] = k_hi;
                val[i] = 0.f;
                if (more[i] && j < stop[i]) {
                    col[i] = __ldg(colind + j);
                    val[i] = sd_to_f32(__ldg(values + j));
                }
            }
            any = false;
#pragma unroll
            for (int i = 0; i < RPG; ++i) {
                const unsigned in_chunk = __ballot_sync(SD_FULL_MASK, col[i] < k_hi);
                const int taken = __popc((in_chunk >> (group * LPR)) & GROUP_BITS);
                const int steps = (int)__reduce_max_sync(SD_FULL_MASK, (unsigned)taken);
                for (int t = 0; t < steps; t += UNROLL) {
                    float a[UNROLL];
                    float b[UNROLL][VPL];
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) {
                        const int src = group * LPR + min(t + u, LPR - 1);
                        const int k = __shfl_sync(SD_FULL_MASK, col[i], src);
                        const float av = __shfl_sync(SD_FULL_MASK, val[i], src);
                        const bool use = t + u < taken && k >= k0 && k < k_hi;
                        a[u] = use ? av : 0.f;
                        sd_piece piece;
                        piece.raw = tile[(use ? k - k0 : 0) * LPR + gl];
#pragma unroll
                        for (int q = 0; q < VPL; ++q) b[u][q] = sd_to_f32(piece.v[q]);
                    }
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                        for (int q = 0; q < VPL; ++q) acc[i][q] += a[u] * b[u][q];
                }
                cursor[i] += taken;
                more[i] = more[i] && taken == LPR && cursor[i] < stop[i];
                any |= more[i];
            }
        }
    }

#pragma unroll
    for (int i = 0; i < RPG; ++i) {
        const int r = row0 + i;
        if (r >= M || c0 >= N) continue;
        value_t* dst = C + (long long)r * N + c0;
        if (vec_b && c0 + VPL <= N) {
            sd_piece out;
#pragma unroll
            for (int q = 0; q < VPL; ++q) out.v[q] = sd_from_f32(acc[i][q]);
            *reinterpret_cast<uint4*>(dst) = out.raw;
        } else {
#pragma unroll
            for (int q = 0; q < VPL; ++q)
                if (c0 + q < N) dst[q] = sd_from_f32(acc[i][q]);
        }
    }
}

/*---
name: sp24_stream
family: sparse24_gemm
operation: spmm
format: "2:4"
dtypes: [fp16, bf16, fp8_e4m3]
archs: [sm_80]
strategy: skinny_stream
summary: >
  2:4 sparse times a skinny B (N <= 64, decode-time batches) as a bandwidth-bound stream: the compressed A and its
  metadata are read once, with 16-byte cp.async into a per-warp ring of STAGES shared-memory stages, so each SM
  keeps tens of KB in flight without holding them in registers. K is cut into slices of 64 * WARPS * UP columns
  (grid.y); within a slice warp w always owns the same UP 64-column pairs, so its B fragments are gathered once
  (its rows of B copied with 16-byte loads into shared memory the first stages do not use yet) and stay in
  registers. A block walks m-tiles of 16 * MT rows (grid.x row groups sized to the SM count, tile i to block i mod
  grid.x); per tile each warp multiplies its pairs on mma.sp m16n8k32 (fp8 e4m3 widened to fp16 times 2^-8 as in
  sp24_skinny), the warps' sums meet in shared memory in warp order, and the block writes C through the epilogue
  (one slice) or its slice's fp32 partial to the workspace, which a second launch sums in slice order before the
  epilogue (alpha, row bias, ReLU/GELU; with one slice it returns at once). Deterministic, no atomics. The slices'
  partials cost NT / (WARPS * UP) of A's traffic (6% at N <= 16 with 16 warps of 2 pairs). Not measured yet.
preparation: epilogue_operands
parameters:
  MT: [1, 2]
  NT: [1, 2, 4, 8]
  WARPS: [4, 8, 16]
  UP: [1, 2, 4]
  STAGES: [2, 3, 4, 6]
  BPS: [1, 2]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "N <= 8 * NT"
  - "UP * NT <= 8"
  - "MT * NT <= 8"
  - "BPS * WARPS <= 16"
  - "BPS * (WARPS * (STAGES * MT * UP * (512 * value_bytes + 128) + 2 * MT * NT * 512) + 1024) <= 233472"
  - "MT * UP * (512 * value_bytes + 128) + 1024 * MT * NT >= 512 * UP * NT * value_bytes"  # B staging fits
workspace:
  partial: {dtype: fp32, size: "ceil_div(K, 64 * WARPS * UP) * M * 8 * NT"}
kernels:
  - entry: sp24_stream
    grid: ["max(1, min(ceil_div(M, 16 * MT), BPS * num_sms // ceil_div(K, 64 * WARPS * UP)))",
           "ceil_div(K, 64 * WARPS * UP)", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "WARPS * (STAGES * MT * UP * (512 * value_bytes + 128) + 2 * MT * NT * 512)"
    args: [A_values, A_meta, B, bias, C, partial, M, N, K, has_bias, act, alpha]
  - entry: sp24_stream_reduce
    grid: ["ceil_div(M * 4 * NT, 256)", "1", "1"]
    block: ["256", "1", "1"]
    args: [partial, bias, C, M, N, K, has_bias, act, alpha]
---*/
// Work: K in pairs of 64 logical columns (32 compressed values per row); slice s = blockIdx.y holds pairs
// s*WARPS*UP ..; warp w of it pairs p0 = s*WARPS*UP + w*UP .. p0+UP-1 (pairs past K/64 are skipped: the last slice
// may be short). Block x of a slice takes the m-tiles (16*MT rows) x, x + gridDim.x, ...: a "unit" per tile, the
// same count for every warp of the block.
// Relabelling inside a pair (groups 0..15 of its 64 columns): mma j (0, 1) of the pair takes the pair's groups
// 4v + 2j as its group v < 4 and 4(v-4) + 2j + 1 as its group v >= 4, so lane t's A registers (the mma's groups t
// and t+4) are the pair's groups 4t+2j, 4t+2j+1, and lane t's 16 bytes of a row (compressed values 8t .. 8t+7,
// groups 4t .. 4t+3; fp8: 8 bytes) serve both mmas. Metadata of mma j for lane pair p = t & 1 (the mma's groups
// 4p .. 4p+3): nibble 2j+p of each of the pair's four stored words (its 16-column blocks c = 0..3), placed at nibble
// c. B register q of lane t, mma j: the pair's rows 4 rho_j(2q + t/2) + 2(t&1), +1 of column 8nt + g (gathered
// once per block). tests/families/test_sparse24_kernels.py emulates every index here against the instruction.
// Shared memory: per warp [a ring of STAGES stages][two accumulator buffers]. A stage holds, for mt < MT and
// u < UP, the pair's 16 rows of A (row-major, 32*VB bytes a row: a lane's 16 (fp8: 8) bytes of rows g and g+8 are
// one conflict-free vector load per quarter-warp), then the pair's 32 metadata words ([c][g], as stored). The
// buffers ([mt][nt][lane][4], float4 stores) alternate between tiles, so one barrier per tile suffices: a buffer is
// written again only after the next tile's barrier, which every reader has passed. Before the first tile, the last
// ring slot and the buffers (contiguous, not yet used) hold the warp's rows of B while it gathers its fragments.
// Pipeline per warp: the stages of units n+1 .. n+STAGES-1 are in flight while unit n is multiplied.
#define SP24S_THREADS (32 * WARPS)
#define SP24S_ROW_BYTES (32 * SP24_VB)                          // one row of one pair, compressed
#define SP24S_A_BYTES (16 * SP24S_ROW_BYTES)                     // one m-tile of one pair
#define SP24S_META_OFFSET (MT * UP * SP24S_A_BYTES)              // the metadata words after the A rows of a stage
#define SP24S_STAGE_BYTES (MT * UP * (SP24S_A_BYTES + 128))
#define SP24S_RING_BYTES (STAGES * SP24S_STAGE_BYTES)
#define SP24S_PART_FLOATS (MT * NT * 128)                        // one warp's accumulators
#define SP24S_WARP_BYTES (SP24S_RING_BYTES + 8 * SP24S_PART_FLOATS) // a warp's ring, then its two accumulator buffers
#define SP24S_SLICE_PAIRS (WARPS * UP)

__device__ __forceinline__ unsigned sp24s_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, marked evict-first in L2 (A and its metadata are read once).
__device__ __forceinline__ void sp24s_cp16(unsigned dst, const void* src, unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "l"(policy) : "memory");
}

// One warp's stage for the tile at row m0: its pairs p0 .. p0+UP-1 for each m-tile (A rows, then metadata).
// Consecutive lanes take consecutive 16-byte chunks of a row's UP pairs, so a row's slice is read contiguously.
__device__ __forceinline__ void sp24s_copy_stage(unsigned dst, const sp24_in_t* __restrict__ A_values,
                                                 const int* __restrict__ A_meta, int m0, int p0, int M, int K,
                                                 int lane, unsigned long long policy) {
    constexpr int CPR = SP24S_ROW_BYTES / 16;  // chunks per row of one pair: 4 (fp8: 2)
    constexpr int A_CHUNKS = MT * 16 * UP * CPR, M_CHUNKS = MT * UP * 8;
    const int pairs = K / 64;
#pragma unroll
    for (int k = 0; k < (A_CHUNKS + 31) / 32; ++k) {
        const int i = lane + 32 * k;
        const int c = i % CPR, u = (i / CPR) % UP, r = (i / (CPR * UP)) % 16, mt = i / (CPR * UP * 16);
        if (i < A_CHUNKS && m0 + 16 * mt < M && p0 + u < pairs) {
            const long long row = m0 + 16 * mt + r;
            const char* src = reinterpret_cast<const char*>(A_values + row * (K / 2) + 32LL * (p0 + u)) + 16 * c;
            sp24s_cp16(dst + ((mt * UP + u) * 16 + r) * SP24S_ROW_BYTES + 16 * c, src, policy);
        }
    }
#pragma unroll
    for (int k = 0; k < (M_CHUNKS + 31) / 32; ++k) {
        const int i = lane + 32 * k;
        const int c = i % 8, u = (i / 8) % UP, mt = i / (8 * UP);
        if (i < M_CHUNKS && m0 + 16 * mt < M && p0 + u < pairs) {
            const long long word = ((long long)(m0 / 16 + mt) * (K / 16) + 4LL * (p0 + u)) * 8 + 4 * c;
            sp24s_cp16(dst + SP24S_META_OFFSET + (mt * UP + u) * 128 + 16 * c, A_meta + word, policy);
        }
    }
}

// Row of the pair (0..63) that mma j's B register q of lane t holds at its low half (the next row at its high half).
__device__ __forceinline__ int sp24s_b_row(int j, int q, int t) {
    const int v = 2 * q + (t >> 1);  // the mma's group
    const int rho = v < 4 ? 4 * v + 2 * j : 4 * (v - 4) + 2 * j + 1;
    return 4 * rho + 2 * (t & 1);
}

// The warp's B rows k0 .. k0 + rows - 1 (all N columns) copied as they are into shared memory at `scratch`: a
// contiguous run of B, 16-byte aligned and a whole number of 16-byte chunks (k0 and rows are multiples of 64), read
// with 16-byte loads, a batch of them in flight at once.
__device__ __forceinline__ void sp24s_stage_b(unsigned char* scratch, const sp24_in_t* __restrict__ B, long long k0,
                                              int rows, int N, int lane) {
    const int chunks = rows * N * SP24_VB / 16;
    const uint4* src = reinterpret_cast<const uint4*>(B + k0 * N);
#pragma unroll 8
    for (int c = lane; c < chunks; c += 32) reinterpret_cast<uint4*>(scratch)[c] = __ldg(src + c);
}

// B rows k, k+1 (of the staged run) of column n as one fragment register; zero for a column past N.
__device__ __forceinline__ unsigned sp24s_b_pair(const unsigned char* scratch, int k, int n, int N) {
    if (n >= N) return 0u;
    const sp24_in_t* b = reinterpret_cast<const sp24_in_t*>(scratch);
    const unsigned lo = b[k * N + n], hi = b[(k + 1) * N + n];
#if SD_DTYPE == 3
    return sp24_e4m3x2_to_f16x2(lo | (hi << 8));
#else
    return lo | (hi << 16);
#endif
}

// mma j's metadata for lane pair p from the pair's four stored words of row pair (g, g+8): nibble 2j+p of word c
// goes to nibble c (both halves at once).
__device__ __forceinline__ unsigned sp24s_meta(const unsigned (&w)[4], int shift) {
    unsigned out = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) out |= ((w[c] >> shift) & 0x000F000Fu) << (4 * c);
    return out;
}

// Lane t's 16 bytes of one row of a pair in the stage (compressed values 8t .. 8t+7) as four 16-bit pairs.
__device__ __forceinline__ uint4 sp24s_a_row(const unsigned char* row, int t) {
#if SD_DTYPE == 3
    const uint2 r = *reinterpret_cast<const uint2*>(row + 8 * t);
    return make_uint4(sp24_e4m3x2_to_f16x2(r.x & 0xFFFFu), sp24_e4m3x2_to_f16x2(r.x >> 16),
                      sp24_e4m3x2_to_f16x2(r.y & 0xFFFFu), sp24_e4m3x2_to_f16x2(r.y >> 16));
#else
    return *reinterpret_cast<const uint4*>(row + 16 * t);
#endif
}

extern "C" __global__ void __launch_bounds__(SP24S_THREADS, BPS)
sp24_stream(const sp24_in_t* __restrict__ A_values, const int* __restrict__ A_meta, const sp24_in_t* __restrict__ B,
            const unsigned short* __restrict__ bias, unsigned short* __restrict__ C, float* __restrict__ partial,
            int M, int N, int K, int has_bias, int act, float alpha)
{
    extern __shared__ __align__(16) unsigned char sp24s_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int pairs = K / 64, slice = blockIdx.y, slices = gridDim.y;
    const int p0 = slice * SP24S_SLICE_PAIRS + warp * UP;
    const int tiles = (M + 16 * MT - 1) / (16 * MT);
    const int units = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    unsigned char* ring = sp24s_smem + warp * SP24S_WARP_BYTES;
    const unsigned ring_at = sp24s_smem_addr(ring);
    const unsigned long long policy = sd_policy_evict_first();

#pragma unroll
    for (int n = 0; n < STAGES - 1; ++n) {  // the first STAGES - 1 units in flight (empty groups past the end)
        if (n < units)
            sp24s_copy_stage(ring_at + n * SP24S_STAGE_BYTES, A_values, A_meta,
                             16 * MT * ((int)blockIdx.x + n * (int)gridDim.x), p0, M, K, lane, policy);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    // the warp's B fragments, for every unit: [u][mma j][nt][register q], gathered from its rows of B staged in
    // the part of its shared memory that the first units do not use yet (the last ring slot and the accumulator
    // buffers; a declared constraint makes it large enough)
    unsigned b[UP][2][NT][4];
    {
        unsigned char* scratch = ring + (STAGES - 1) * SP24S_STAGE_BYTES;
        const int rows = p0 < pairs ? 64 * (pairs - p0 < UP ? pairs - p0 : UP) : 0;
        if (rows > 0) sp24s_stage_b(scratch, B, 64LL * p0, rows, N, lane);
        __syncwarp();
#pragma unroll
        for (int u = 0; u < UP; ++u)
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int k = 64 * u + sp24s_b_row(j, q, t);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
                        b[u][j][nt][q] = 64 * u < rows ? sp24s_b_pair(scratch, k, 8 * nt + g, N) : 0u;
                }
        __syncwarp();  // every lane has read the scratch before the ring and the buffers are written again
    }

#if SD_DTYPE == 3
    const float scale = alpha * 65536.f;  // undoes the 2^-8 on each operand
#else
    const float scale = alpha;
#endif
    const int shift = 4 * (t & 1);
    float acc[MT][NT][4];
    sp24_zero(acc);

    for (int n = 0; n < units; ++n) {
        const int ahead = n + STAGES - 1;  // its slot held unit n - 1, which this warp has finished reading
        if (ahead < units)
            sp24s_copy_stage(ring_at + (ahead % STAGES) * SP24S_STAGE_BYTES, A_values, A_meta,
                             16 * MT * ((int)blockIdx.x + ahead * (int)gridDim.x), p0, M, K, lane, policy);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1) : "memory");  // unit n's group has landed
        __syncwarp();  // and every lane's copies of it are visible to the warp

        const int m0 = 16 * MT * ((int)blockIdx.x + n * (int)gridDim.x);
        const unsigned char* stage = ring + (n % STAGES) * SP24S_STAGE_BYTES;
#pragma unroll
        for (int u = 0; u < UP; ++u) {
            if (p0 + u >= pairs) break;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (m0 + 16 * mt >= M) break;
                const unsigned char* rows = stage + (mt * UP + u) * SP24S_A_BYTES;
                const uint4 x = sp24s_a_row(rows + g * SP24S_ROW_BYTES, t);
                const uint4 y = sp24s_a_row(rows + (g + 8) * SP24S_ROW_BYTES, t);
                const unsigned* words = reinterpret_cast<const unsigned*>(stage + SP24S_META_OFFSET + (mt * UP + u) * 128);
                const unsigned w[4] = {words[g], words[8 + g], words[16 + g], words[24 + g]};
                const unsigned a0[4] = {x.x, y.x, x.y, y.y}, a1[4] = {x.z, y.z, x.w, y.w};
                const unsigned e0 = sp24s_meta(w, shift), e1 = sp24s_meta(w, shift + 8);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    sp24_mma_k32(acc[mt][nt], a0, b[u][0][nt], e0);
                    sp24_mma_k32(acc[mt][nt], a1, b[u][1][nt], e1);
                }
            }
        }

        // the warps' sums of this tile meet in their buffers n & 1
        float* mine = reinterpret_cast<float*>(ring + SP24S_RING_BYTES) + (n & 1) * SP24S_PART_FLOATS;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                *reinterpret_cast<float4*>(mine + ((mt * NT + nt) * 32 + lane) * 4) =
                    make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]);
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
            }
        __syncthreads();
        const float* sums = reinterpret_cast<const float*>(sp24s_smem + SP24S_RING_BYTES) + (n & 1) * SP24S_PART_FLOATS;
        for (int x = threadIdx.x; x < MT * NT * 64; x += SP24S_THREADS) {  // (mt, nt, lane, h): a column pair
            const int h = x & 1, ln = (x >> 1) & 31, tile = x >> 6, mt = tile / NT, nt = tile % NT;
            const int row = m0 + 16 * mt + (ln >> 2) + 8 * h, col = 8 * nt + 2 * (ln & 3);
            if (row >= M) continue;
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {  // in warp order: deterministic
                const float2 v = *reinterpret_cast<const float2*>(sums + w * (SP24S_WARP_BYTES / 4) + (tile * 32 + ln) * 4 + 2 * h);
                s0 += v.x;
                s1 += v.y;
            }
            if (slices == 1) {
                const float bv = has_bias ? sp24_out_to_f32(bias[row]) : 0.f;
                sp24_store_pair(C, row, col, N, s0, s1, scale, bv, act);
            } else {
                *reinterpret_cast<float2*>(partial + ((long long)slice * M + row) * (8 * NT) + col) = make_float2(s0, s1);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// The slices' partial sums of one column pair of C, added in slice order, through the epilogue. With one slice
// the main kernel has written C and every thread leaves at once.
extern "C" __global__ void __launch_bounds__(256)
sp24_stream_reduce(const float* __restrict__ partial, const unsigned short* __restrict__ bias,
                   unsigned short* __restrict__ C, int M, int N, int K, int has_bias, int act, float alpha)
{
    const int slices = (K + 64 * SP24S_SLICE_PAIRS - 1) / (64 * SP24S_SLICE_PAIRS);
    const long long x = (long long)blockIdx.x * 256 + threadIdx.x;
    const int row = (int)(x / (4 * NT)), col = 2 * (int)(x % (4 * NT));
    if (slices == 1 || row >= M || col >= N) return;
#if SD_DTYPE == 3
    const float scale = alpha * 65536.f;
#else
    const float scale = alpha;
#endif
    float s0 = 0.f, s1 = 0.f;
    for (int s = 0; s < slices; ++s) {
        const float2 v = __ldcs(reinterpret_cast<const float2*>(partial + ((long long)s * M + row) * (8 * NT) + col));
        s0 += v.x;
        s1 += v.y;
    }
    const float bv = has_bias ? sp24_out_to_f32(bias[row]) : 0.f;
    sp24_store_pair(C, row, col, N, s0, s1, scale, bv, act);
}

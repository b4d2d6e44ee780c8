/*---
name: sp24_mma_sp
family: sparse24_gemm
operation: spmm
format: "2:4"
dtypes: [fp16, bf16, fp8_e4m3]
archs: [sm_80]
strategy: tensor_core
summary: >
  Tiled 2:4 sparse GEMM on the sparse tensor cores (mma.sp with ordered metadata), C = act(alpha A B + bias).
  A block computes a BM x BN tile of C; WM x WN warps each own a (BM/WM) x (BN/WN) warp tile of m16n8
  accumulators. Every BK = 64 logical columns of K, the block copies the compressed A tile (BM x 32 values),
  its metadata words (BM/16 x 4 x 8) and the B tile (64 x BN) into one of STAGES shared-memory stages with
  16-byte cp.async (zero-filled past M and N), so STAGES - 1 tiles are in flight while one is multiplied.
  fp16/bf16: two m16n8k32 steps per tile, A fragments by ldmatrix.x4 from the compressed tile (the same
  register layout as a dense m16n8k16 A), B fragments by ldmatrix.x4.trans, one metadata word per lane
  (lane pairs 0,1 of each quad carry it). fp8 e4m3 on sm_89 (Ada): one m16n8k64 e4m3 step per tile, A by
  ldmatrix.x4, B fragments assembled from bytes (ldmatrix cannot transpose 8-bit values), metadata from all four
  lanes of a quad. fp8 elsewhere (sm_80/86, and Hopper, whose warp-level fp8 mma.sp ptxas only emulates): the
  values are widened to fp16 scaled by 2^-8 (exact) and multiplied with the fp16 instruction, the accumulator
  scaled back by 2^16; fp8 keeps its halved bytes but not a doubled rate. The epilogue applies alpha, the row bias
  (has_bias) and ReLU/GELU (act: 0, 1, 2) in fp32 and stores 16-bit C. N need not be a multiple of 8 (B then goes
  into shared memory element by element). Not measured yet.
preparation: epilogue_operands
parameters:
  BM: [64, 128, 256]
  BN: [64, 128, 256]
  BK: [64]
  WM: [1, 2, 4]
  WN: [1, 2, 4]
  STAGES: [2, 3, 4, 5]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "BM % (16 * WM) == 0"
  - "BN % (8 * WN) == 0"
  - "BN * value_bytes >= 128"
  - "(BM // WM) * (BN // WN) <= 4096"
  - "STAGES * (BM * BK // 2 * value_bytes + BM * BK // 8 + BK * BN * value_bytes) <= 232448"
kernels:
  - entry: sp24_mma_sp
    grid: ["ceil_div(N, BN)", "ceil_div(M, BM)", "1"]
    block: ["32 * WM * WN", "1", "1"]
    shared_bytes: "STAGES * (BM * BK // 2 * value_bytes + BM * BK // 8 + BK * BN * value_bytes)"
    args: [A_values, A_meta, B, bias, C, M, N, K, has_bias, act, alpha]
---*/
// Mapping: block (bx, by) owns C[by*BM .., bx*BN ..]; warp w = wm + WM * wn owns rows wm*(BM/WM) .. and columns
// wn*(BN/WN) .. of it, MT = BM/WM/16 m-tiles by NT = BN/WN/8 n-tiles. Lane (g = lane/4, t = lane%4) holds the
// accumulators of rows g, g+8 and columns 2t, 2t+1 of each m16n8 tile.
// Shared memory, per stage: the compressed A tile (BM rows of BK/2 values, 16-byte chunks XOR-swizzled by row so
// that the 8 rows an ldmatrix phase reads fall in distinct banks), the metadata words of the tile in their global
// order ([16-row block][16-column block][g]) and the B tile (BK rows of BN values, chunks swizzled by k % 8).
// Metadata: the word of (16-row block mb, 16-column block kb, g) serves lane 4g + j for the step whose j-th
// 16-column block is kb (tools/families/sparse24_gemm/compression.py; tests/families/test_sparse24_kernels.py
// emulates every index below).
// Warp-level e4m3 mma.sp is native on sm_89 (Ada) only: ptxas emulates it on Hopper (32 registers and a 4 KB stack
// frame at 128 x 128), where fp8 at full rate needs wgmma.mma_async.sp. Elsewhere fp8 is widened to fp16.
#define SP24_FP8_NATIVE (SD_DTYPE == 3 && __CUDA_ARCH__ >= 890 && __CUDA_ARCH__ < 900)
#define SP24_FP8_WIDENED (SD_DTYPE == 3 && !SP24_FP8_NATIVE)

#define THREADS (32 * WM * WN)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT (WTN / 8)
#define A_ROW_BYTES (BK / 2 * SP24_VB)
#define A_CHUNKS (A_ROW_BYTES / 16)
#define A_TILE_BYTES (BM * A_ROW_BYTES)
#define META_ROW_WORDS (BK / 16 * 8)         // words of one 16-row block in a tile
#define META_TILE_BYTES (BM / 16 * META_ROW_WORDS * 4)
#define B_ROW_BYTES (BN * SP24_VB)
#define B_CHUNKS (B_ROW_BYTES / 16)
#define STAGE_BYTES (A_TILE_BYTES + META_TILE_BYTES + BK * B_ROW_BYTES)

// Byte offset of chunk c of compressed row r in the A tile: rows r and r + 8 / A_CHUNKS .. differ in their chunk.
__device__ __forceinline__ int sp24_a_offset(int r, int c) {
    return r * A_ROW_BYTES + ((c ^ ((r / (8 / A_CHUNKS)) % A_CHUNKS)) << 4);
}

// Byte offset of chunk c of row k in the B tile.
__device__ __forceinline__ int sp24_b_offset(int k, int c) { return k * B_ROW_BYTES + ((c ^ (k & 7)) << 4); }

__device__ __forceinline__ unsigned sp24_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void sp24_cp16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(sp24_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void sp24_ldsm_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sp24_smem_addr(p)));
}

__device__ __forceinline__ void sp24_ldsm_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sp24_smem_addr(p)));
}


#if SP24_FP8_NATIVE
// D += A B for one m16n8k64 e4m3 step: A compressed 16 x 32 in a, B 64 x 8 in b, metadata e (all four lanes: lane
// 4g + t one row, g + 8 (t % 2), 32 columns from 32 (t / 2)).
__device__ __forceinline__ void sp24_mma_k64_e4m3(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[4], unsigned e) {
    asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}
#endif


// Copies tile kt (logical columns kt*BK ..) of A, its metadata and B into stage `s`.
__device__ __forceinline__ void sp24_load_tile(unsigned char* s, const sp24_in_t* __restrict__ A_values,
                                               const int* __restrict__ A_meta, const sp24_in_t* __restrict__ B,
                                               int m0, int n0, int kt, int M, int N, int K) {
    const int tid = threadIdx.x;
    const int k0 = kt * BK;
    for (int i = tid; i < BM * A_CHUNKS; i += THREADS) {
        const int r = i / A_CHUNKS, c = i % A_CHUNKS;
        const bool valid = m0 + r < M;
        const sp24_in_t* src = A_values + (valid ? ((long long)(m0 + r) * (K / 2) + k0 / 2 + c * (16 / SP24_VB)) : 0);
        sp24_cp16(s + sp24_a_offset(r, c), src, valid);
    }
    unsigned char* meta = s + A_TILE_BYTES;
    for (int i = tid; i < BM / 16 * (META_ROW_WORDS / 4); i += THREADS) {
        const int mb = i / (META_ROW_WORDS / 4), c = i % (META_ROW_WORDS / 4);
        const bool valid = m0 + 16 * mb < M;
        const int* src = A_meta + (valid ? ((long long)(m0 / 16 + mb) * (K / 16) + k0 / 16) * 8 + 4 * c : 0);
        sp24_cp16(meta + (mb * META_ROW_WORDS + 4 * c) * 4, src, valid);
    }
    unsigned char* btile = meta + META_TILE_BYTES;
    if (N % (16 / SP24_VB) == 0) {  // every 16-byte chunk of a B row is wholly inside N or wholly past it
        for (int i = tid; i < BK * B_CHUNKS; i += THREADS) {
            const int k = i / B_CHUNKS, c = i % B_CHUNKS;
            const int col = n0 + c * (16 / SP24_VB);
            const bool valid = col < N;
            sp24_cp16(btile + sp24_b_offset(k, c), B + (valid ? (long long)(k0 + k) * N + col : 0), valid);
        }
    } else {  // rows of B are not 16-byte aligned: element by element through registers
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, n = i % BN;
            const sp24_in_t v = n0 + n < N ? B[(long long)(k0 + k) * N + n0 + n] : (sp24_in_t)0;
            *reinterpret_cast<sp24_in_t*>(btile + sp24_b_offset(k, n * SP24_VB / 16) + (n * SP24_VB) % 16) = v;
        }
    }
}

// One BK-wide tile of the warp's product from stage `s`. An m-tile past M (rows of 16, M a multiple of 16) is
// skipped: its zero-filled metadata is no valid code.
__device__ __forceinline__ void sp24_tile_product(const unsigned char* s, float (&acc)[MT][NT][4], int wm, int wn, int lane,
                                                  int rows_left) {
    const unsigned char* atile = s;
    const unsigned* meta = reinterpret_cast<const unsigned*>(s + A_TILE_BYTES);
    const unsigned char* btile = s + A_TILE_BYTES + META_TILE_BYTES;
    const int g = lane >> 2, t = lane & 3;
    // the row and 16-byte chunk this lane addresses for ldmatrix.x4 on a 16-row, 32-byte slice of the A tile
    const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;
#if SP24_FP8_NATIVE
    unsigned a[MT][4], e[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r = wm * WTM + mt * 16 + a_row;
        sp24_ldsm_x4(a[mt], atile + sp24_a_offset(r, a_chunk));
        // lane 4g + t: row g + 8 (t % 2), columns 32 (t / 2) .. +31 (the 8-bit metadata layout, CuTe's ELayout of
        // the m16n8k64 sparse MMA): that row's halves of the stored words 2 (t / 2) and 2 (t / 2) + 1, side by side
        const unsigned* words = meta + (wm * WTM / 16 + mt) * META_ROW_WORDS + 2 * (t >> 1) * 8 + g;
        e[mt] = __byte_perm(words[0], words[8], (t & 1) ? 0x7632 : 0x5410);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int n = wn * WTN + nt * 8 + g;
        unsigned b[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            b[q] = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int k = 16 * q + 4 * t + i;
                b[q] |= (unsigned)btile[sp24_b_offset(k, n >> 4) + (n & 15)] << (8 * i);
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            if (wm * WTM + mt * 16 < rows_left) sp24_mma_k64_e4m3(acc[mt][nt], a[mt], b, e[mt]);
    }
#else
#pragma unroll
    for (int step = 0; step < BK / 32; ++step) {  // 32 logical columns: 16 compressed values, 32 (fp8: 16) bytes
        unsigned a[MT][4], e[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if SP24_FP8_WIDENED
            // the fp16 fragment: rows g, g+8 and compressed columns 2t, 2t+1 then 2t+8, 2t+9 of the step
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int r = wm * WTM + mt * 16 + g + 8 * (j & 1);
                const int byte = 16 * step + 2 * t + 8 * (j >> 1);
                const unsigned pair = *reinterpret_cast<const unsigned short*>(atile + sp24_a_offset(r, byte >> 4) + (byte & 15));
                a[mt][j] = sp24_e4m3x2_to_f16x2(pair);
            }
#else
            sp24_ldsm_x4(a[mt], atile + sp24_a_offset(wm * WTM + mt * 16 + a_row, 2 * step + a_chunk));
#endif
            e[mt] = meta[(wm * WTM / 16 + mt) * META_ROW_WORDS + (2 * step + (t & 1)) * 8 + g];
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            unsigned b[4];
            const int n_base = wn * WTN + nt * 8;
#if SP24_FP8_WIDENED
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int k = 32 * step + 8 * q + 2 * t, n = n_base + g;
                const unsigned lo = btile[sp24_b_offset(k, n >> 4) + (n & 15)];
                const unsigned hi = btile[sp24_b_offset(k + 1, n >> 4) + (n & 15)];
                b[q] = sp24_e4m3x2_to_f16x2(lo | (hi << 8));
            }
#else
            sp24_ldsm_x4_trans(b, btile + sp24_b_offset(32 * step + 8 * (lane >> 3) + (lane & 7), n_base >> 3));
#endif
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                if (wm * WTM + mt * 16 < rows_left) sp24_mma_k32(acc[mt][nt], a[mt], b, e[mt]);
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
sp24_mma_sp(const sp24_in_t* __restrict__ A_values, const int* __restrict__ A_meta, const sp24_in_t* __restrict__ B,
            const unsigned short* __restrict__ bias, unsigned short* __restrict__ C, int M, int N, int K,
            int has_bias, int act, float alpha)
{
    extern __shared__ __align__(128) unsigned char sp24_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % WM, wn = warp / WM;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = K / BK;

    float acc[MT][NT][4];
    sp24_zero(acc);

    // Prologue: tiles 0 .. STAGES-2 in flight. One commit group per tile slot, empty past the last tile, so that
    // "all but STAGES-2 groups complete" always means "the tile about to be used has arrived".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) sp24_load_tile(sp24_smem + s * STAGE_BYTES, A_values, A_meta, B, m0, n0, s, M, N, K);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int kt = 0; kt < tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 2) : "memory");
        __syncthreads();  // tile kt visible to all; every warp is done with the stage the next copy overwrites
        const int next = kt + STAGES - 1;
        if (next < tiles)
            sp24_load_tile(sp24_smem + (next % STAGES) * STAGE_BYTES, A_values, A_meta, B, m0, n0, next, M, N, K);
        asm volatile("cp.async.commit_group;" ::: "memory");
        sp24_tile_product(sp24_smem + (kt % STAGES) * STAGE_BYTES, acc, wm, wn, lane, M - m0);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");

    const int g = lane >> 2, t = lane & 3;
#if SP24_FP8_WIDENED
    const float scale = alpha * 65536.f;  // undoes the 2^-8 on each operand
#else
    const float scale = alpha;
#endif
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * WTM + mt * 16 + g + 8 * h;
            if (row >= M) continue;
            const float b = has_bias ? sp24_out_to_f32(bias[row]) : 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                sp24_store_pair(C, row, n0 + wn * WTN + nt * 8 + 2 * t, N, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1],
                                scale, b, act);
            }
        }
    }
}

/*---
name: spmm_bsr_tc
family: csr_spmm
operation: spmm
format: bsr
dtypes: [fp16, bf16]
archs: [sm_80, sm_90]
strategy: tensor_core_bsr
summary: >
  BSR SpMM on tensor cores for matrices of dense blocks (FEM with several unknowns per node, block-pruned
  weights). The preparation `bsr_blocks` stores every BR x BC block that holds a nonzero dense (zeros
  filled); each warp owns one block row and NT columns of C and computes C transposed with mma.sync
  (m16n8k16, or m16n8k8 when BC is not a multiple of 16): 16 columns of B x BC rows as the A operand,
  read from shared memory with ldmatrix.trans, and the block's 8-row slices as the B operand, read
  from global memory as 32-bit pairs of one block row; fp32 accumulation, products exact. The B rows
  of the next block are copied into the warp's second shared-memory stage with 16-byte cp.async
  (element loads when N is not a multiple of 8) and its block values loaded into registers while the
  current block is multiplied. Stored zeros are multiplied and moved too: worth it when the fill
  (stored values over nonzeros, the preparation's fill_permille) is near 1, e.g. BR = 8 or 24 rows of
  24 x 24 FEM blocks. B must be finite (a filled zero times Inf is NaN, as in dense GEMM). fp32 is not
  offered: a 3xTF32 split misses the family's per-element bound where a factor is subnormal (tf32 keeps
  fp32's exponent range, so hi + lo hold fewer than the 22 bits of it a normal product needs): up to 5x on
  FEM rows of about 24 nonzeros, though within 0.1 of it on rows of 24 x 24 blocks; and single-term
  elements in the normal range reach 0.8 of it (tests/tools/test_bsr.py). Not yet run on a GPU.
preparation: bsr_blocks
streams: [bsr_ptr, bsr_col, bsr_vals]
parameters:
  BR: [8, 16, 24, 32]
  BC: [8, 16, 24, 32]
  NT: [16, 32, 64, 128]
  WARPS: [1, 2, 4, 8]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "NT == 16 or NT - 16 < N"
  - "(NT // 16) * (BR // 8) <= 24"
kernels:
  - entry: spmm_bsr_tc
    grid: ["ceil_div(n_brows, WARPS)", "ceil_div(N, NT)", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "WARPS * 2 * BC * (NT + 8) * value_bytes"
    args: [bsr_ptr, bsr_col, bsr_vals, B, C, M, K, N, n_brows]
---*/
// Mapping: warp w of block (bx, by) owns block row br = bx*WARPS + w (rows br*BR .. +BR) and the NT columns
// from n0 = by*NT. With g = lane / 4 and q = lane % 4, one mma computes D = A_op * B_op with
//   A_op[m][k] = B[kb + k][n0 + 16*mt + m]     (16 columns of C x KS rows of the block column; shared memory)
//   B_op[k][n] = blk[8*rt + n][ks*KS + k]      (the block's row slice rt of 8 rows, k-step ks of KS columns)
//   D[m][n]    = C[br*BR + 8*rt + n][n0 + 16*mt + m]
// where kb = bsr_col[j] * BC + ks*KS, so lane (g, q) holds B_op pairs blk[8*rt + g][ks*KS + 2q + 8r .. +1]
// (one 32-bit load each, r < KS / 8) and ends with C rows 8*rt + 2q, +1 at columns 16*mt + g, +8.
// The warp's stage holds B rows bsr_col[j]*BC .. +BC, NT columns, each row padded by 8 values so that the
// 8 row addresses of an ldmatrix phase fall in distinct banks; rows past K and columns past N are zeros.
#define KS ((BC % 16) ? 8 : 16)   // columns of a block per mma
#define KSTEPS (BC / KS)
#define RT (BR / 8)               // 8-row slices of a block
#define MT (NT / 16)              // 16-column tiles of C
#define KREG (KS / 8)             // 32-bit B_op registers per mma
#define STRIDE (NT + 8)           // values per stage row

__device__ __forceinline__ void sd_mma(float (&d)[4], const unsigned (&a)[2 * KREG], const unsigned (&b)[KREG]) {
#if KS == 16
    sd_mma_16816(d, a[0], a[1], a[2], a[3], b[0], b[1]);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." SD_MMA_TYPE "." SD_MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#endif
}

// The A_op fragment of k-step ks and column tile mt: 8x8 matrices (k rows 8*(i/2).., m columns 8*(i%2)..)
// transposed out of the stage; lane l gives the address of row l % 8 of matrix (l / 8) % (2*KREG).
__device__ __forceinline__ void sd_load_a(const value_t* stage, int ks, int mt, int lane, unsigned (&a)[2 * KREG]) {
    const int i = (lane / 8) % (2 * KREG);
    const value_t* row = stage + (ks * KS + (i / 2) * 8 + lane % 8) * STRIDE + mt * 16 + (i % 2) * 8;
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if KS == 16
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(addr) : "memory");
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(a[0]), "=r"(a[1]) : "r"(addr) : "memory");
#endif
}

// B rows k0 .. k0+BC, columns n0 .. n0+NT into a stage (zeros past K and N): 16-byte cp.async when rows are
// 16-byte aligned (N a multiple of 8), else element loads.
__device__ __forceinline__ void sd_stage_b(value_t* stage, const value_t* __restrict__ B, int k0, int n0, int K, int N,
                                           int lane) {
    if (N % 8 == 0) {
        for (int c = lane; c < BC * (NT / 8); c += 32) {
            const int r = c / (NT / 8), col = n0 + (c % (NT / 8)) * 8;
            const bool in = k0 + r < K && col < N;
            const value_t* src = in ? B + (long long)(k0 + r) * N + col : B;
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(stage + r * STRIDE + (c % (NT / 8)) * 8));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(in ? 16 : 0) : "memory");
        }
    } else {
        for (int e = lane; e < BC * NT; e += 32) {
            const int r = e / NT, col = n0 + e % NT;
            stage[r * STRIDE + e % NT] = (k0 + r < K && col < N) ? __ldg(B + (long long)(k0 + r) * N + col) : (value_t)0;
        }
    }
}

// The block's B_op registers: slice rt, k-step ks, register r = blk[8*rt + g][ks*KS + 2q + 8r .. +1].
__device__ __forceinline__ void sd_load_block(const value_t* __restrict__ vals, long long j, int g, int q,
                                              unsigned (&b)[RT][KSTEPS][KREG]) {
    const value_t* blk = vals + j * (BR * BC);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
            for (int r = 0; r < KREG; ++r)
                b[rt][ks][r] = __ldg(reinterpret_cast<const unsigned*>(blk + (8 * rt + g) * BC + ks * KS + 2 * q + 8 * r));
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_bsr_tc(const int* __restrict__ bsr_ptr, const int* __restrict__ bsr_col, const value_t* __restrict__ bsr_vals,
            const value_t* __restrict__ B, value_t* __restrict__ C, int M, int K, int N, int n_brows)
{
    extern __shared__ __align__(16) unsigned char sd_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int br = blockIdx.x * WARPS + warp;
    if (br >= n_brows) return;  // whole warps leave; the kernel synchronizes only within warps
    const int n0 = blockIdx.y * NT;
    const int g = lane / 4, q = lane % 4;
    value_t* stages = reinterpret_cast<value_t*>(sd_smem) + warp * 2 * BC * STRIDE;
    const int j0 = __ldg(bsr_ptr + br), j1 = __ldg(bsr_ptr + br + 1);

    float acc[MT][RT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) acc[mt][rt][0] = acc[mt][rt][1] = acc[mt][rt][2] = acc[mt][rt][3] = 0.f;

    unsigned next[RT][KSTEPS][KREG];
    if (j0 < j1) {
        sd_stage_b(stages, B, __ldg(bsr_col + j0) * BC, n0, K, N, lane);
        sd_load_block(bsr_vals, j0, g, q, next);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    for (int j = j0; j < j1; ++j) {
        const value_t* stage = stages + ((j - j0) & 1) * BC * STRIDE;
        unsigned b[RT][KSTEPS][KREG];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
                for (int r = 0; r < KREG; ++r) b[rt][ks][r] = next[rt][ks][r];
        if (j + 1 < j1) {  // the next block: its B rows into the other stage, its values into registers
            sd_stage_b(stages + ((j + 1 - j0) & 1) * BC * STRIDE, B, __ldg(bsr_col + j + 1) * BC, n0, K, N, lane);
            sd_load_block(bsr_vals, j + 1, g, q, next);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncwarp();
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                unsigned a[2 * KREG];
                sd_load_a(stage, ks, mt, lane, a);
#pragma unroll
                for (int rt = 0; rt < RT; ++rt) sd_mma(acc[mt][rt], a, b[rt][ks]);
            }
        __syncwarp();  // every lane is done with this stage before the next iteration copies into it
    }

    // acc[mt][rt] = {C[r][c], C[r+1][c], C[r][c+8], C[r+1][c+8]} with r = br*BR + 8*rt + 2q, c = n0 + 16*mt + g
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = br * BR + 8 * rt + 2 * q + h;
            if (row >= M) continue;
            value_t* dst = C + (long long)row * N;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int col = n0 + 16 * mt + g;
                if (col < N) dst[col] = sd_from_f32(acc[mt][rt][h]);
                if (col + 8 < N) dst[col + 8] = sd_from_f32(acc[mt][rt][2 + h]);
            }
        }
}

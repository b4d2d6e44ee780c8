/*---
name: sp24_skinny
family: sparse24_gemm
operation: spmm
format: "2:4"
dtypes: [fp16, bf16, fp8_e4m3]
archs: [sm_80]
strategy: skinny_stream
summary: >
  2:4 sparse times a skinny B (N <= 64, decode-time batches): memory-bound, so the kernel reads the compressed
  A and its metadata exactly once, straight from global memory into the registers of mma.sp m16n8k32 (fp16 or
  bf16; fp8 e4m3 values are widened to fp16 times 2^-8, exactly, and the sum scaled back by 2^16), with N padded
  to NT tiles of 8. A block owns 16*MT rows; its WARPS warps split K, each taking runs of UNROLL 32-column steps
  and issuing all loads of a run before its MMAs; the warps' partial sums meet in shared memory in a fixed order.
  Within each step the logical groups are relabelled (group 2t and 2t+1 of the step go to lane t's two A
  registers), so a lane reads 8 contiguous bytes of a row (4 for fp8) and a quad a whole 32-byte sector; the
  metadata nibbles and B rows follow the same relabelling. B (small, L2-resident) is read with scalar read-only
  loads. Epilogue as sp24_mma_sp (alpha, row bias, ReLU/GELU). Not measured yet.
preparation: epilogue_operands
parameters:
  MT: [1, 2, 4]
  NT: [1, 2, 4, 8]
  WARPS: [2, 4, 8]
  UNROLL: [1, 2, 4]
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "N <= 8 * NT"
  - "MT * NT <= 32"
  - "UNROLL * (5 * MT + 4 * NT) <= 96"
  - "(WARPS - 1) * 32 * MT * NT * 16 <= 232448"
kernels:
  - entry: sp24_skinny
    grid: ["ceil_div(M, 16 * MT)", "1", "1"]
    block: ["32 * WARPS", "1", "1"]
    shared_bytes: "(WARPS - 1) * 32 * MT * NT * 16"
    args: [A_values, A_meta, B, bias, C, M, N, K, has_bias, act, alpha]
---*/
// Mapping: block b owns rows 16*MT*b ..; warp w takes the 32-column steps s = (r*WARPS + w)*UNROLL + u
// (r = 0, 1, ...; u < UNROLL) for all MT m-tiles and NT n-tiles. Lane (g = lane/4, t = lane%4).
// Relabelling inside a step (logical columns 32s .. 32s+31, groups 8s .. 8s+7): the mma's group v is the step's
// group rho(v) = 2v for v < 4 and 2(v-4)+1 for v >= 4, so lane t's A registers (the mma's groups t and t+4) are
// the step's groups 2t and 2t+1: compressed values 16s+4t .. 16s+4t+3 of rows g and g+8, one 8-byte (fp8: 4-byte)
// load each. The metadata word of lane pair p (= t & 1) lists the mma's groups 4p .. 4p+3, that is the step's
// groups p, p+2, p+4, p+6: nibbles p and p+2 of the stored word of the step's first 16 columns, then nibbles p and
// p+2 of the second. B register q of lane t holds the mma's rows 8q+2t, +1 (its group 2q + t/2, offsets
// 2(t&1), +1): the step's rows 32s + 4 rho(2q + t/2) + 2(t&1), +1. (tests/families/test_sparse24_kernels.py
// emulates these indices against the instruction's definition.)



// The mma's metadata word for lane pair p from the stored words of the step's two 16-column blocks.
__device__ __forceinline__ unsigned sp24_relabel_meta(unsigned w0, unsigned w1, int p) {
    unsigned out = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const unsigned src = c < 2 ? w0 : w1;
        out |= ((src >> (4 * ((2 * c + p) & 3))) & 0x000F000Fu) << (4 * c);  // rows g and g+8 together
    }
    return out;
}

// The step's B row holding the mma's row 8q + 2t (+1 for the next).
__device__ __forceinline__ int sp24_relabel_k(int q, int t) {
    const int v = 2 * q + (t >> 1);
    return 4 * (v < 4 ? 2 * v : 2 * (v - 4) + 1) + 2 * (t & 1);
}

__device__ __forceinline__ unsigned sp24_b_pair(const sp24_in_t* __restrict__ B, long long k, int n, int N) {
    const unsigned lo = n < N ? (unsigned)__ldg(B + k * N + n) : 0u;
    const unsigned hi = n < N ? (unsigned)__ldg(B + (k + 1) * N + n) : 0u;
#if SD_DTYPE == 3
    return sp24_e4m3x2_to_f16x2(lo | (hi << 8));
#else
    return lo | (hi << 16);
#endif
}

// Lane t's A registers for one m-tile and step: rows g and g+8, the step's groups 2t and 2t+1.
__device__ __forceinline__ void sp24_load_a(const sp24_in_t* __restrict__ A_values, long long row, int K, int s, int t,
                                            unsigned (&a)[4]) {
    const long long at = row * (K / 2) + 16 * s + 4 * t;
    const long long at8 = at + 8LL * (K / 2);
#if SD_DTYPE == 3
    const unsigned r0 = __ldcs(reinterpret_cast<const unsigned*>(A_values + at));
    const unsigned r8 = __ldcs(reinterpret_cast<const unsigned*>(A_values + at8));
    a[0] = sp24_e4m3x2_to_f16x2(r0 & 0xFFFFu);
    a[1] = sp24_e4m3x2_to_f16x2(r8 & 0xFFFFu);
    a[2] = sp24_e4m3x2_to_f16x2(r0 >> 16);
    a[3] = sp24_e4m3x2_to_f16x2(r8 >> 16);
#else
    const uint2 r0 = __ldcs(reinterpret_cast<const uint2*>(A_values + at));
    const uint2 r8 = __ldcs(reinterpret_cast<const uint2*>(A_values + at8));
    a[0] = r0.x; a[1] = r8.x; a[2] = r0.y; a[3] = r8.y;
#endif
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
sp24_skinny(const sp24_in_t* __restrict__ A_values, const int* __restrict__ A_meta, const sp24_in_t* __restrict__ B,
            const unsigned short* __restrict__ bias, unsigned short* __restrict__ C, int M, int N, int K,
            int has_bias, int act, float alpha)
{
    extern __shared__ __align__(16) float sp24_partial[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * 16 * MT;
    const int steps = K / 32;

    float acc[MT][NT][4];
    sp24_zero(acc);

    for (int first = warp * UNROLL; first < steps; first += WARPS * UNROLL) {
        unsigned a[UNROLL][MT][4], e[UNROLL][MT], b[UNROLL][NT][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // every load of the run first
            const int s = first + u;
            if (s >= steps) break;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row0 = m0 + 16 * mt;
                if (row0 >= M) break;
                sp24_load_a(A_values, row0 + g, K, s, t, a[u][mt]);
                const long long word = ((long long)(row0 / 16) * (K / 16) + 2 * s) * 8 + g;
                e[u][mt] = sp24_relabel_meta((unsigned)__ldcs(A_meta + word), (unsigned)__ldcs(A_meta + word + 8), t & 1);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    b[u][nt][q] = sp24_b_pair(B, 32LL * s + sp24_relabel_k(q, t), 8 * nt + g, N);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (first + u >= steps) break;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (m0 + 16 * mt >= M) break;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) sp24_mma_k32(acc[mt][nt], a[u][mt], b[u][nt], e[u][mt]);
            }
        }
    }

    // warps 1.. leave their sums in shared memory ([warp-1][mt][nt][i][lane]: a warp's stores hit 32 banks)
    if (warp > 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    sp24_partial[((((warp - 1) * MT + mt) * NT + nt) * 4 + i) * 32 + lane] = acc[mt][nt][i];
    }
    __syncthreads();
    if (warp > 0) return;
#if SD_DTYPE == 3
    const float scale = alpha * 65536.f;  // undoes the 2^-8 on each operand
#else
    const float scale = alpha;
#endif
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + 16 * mt + g + 8 * h;
            if (row >= M) continue;
            const float bv = has_bias ? sp24_out_to_f32(bias[row]) : 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                float sum[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    sum[j] = acc[mt][nt][2 * h + j];
                    for (int w = 1; w < WARPS; ++w)
                        sum[j] += sp24_partial[((((w - 1) * MT + mt) * NT + nt) * 4 + 2 * h + j) * 32 + lane];
                }
                sp24_store_pair(C, row, 8 * nt + 2 * t, N, sum[0], sum[1], scale, bv, act);
            }
        }
    }
}

// What the csr_spmm kernels share: the 16-bit operand type of mma.sync and its m16n8k16 step (D += A B, fp32
// accumulation) for the tensor-core kernels, and a lane group's walk over a row for row split and the split kernel.
// Put in front of each of the family's kernels, after the project prelude.
#if SD_DTYPE == 2
#define SD_MMA_TYPE "bf16"
#else
#define SD_MMA_TYPE "f16"
#endif

__device__ __forceinline__ void sd_mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                             unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." SD_MMA_TYPE "." SD_MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One batch of `count` <= G nonzeros held by a group of G lanes (lane gl: column my_col, value my_val, shuffled
// inside the group's lanes `gmask`): U gathers of B row pieces (W columns from c0) issued before their FMAs. The
// gathers past the batch read a stand-in row of B and their products are skipped: 0 x Inf there would be NaN.
template <int G, int U, int W>
__device__ __forceinline__ void sd_group_batch(int my_col, float my_val, int count, unsigned gmask,
                                               const value_t* __restrict__ B, int N, int c0, bool vec_ok,
                                               float (&acc)[W]) {
    for (int t = 0; t < count; t += U) {
        float b[U][W];
        float a[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int src = min(t + u, G - 1);
            const int k = __shfl_sync(gmask, my_col, src, G);
            a[u] = __shfl_sync(gmask, my_val, src, G);
            const value_t* brow = B + (long long)k * N + c0;
            if (vec_ok) {
                sd_load_vec<W>(brow, b[u]);
            } else {
#pragma unroll
                for (int v = 0; v < W; ++v) b[u][v] = c0 + v < N ? sd_to_f32(__ldg(brow + v)) : 0.f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (t + u < count)
#pragma unroll
                for (int v = 0; v < W; ++v) acc[v] += a[u] * b[u][v];
    }
}

// A group's walk over nonzeros [first, hi) of one row, G at a time (one coalesced load of their columns and values),
// every `step` nonzeros: step G walks the whole row, step 32 shares it out among a warp's 32 / G groups.
template <int G, int U, int W>
__device__ __forceinline__ void sd_group_walk(const int* __restrict__ colind, const value_t* __restrict__ values,
                                              int first, int hi, int step, int gl, unsigned gmask,
                                              const value_t* __restrict__ B, int N, int c0, bool vec_ok,
                                              float (&acc)[W]) {
    for (int base = first; base < hi; base += step) {
        const int j = base + gl;
        const int my_col = j < hi ? __ldcs(colind + j) : 0;
        const float my_val = j < hi ? sd_to_f32(__ldcs(values + j)) : 0.f;
        sd_group_batch<G, U, W>(my_col, my_val, min(G, hi - base), gmask, B, N, c0, vec_ok, acc);
    }
}

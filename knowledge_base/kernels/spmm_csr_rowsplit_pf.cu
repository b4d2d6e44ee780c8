/*---
name: spmm_csr_rowsplit_pf
family: csr_spmm
operation: spmm
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: row_split
summary: >
  Row-split SpMM (one warp per row of A and a tile of 32*VW columns of B/C), tuned for memory-level
  parallelism: the next 32 (column, value) pairs of the row are prefetched while the current ones
  are used, UNROLL gathers of B row slices are kept in flight as raw bits (converted only at the
  FMA), and gathers for padding entries past the row end are skipped. Each lane loads VW
  consecutive B values with 16-byte (or 8/4-byte) loads. CVT=1 (fp16 only) widens B values with
  integer bit operations instead of cvt instructions (which run at a quarter of the FMA rate): the
  fp16 bits are moved into an fp32 pattern worth 2^-112 times the value and the A value is
  pre-scaled by 2^112 (exact, and at most FLT_MAX for any finite fp16), so products are unchanged.
parameters:
  VW: [1, 2, 4, 8, 16]
  WARPS: [2, 4, 8, 16]
  UNROLL: [4, 8, 16]
  CVT: [0, 1]
kernels:
  - entry: spmm_csr_rowsplit_pf
    grid: ["ceil_div(M, WARPS)", "ceil_div(N, 32 * VW)", "1"]
    block: ["32 * WARPS", "1", "1"]
    args: [rowptr, colind, values, B, C, M, N]
---*/
// Mapping: warp w of block (bx, by) computes C[row, c0 : c0 + 32*VW) for row = bx*WARPS + w and
// c0 = by*32*VW; lane l owns the VW consecutive columns c0 + l*VW. Lane l holds pair base + l of the
// current 32-pair window (read coalesced and streamed) and already loads the pair of the next window;
// pairs are broadcast with shuffles. B and C are row-major with N columns.
#define PF_BYTES (VW * (int)sizeof(value_t))
#define PF_WORDS ((PF_BYTES + 3) / 4)

// VW values of one B row slice as raw 32-bit words (PF_BYTES is 2, 4, 8, 16, 32 or 64).
struct pf_raw { unsigned int w[PF_WORDS]; };

__device__ __forceinline__ void pf_load(const value_t* __restrict__ p, pf_raw& r) {
    if constexpr (PF_BYTES >= 16) {
#pragma unroll
        for (int i = 0; i < PF_BYTES / 16; ++i) {
            uint4 q = __ldg(reinterpret_cast<const uint4*>(p) + i);
            r.w[4 * i] = q.x; r.w[4 * i + 1] = q.y; r.w[4 * i + 2] = q.z; r.w[4 * i + 3] = q.w;
        }
    } else if constexpr (PF_BYTES == 8) {
        uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
        r.w[0] = q.x; r.w[1] = q.y;
    } else if constexpr (PF_BYTES == 4) {
        r.w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
    } else {
        r.w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
    }
}

__device__ __forceinline__ float pf_get(const pf_raw& r, int v) {
#if SD_DTYPE == 0
    return __uint_as_float(r.w[v]);
#elif SD_DTYPE == 1 && CVT == 1
    // fp16 (sign s, exponent e, mantissa m) -> fp32 bits (s, e, m << 13) = value * 2^-112, exact
    // also for subnormals; the caller has scaled the other factor by 2^112.
    const unsigned int w = (v & 1) ? r.w[v / 2] : (r.w[v / 2] << 16);
    return __uint_as_float(((w >> 3) & 0x0fffe000u) | (w & 0x80000000u));
#else
    return sd_to_f32((value_t)((v & 1) ? (r.w[v / 2] >> 16) : (r.w[v / 2] & 0xffffu)));
#endif
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
spmm_csr_rowsplit_pf(const int* __restrict__ rowptr, const int* __restrict__ colind,
                     const value_t* __restrict__ values, const value_t* __restrict__ B,
                     value_t* __restrict__ C, int M, int N)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= M) return;  // the row is uniform across the warp: whole warps leave
    const int c0 = blockIdx.y * (32 * VW) + lane * VW;
    const bool vec_ok = (N % VW == 0) && (c0 + VW <= N);
    const int start = __ldg(rowptr + row), end = __ldg(rowptr + row + 1);

    float acc[VW];
#pragma unroll
    for (int v = 0; v < VW; ++v) acc[v] = 0.f;

    int next_col = start + lane < end ? __ldcs(colind + start + lane) : 0;
    value_t next_val = start + lane < end ? __ldcs(values + start + lane) : sd_from_f32(0.f);
    for (int base = start; base < end; base += 32) {
        const int my_col = next_col;
        const float my_val = sd_to_f32(next_val);
        const int jn = base + 32 + lane;
        next_col = jn < end ? __ldcs(colind + jn) : 0;
        next_val = jn < end ? __ldcs(values + jn) : sd_from_f32(0.f);
        const int count = min(32, end - base);
        for (int t = 0; t < count; t += UNROLL) {
            pf_raw b[UNROLL];
            float a[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int src = (t + u) & 31;
                const int k = __shfl_sync(SD_FULL_MASK, my_col, src);
                const float av = __shfl_sync(SD_FULL_MASK, my_val, src);
                const bool live = t + u < count;
#if SD_DTYPE == 1 && CVT == 1
                a[u] = live ? av * 5.192296858534828e33f : 0.f;  // 2^112
#else
                a[u] = live ? av : 0.f;
#endif
#pragma unroll
                for (int i = 0; i < PF_WORDS; ++i) b[u].w[i] = 0u;
                if (live) {
                    const value_t* brow = B + (long long)k * N + c0;
                    if (vec_ok) {
                        pf_load(brow, b[u]);
                    } else {
                        // edge tile: element loads, packed as the vector path packs them
#pragma unroll
                        for (int v = 0; v < VW; ++v) {
                            if (c0 + v < N) {
#if SD_DTYPE == 0
                                b[u].w[v] = __float_as_uint(__ldg(brow + v));
#else
                                b[u].w[v / 2] |= ((unsigned int)__ldg(brow + v)) << (16 * (v & 1));
#endif
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int v = 0; v < VW; ++v) acc[v] += a[u] * pf_get(b[u], v);
        }
    }
    value_t* crow = C + (long long)row * N + c0;
#pragma unroll
    for (int v = 0; v < VW; ++v)
        if (c0 + v < N) crow[v] = sd_from_f32(acc[v]);
}

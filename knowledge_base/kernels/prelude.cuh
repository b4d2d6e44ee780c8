// SparseDitto kernel prelude: value types and conversions shared by every reference kernel.
// SD_DTYPE selects the storage type of values and dense operands (0 = fp32, 1 = fp16, 2 = bf16);
// arithmetic always accumulates in fp32. 16-bit types are stored as raw bits (unsigned short) and
// converted with single PTX instructions, so the kernels need no toolkit headers under NVRTC.
#ifndef SD_DTYPE
#define SD_DTYPE 0
#endif

#if SD_DTYPE == 0
typedef float value_t;
__device__ __forceinline__ float sd_to_f32(value_t v) { return v; }
__device__ __forceinline__ value_t sd_from_f32(float v) { return v; }
#else
typedef unsigned short value_t;
#if SD_DTYPE == 1
__device__ __forceinline__ float sd_to_f32(value_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ value_t sd_from_f32(float f) {
    value_t v;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
    return v;
}
#else
__device__ __forceinline__ float sd_to_f32(value_t v) { return __uint_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ value_t sd_from_f32(float f) {
    value_t v;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
    return v;
}
#endif
#endif

#define SD_FULL_MASK 0xffffffffu

// Loads SD_W consecutive values starting at p (aligned to SD_W elements) and widens them to fp32.
template <int SD_W>
__device__ __forceinline__ void sd_load_vec(const value_t* __restrict__ p, float (&out)[SD_W]) {
    constexpr int BYTES = SD_W * (int)sizeof(value_t);
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16 || SD_W == 1, "vector width must span 4, 8 or 16 bytes");
    if constexpr (SD_W == 1) {
        out[0] = sd_to_f32(__ldg(p));
    } else if constexpr (BYTES == 16) {
        uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
        const value_t* v = reinterpret_cast<const value_t*>(&raw);
#pragma unroll
        for (int i = 0; i < SD_W; ++i) out[i] = sd_to_f32(v[i]);
    } else if constexpr (BYTES == 8) {
        uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
        const value_t* v = reinterpret_cast<const value_t*>(&raw);
#pragma unroll
        for (int i = 0; i < SD_W; ++i) out[i] = sd_to_f32(v[i]);
    } else {
        unsigned int raw = __ldg(reinterpret_cast<const unsigned int*>(p));
        const value_t* v = reinterpret_cast<const value_t*>(&raw);
#pragma unroll
        for (int i = 0; i < SD_W; ++i) out[i] = sd_to_f32(v[i]);
    }
}

// ---- helpers of the vectorised SpMV kernels (spmv_csr_vec4, spmv_csr_split_vec4) ----
// L2 cache policy that marks lines to be evicted first: for matrix arrays that are read exactly once.
__device__ __forceinline__ unsigned long long sd_policy_evict_first() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

// Four consecutive int32 from a 16-byte aligned address, streamed (no L1 allocation; HINT adds an
// L2 evict-first policy).
template <int SD_H>
__device__ __forceinline__ int4 sd_ld4_i32(const int* p, unsigned long long pol) {
    int4 r;
    if constexpr (SD_H) {
        asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.s32 {%0,%1,%2,%3}, [%4], %5;"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
    } else {
        asm("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    }
    return r;
}

// Four consecutive values (aligned to 4 elements) widened to fp32, streamed like sd_ld4_i32.
template <int SD_H>
__device__ __forceinline__ void sd_ld4_val(const value_t* p, unsigned long long pol, float (&out)[4]) {
#if SD_DTYPE == 0
    int4 r = sd_ld4_i32<SD_H>(reinterpret_cast<const int*>(p), pol);
    out[0] = __int_as_float(r.x); out[1] = __int_as_float(r.y);
    out[2] = __int_as_float(r.z); out[3] = __int_as_float(r.w);
#else
    unsigned int a, b;
    if constexpr (SD_H) {
        asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(a), "=r"(b) : "l"(p), "l"(pol));
    } else {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
    }
    out[0] = sd_to_f32((value_t)(a & 0xffffu)); out[1] = sd_to_f32((value_t)(a >> 16));
    out[2] = sd_to_f32((value_t)(b & 0xffffu)); out[3] = sd_to_f32((value_t)(b >> 16));
#endif
}

// Values of the nonzeros a .. a+3 (a a multiple of 4) as floats, 0 past nnz: one vector load when the whole
// aligned quad lies inside the array (nnz long), else element by element.
template <int SD_H>
__device__ __forceinline__ void sd_quad_values(const value_t* __restrict__ values, int a, int nnz,
                                               unsigned long long pol, float (&v)[4]) {
    if (a + 4 <= nnz) {
        sd_ld4_val<SD_H>(values + a, pol, v);
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = a + e < nnz ? sd_to_f32(__ldcs(values + a + e)) : 0.f;
    }
}

// Column indices and values of the nonzeros a .. a+3 (a a multiple of 4); entries outside [lo, hi) get
// column -1. The 16-byte loads are used when the whole aligned quad lies inside the arrays (nnz long).
template <int SD_H>
__device__ __forceinline__ void sd_quad_load(const int* __restrict__ colind, const value_t* __restrict__ values,
                                             int a, int lo, int hi, int nnz, unsigned long long pol,
                                             int (&c)[4], float (&v)[4]) {
    if (a + 4 <= nnz) {
        int4 ci = sd_ld4_i32<SD_H>(colind + a, pol);
        c[0] = ci.x; c[1] = ci.y; c[2] = ci.z; c[3] = ci.w;
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) c[e] = a + e < nnz ? __ldcs(colind + a + e) : 0;
    }
    sd_quad_values<SD_H>(values, a, nnz, pol, v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const bool in = (a + e >= lo) && (a + e < hi);
        c[e] = in ? c[e] : -1;
    }
}

// acc += v[u][e] * x[c[u][e]] over UR loaded quads in order, entries with column -1 skipped (no gather); all
// gathers of x are issued before the FMAs. SD_XL selects the gather: 0 read-only path with L1 allocation, 1 L2
// only (.cg).
template <int UR, int SD_XL>
__device__ __forceinline__ void sd_quads_fma(const value_t* __restrict__ x, const int (&c)[UR][4],
                                             const float (&v)[UR][4], float& acc) {
    float xv[UR][4];
#pragma unroll
    for (int u = 0; u < UR; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            xv[u][e] = c[u][e] >= 0 ? sd_to_f32(SD_XL ? __ldcg(x + c[u][e]) : __ldg(x + c[u][e])) : 0.f;
#pragma unroll
    for (int u = 0; u < UR; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc += (c[u][e] >= 0 ? v[u][e] : 0.f) * xv[u][e];
}

// UR quads at a, a + 4 STRIDE, a + 8 STRIDE, ...: each that starts before hi filled by load(aa, c, v), the rest
// masked (column -1, value 0); all loads of a step are issued before anything uses them.
template <int STRIDE, int UR, class Load>
__device__ __forceinline__ void sd_quads_load(int a, int hi, Load&& load, int (&c)[UR][4], float (&v)[UR][4]) {
#pragma unroll
    for (int u = 0; u < UR; ++u) {
        const int aa = a + u * 4 * STRIDE;
        if (aa < hi) {
            load(aa, c[u], v[u]);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) { c[u][e] = -1; v[u][e] = 0.f; }
        }
    }
}

// Partial dot product of the nonzeros [lo, hi) with x, for one lane of a group of STRIDE lanes: the lane
// takes the aligned quads lane, lane + STRIDE, ..., UR quads per step (columns and values from `load`, as in
// sd_quads_load) with all loads issued before the FMAs. SD_XL selects the gather of x: 0 read-only path with L1
// allocation, 1 L2 only (.cg).
template <int STRIDE, int UR, int SD_XL, class Load>
__device__ __forceinline__ float sd_walk(const value_t* __restrict__ x, int lo, int hi, int lane, Load&& load) {
    float acc = 0.f;
    for (int a = (lo & ~3) + 4 * lane; a < hi; a += 4 * STRIDE * UR) {
        int c[UR][4];
        float v[UR][4];
        sd_quads_load<STRIDE, UR>(a, hi, load, c, v);
        sd_quads_fma<UR, SD_XL>(x, c, v, acc);
    }
    return acc;
}

// sd_walk over CSR: the quads' columns and values straight from colind and values.
template <int STRIDE, int UR, int SD_H, int SD_XL>
__device__ __forceinline__ float sd_quad_walk(const int* __restrict__ colind, const value_t* __restrict__ values,
                                              const value_t* __restrict__ x, int lo, int hi, int lane, int nnz,
                                              unsigned long long pol) {
    return sd_walk<STRIDE, UR, SD_XL>(x, lo, hi, lane, [&](int aa, int (&c)[4], float (&v)[4]) {
        sd_quad_load<SD_H>(colind, values, aa, lo, hi, nnz, pol, c, v);
    });
}

// ---- programmatic dependent launch (a launch declared `early` in the sequence, sm_90+) ----
// An entry launched early calls this before it reads anything an earlier launch of the sequence wrote: the wait
// returns once those launches have finished and their writes are visible. Reads of the inputs and preparations
// may come before it; they are what overlaps the earlier launch's tail.
__device__ __forceinline__ void sd_wait_earlier_launches() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The next launch, when declared early, may begin once every block of this one has called this or finished.
// Called at a block's start, the next launch begins once the last block has started: no block of this launch is
// then left waiting for room, and the next one's blocks take the room that frees up. It never makes the next
// launch's reads early: those wait in sd_wait_earlier_launches.
__device__ __forceinline__ void sd_allow_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

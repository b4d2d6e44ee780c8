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

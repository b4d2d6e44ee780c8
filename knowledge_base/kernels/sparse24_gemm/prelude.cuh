// The 2:4 family's kernels share these: operand storage types, the 16-bit sparse MMA step, the exact widening
// of e4m3 to fp16, the output conversions and the fused epilogue. Appended after the project prelude.
#if SD_DTYPE == 3
typedef unsigned char sp24_in_t;   // e4m3 bits
#define SP24_VB 1
#else
typedef unsigned short sp24_in_t;  // fp16 or bf16 bits
#define SP24_VB 2
#endif
#if SD_DTYPE == 2
#define SP24_T16 "bf16"
#else
#define SP24_T16 "f16"             // fp16, and fp8 widened to fp16
#endif

// D += A B for one m16n8k32 16-bit step: A compressed 16 x 16 in a, B 32 x 8 in b, metadata e (lane pair 0,1).
__device__ __forceinline__ void sp24_mma_k32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[4], unsigned e) {
    asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32." SP24_T16 "." SP24_T16 ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}

#if SD_DTYPE == 3
// Two e4m3 bytes (low byte first) as two fp16 values times 2^-8, exactly: the exponent and mantissa bits move up
// into fp16's fields as they are (subnormals included); a NaN byte becomes an fp16 NaN.
__device__ __forceinline__ unsigned sp24_e4m3x2_to_f16x2(unsigned pair) {
    unsigned out = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const unsigned x = (pair >> (8 * h)) & 0xFFu;
        const unsigned bits = (x & 0x7Fu) == 0x7Fu ? 0x7E00u : (x & 0x7Fu) << 7;
        out |= (bits | ((x & 0x80u) << 8)) << (16 * h);
    }
    return out;
}
#endif

__device__ __forceinline__ float sp24_out_to_f32(unsigned short v) {
#if SD_DTYPE == 2
    return __uint_as_float(((unsigned)v) << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
#endif
}

__device__ __forceinline__ unsigned short sp24_f32_to_out(float f) {
    unsigned short v;
#if SD_DTYPE == 2
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
#endif
    return v;
}

// alpha * acc + bias, then the activation (1: ReLU keeping NaN, 2: GELU, tanh form), in fp32.
__device__ __forceinline__ float sp24_epilogue(float acc, float alpha, float bias, int act) {
    float y = alpha * acc + bias;
    if (act == 1) y = y < 0.f ? 0.f : y;
    else if (act == 2) y = 0.5f * y * (1.f + tanhf(0.7978845608f * (y + 0.044715f * y * y * y)));
    return y;
}

// Every accumulator of an R x S grid of m16n8 fragments set to zero.
template <int R, int S>
__device__ __forceinline__ void sp24_zero(float (&acc)[R][S][4]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][s][i] = 0.f;
}

// Accumulators of columns col and col + 1 of one row through the epilogue into C: one 32-bit store when both lie
// inside a row of even width, else each column that lies inside it.
__device__ __forceinline__ void sp24_store_pair(unsigned short* __restrict__ C, int row, int col, int N, float acc0,
                                                float acc1, float alpha, float bias, int act) {
    const unsigned short v0 = sp24_f32_to_out(sp24_epilogue(acc0, alpha, bias, act));
    const unsigned short v1 = sp24_f32_to_out(sp24_epilogue(acc1, alpha, bias, act));
    unsigned short* dst = C + (long long)row * N + col;
    if (N % 2 == 0 && col + 1 < N) {
        *reinterpret_cast<unsigned*>(dst) = (unsigned)v0 | ((unsigned)v1 << 16);
    } else {
        if (col < N) dst[0] = v0;
        if (col + 1 < N) dst[1] = v1;
    }
}

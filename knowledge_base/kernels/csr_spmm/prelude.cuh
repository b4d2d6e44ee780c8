// What the csr_spmm tensor-core kernels share: the 16-bit operand type of mma.sync and its m16n8k16 step
// (D += A B, fp32 accumulation). Put in front of each of the family's kernels, after the project prelude.
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

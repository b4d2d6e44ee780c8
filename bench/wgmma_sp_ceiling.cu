// Microbenchmark: the ceiling of wgmma.mma_async.sp (2:4 sparse, m64nNk32, f16 -> f32) with both operands read
// from shared memory through matrix descriptors, against the dense m64nNk16 under the same harness.
// Driven by bench/wgmma_sp_ceiling.py, which appends one WGB_KERNEL(...) line per variant it runs (or compile this
// file alone with -DWGB_ALL_VARIANTS). Standalone: no project header, no toolkit header (NVRTC or nvcc, sm_90a).
//
// One block per SM. Warpgroups 0 .. C-1 are consumers; with W = 1 one more warp (warp 4C) is the writer (a single
// thread issues the copies, as in a GEMM's producer warp). N = 256 with 3 consumers and the writer is not built:
// ptxas sizes registers for whole warpgroups (416 threads count as 512: 128 registers, below the 128 accumulators
// plus ~30), and setmaxnreg does not lift that limit at compile time (ptxas C7602 even with setmaxnreg.inc 152).
// Shared memory (dynamic, base rounded up to 1024 bytes so the swizzle patterns line up):
//   B  [0, 64 KB): 128 rows of K x 256 columns, N-major, 128-byte swizzle, as a GEMM's B tile: 4 blocks of 64 columns,
//      each 128 rows of 128 bytes (block stride 16384); chunk c of row k at chunk c ^ (k % 8). Descriptor: leading
//      offset 16384 (next 64 columns), stride offset 1024 (next 8 rows), mode 1 (128B). Step k (of 4) starts at row
//      32 k (sparse, k32) or 16 k (dense, k16). Every consumer warpgroup reads this same region.
//   A  [64 KB, 88 KB): one 8 KB slab per consumer warpgroup: 2 boxes of 64 rows x 64 bytes (32 16-bit values, i.e.
//      two steps of 16 compressed sparse values or of 16 dense values), K-major, 64-byte swizzle. Descriptor: stride
//      offset 512 (next 8 rows), mode 2 (64B); step k reads box k / 2 from byte 32 (k % 2) of each row. A sparse
//      m64nNk32 reads 64 x 16 compressed values and a dense m64nNk16 reads 64 x 16 values: the same 2 KB shape.
//   W  [88 KB, 88 KB + WGB_WBUFS * WGB_CHUNK): the writer's buffers (nobody reads them).
//   then WGB_WBUFS mbarriers and the consumers' done counter.
// Both regions are filled once from global memory (the `fill` argument: fp16 values chosen by the host, finite).
// Metadata: the constant word 0x44444444 (every nibble: positions 0 and 1 of each group of 4), selector 0.
// Accumulators are never zeroed: the first instruction overwrites them (scale-d 0), so no other instruction writes
// them (a write by another instruction between wgmma makes ptxas serialise them).
//
// Consumer loop: `iters` groups of 4 instructions (K-steps 0..3), each group opened by wgmma.fence and closed by
// wgmma.commit_group and wgmma.wait_group 1 (one group stays in flight while the next is issued), as a GEMM k-loop.
// Writer (W = 1): one thread streams global memory into its buffers with cp.async.bulk (non-tensor bulk copy,
// complete_tx on one mbarrier per buffer), WGB_WBUFS copies of WGB_CHUNK bytes in flight, each reissued as soon as
// it has landed, until every consumer warpgroup is done; it counts the bytes.
// stats[8 * block + i]: 0 clock64 at start, 1 clock64 at end, 2 globaltimer (ns) at start, 3 at end, 4 writer bytes.

#ifndef WGB_CHUNK
#define WGB_CHUNK 16384  // bytes per bulk copy of the writer
#endif
#ifndef WGB_WBUFS
#define WGB_WBUFS 6      // writer copies in flight
#endif

#define WGB_B_OFF 0
#define WGB_B_BYTES 65536
#define WGB_A_OFF (WGB_B_OFF + WGB_B_BYTES)
#define WGB_A_SLAB 8192
#define WGB_A_BYTES (3 * WGB_A_SLAB)
#define WGB_FILL_BYTES (WGB_B_BYTES + WGB_A_BYTES)  // bytes of `fill` (B then A)
#define WGB_W_OFF (WGB_A_OFF + WGB_A_BYTES)
#define WGB_BAR_OFF (WGB_W_OFF + WGB_WBUFS * WGB_CHUNK)
#define WGB_SMEM_BYTES (WGB_BAR_OFF + 128 + 1024)  // + barriers and counter, + alignment slack; the host asks this much

static_assert(WGB_CHUNK % 16 == 0 && WGB_CHUNK >= 16, "bulk copy size: a multiple of 16 bytes");
static_assert(8 * WGB_WBUFS + 8 <= 128, "barriers and counter fit their 128 bytes");
static_assert(WGB_SMEM_BYTES <= 232448, "shared memory: at most 227 KB per block");

__device__ __forceinline__ unsigned wgb_smem(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Matrix descriptor: start address, leading and stride byte offsets (each >> 4), swizzle mode (1: 128B, 2: 64B).
__device__ __forceinline__ unsigned long long wgb_desc(unsigned addr, unsigned lead, unsigned stride, unsigned mode) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32) | ((unsigned long long)mode << 62);
}

__device__ __forceinline__ void wgb_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ unsigned long long wgb_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Accumulator register lists and operand lists, 32, 64 or 128 fp32 registers per thread (N = 64, 128, 256).
#define WGB_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
    "%27,%28,%29,%30,%31}"
#define WGB_R64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
    "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53," \
    "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define WGB_R128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
    "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53," \
    "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80," \
    "%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105," \
    "%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define WGB_F8(d, i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                     "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WGB_F32(d, i) WGB_F8(d, i), WGB_F8(d, (i) + 8), WGB_F8(d, (i) + 16), WGB_F8(d, (i) + 24)
#define WGB_F64(d) WGB_F32(d, 0), WGB_F32(d, 32)
#define WGB_F128(d) WGB_F32(d, 0), WGB_F32(d, 32), WGB_F32(d, 64), WGB_F32(d, 96)

// Sparse: {d}, a-desc, b-desc, metadata, selector 0, scale-d, scale-a 1, scale-b 1, A not transposed (K-major),
// B transposed (N-major). Dense: {d}, a-desc, b-desc, scale-d, 1, 1, 0, 1.
#define WGB_SP(SHAPE, REGS, A, B, E, S) \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sp.sync.aligned." SHAPE ".f32.f16.f16 " REGS ", " \
    A ", " B ", " E ", 0, p, 1, 1, 0, 1;\n}"
#define WGB_DN(SHAPE, REGS, A, B, S) \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32.f16.f16 " REGS ", " \
    A ", " B ", p, 1, 1, 0, 1;\n}"

template <int N, bool SPARSE>
__device__ __forceinline__ void wgb_mma(float (&d)[N / 2], unsigned long long a, unsigned long long b, unsigned e,
                                        unsigned accumulate) {
    if constexpr (SPARSE) {
        if constexpr (N == 64)
            asm volatile(WGB_SP("m64n64k32", WGB_R32, "%32", "%33", "%34", "%35")
                         : WGB_F32(d, 0) : "l"(a), "l"(b), "r"(e), "r"(accumulate));
        else if constexpr (N == 128)
            asm volatile(WGB_SP("m64n128k32", WGB_R64, "%64", "%65", "%66", "%67")
                         : WGB_F64(d) : "l"(a), "l"(b), "r"(e), "r"(accumulate));
        else
            asm volatile(WGB_SP("m64n256k32", WGB_R128, "%128", "%129", "%130", "%131")
                         : WGB_F128(d) : "l"(a), "l"(b), "r"(e), "r"(accumulate));
    } else {
        if constexpr (N == 64)
            asm volatile(WGB_DN("m64n64k16", WGB_R32, "%32", "%33", "%34")
                         : WGB_F32(d, 0) : "l"(a), "l"(b), "r"(accumulate));
        else if constexpr (N == 128)
            asm volatile(WGB_DN("m64n128k16", WGB_R64, "%64", "%65", "%66")
                         : WGB_F64(d) : "l"(a), "l"(b), "r"(accumulate));
        else
            asm volatile(WGB_DN("m64n256k16", WGB_R128, "%128", "%129", "%130")
                         : WGB_F128(d) : "l"(a), "l"(b), "r"(accumulate));
    }
}

template <int N, int C, int W, bool SPARSE>
__device__ __forceinline__ void wgb_body(const uint4* __restrict__ fill, const unsigned char* __restrict__ wsrc,
                                         int wsrc_chunks, int iters, float* __restrict__ out,
                                         unsigned long long* __restrict__ stats) {
    static_assert(N == 64 || N == 128 || N == 256, "N: 64, 128 or 256");
    static_assert(C >= 1 && C <= 3 && (W == 0 || W == 1), "1 to 3 consumers, 0 or 1 writer");
    constexpr int THREADS = C * 128 + W * 32;

    extern __shared__ __align__(1024) unsigned char wgb_raw[];
    unsigned char* smem = wgb_raw + ((1024 - (wgb_smem(wgb_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned bars = wgb_smem(smem + WGB_BAR_OFF);
    volatile int* done = reinterpret_cast<volatile int*>(smem + WGB_BAR_OFF + 8 * WGB_WBUFS);

    {
        unsigned dyn;
        asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < WGB_SMEM_BYTES) __trap();  // the host asked for less shared memory than this layout needs
    }
    // operands: generic writes, made visible to the async proxy (wgmma) by the writing threads before the barrier
    for (int i = tid; i < WGB_FILL_BYTES / 16; i += THREADS)
        reinterpret_cast<uint4*>(smem)[i] = fill[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (tid == 0) {
        for (int b = 0; b < WGB_WBUFS; ++b)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bars + 8 * b) : "memory");
        *done = 0;
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        stats[8 * blockIdx.x + 0] = clock64();
        stats[8 * blockIdx.x + 2] = wgb_globaltimer();
    }

    if (W == 1 && wg == C) {  // writer
        if (tid == C * 128) {
            const unsigned wbase = wgb_smem(smem + WGB_W_OFF);
            unsigned long long bytes = 0;
            int pos = (int)(((long long)blockIdx.x * wsrc_chunks) / gridDim.x), i = 0;
            for (;; ++i) {
                const int b = i % WGB_WBUFS;
                if (i >= WGB_WBUFS) wgb_wait(bars + 8 * b, ((i / WGB_WBUFS) - 1) & 1);  // buffer b's last copy landed
                if (*done == C) break;
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             :: "r"(bars + 8 * b), "n"(WGB_CHUNK) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(wbase + b * WGB_CHUNK), "l"(wsrc + (long long)pos * WGB_CHUNK), "n"(WGB_CHUNK),
                                "r"(bars + 8 * b) : "memory");
                if (++pos == wsrc_chunks) pos = 0;
                bytes += WGB_CHUNK;
            }
            for (int j = i > WGB_WBUFS - 1 ? i - WGB_WBUFS + 1 : 0; j < i; ++j)  // the copies still in flight
                wgb_wait(bars + 8 * (j % WGB_WBUFS), (j / WGB_WBUFS) & 1);
            stats[8 * blockIdx.x + 4] = bytes;
        }
        __syncwarp();
    } else {  // consumer warpgroup wg
        const unsigned a_base = wgb_smem(smem + WGB_A_OFF + wg * WGB_A_SLAB), b_base = wgb_smem(smem + WGB_B_OFF);
        constexpr unsigned B_STEP = SPARSE ? 4096 : 2048;  // 32 or 16 rows of K, 128 bytes each
        float acc[N / 2];
        // The outer loop is not unrolled and every group starts with wgmma.fence, as a GEMM's k-loop does (without
        // it ptxas injects one at the loop head anyway, note C7519).
#pragma unroll 1
        for (int it = 0; it < iters; ++it) {
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const unsigned long long a_desc = wgb_desc(a_base + (k / 2) * 4096 + 32 * (k % 2), 16, 512, 2);
                const unsigned long long b_desc = wgb_desc(b_base + B_STEP * k, 16384, 1024, 1);
                wgb_mma<N, SPARSE>(acc, a_desc, b_desc, 0x44444444u, (it | k) != 0);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
        for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
        out[(long long)blockIdx.x * (C * 128) + tid] = acc[0] + acc[N / 2 - 1];
        if (tid % 128 == 0) atomicAdd(const_cast<int*>(done), 1);  // the writer stops once all C arrived
    }
    __syncthreads();
    if (tid == 0) {
        stats[8 * blockIdx.x + 1] = clock64();
        stats[8 * blockIdx.x + 3] = wgb_globaltimer();
    }
}

// One kernel per variant: NAME, N, C (consumer warpgroups), W (writer warp), SPARSE (1: wgmma.sp m64nNk32,
// 0: dense m64nNk16).
#define WGB_KERNEL(NAME, N, C, W, SPARSE)                                                                            \
    extern "C" __global__ void __launch_bounds__((C) * 128 + (W) * 32, 1)                                            \
    NAME(const uint4* __restrict__ fill, const unsigned char* __restrict__ wsrc, int wsrc_chunks, int iters,         \
         float* __restrict__ out, unsigned long long* __restrict__ stats) {                                          \
        wgb_body<N, C, W, (SPARSE) != 0>(fill, wsrc, wsrc_chunks, iters, out, stats);                                \
    }

#ifdef WGB_ALL_VARIANTS
WGB_KERNEL(wgb_sp64_c1_w0, 64, 1, 0, 1)
WGB_KERNEL(wgb_sp64_c2_w0, 64, 2, 0, 1)
WGB_KERNEL(wgb_sp64_c3_w0, 64, 3, 0, 1)
WGB_KERNEL(wgb_sp64_c1_w1, 64, 1, 1, 1)
WGB_KERNEL(wgb_sp64_c2_w1, 64, 2, 1, 1)
WGB_KERNEL(wgb_sp64_c3_w1, 64, 3, 1, 1)
WGB_KERNEL(wgb_sp128_c1_w0, 128, 1, 0, 1)
WGB_KERNEL(wgb_sp128_c2_w0, 128, 2, 0, 1)
WGB_KERNEL(wgb_sp128_c3_w0, 128, 3, 0, 1)
WGB_KERNEL(wgb_sp128_c1_w1, 128, 1, 1, 1)
WGB_KERNEL(wgb_sp128_c2_w1, 128, 2, 1, 1)
WGB_KERNEL(wgb_sp128_c3_w1, 128, 3, 1, 1)
WGB_KERNEL(wgb_sp256_c1_w0, 256, 1, 0, 1)
WGB_KERNEL(wgb_sp256_c2_w0, 256, 2, 0, 1)
WGB_KERNEL(wgb_sp256_c3_w0, 256, 3, 0, 1)
WGB_KERNEL(wgb_sp256_c1_w1, 256, 1, 1, 1)
WGB_KERNEL(wgb_sp256_c2_w1, 256, 2, 1, 1)
WGB_KERNEL(wgb_dn256_c2_w0, 256, 2, 0, 0)
WGB_KERNEL(wgb_dn256_c2_w1, 256, 2, 1, 0)
#endif

/*---
name: sp24_wgmma_sp
family: sparse24_gemm
operation: spmm
format: "2:4"
dtypes: [fp16, bf16]
archs: [sm_90a]
strategy: tensor_core_wgmma
summary: >
  Hopper 2:4 sparse GEMM on wgmma.mma_async.sp (m64nBNk32, fp32 accumulation), C = act(alpha A B + bias).
  Warp-specialised, 128 (CONSUMERS + 1) threads: warpgroup 0 produces, the CONSUMERS warpgroups after it consume. A
  block owns a BM x BN tile of C; each consumer warpgroup owns BM/CONSUMERS rows (BM/(64 CONSUMERS) slabs of 64
  rows) and issues one m64nBNk32 instruction per slab and 32 logical columns of K, both operands read from shared
  memory through matrix descriptors. Every BK logical columns, one producer thread loads the compressed A tile
  (TMA, 64-byte swizzle, K-major) and its metadata words (TMA, in the family's stored order, which already is the order wgmma.sp reads) while all 128
  producer threads copy the B tile with 16-byte cp.async (element by element when N is not a multiple of 8)
  into the 128-byte-swizzled N-major layout and signal it once it has landed, LAG tiles later (so that LAG + 1 tiles
  of B copies are in flight); STAGES stages, each guarded by a full and an empty mbarrier. With BTMA = 1 and N a
  multiple of 8, B goes through TMA instead (one box of 64 columns x BK rows per 64 columns, 128-byte swizzle: the
  same layout), the TMA thread alone produces and the stage's full barrier waits for one arrival and the bytes; other
  N keep the cp.async path, since a tensor map needs 16-byte row strides. Edges: TMA zero-fills rows past M and columns
  past K (and B past K and N), cp.async zero-fills B past K and N,
  and zero metadata words (only ever zero-fill: a stored word has no zero code) become a valid code. The
  epilogue applies alpha, the row bias (has_bias) and ReLU/GELU (act) in fp32 and stores 16-bit C straight from
  the accumulators. e4m3 compiles the same code under the header sp24_wgmma_sp_fp8 (B transposed first, read
  K-major: B_KMAJOR; products promoted to fp32 every PROMOTE instructions: SP24W_PROMOTE). With INFLIGHT = 0 each tile's group retires before the next tile's metadata words are loaded; with INFLIGHT = 1 one group
  stays in flight while the next is issued, its words in a second array (see the consumer loop). H200, 4096^3 fp16
  (evals/results/issue15_h200.md): 156 us, 880 dense-equivalent TFLOP/s at 256 x 128 x 128, 3 stages, B by TMA;
  241 us with B by cp.async (256 x 128 x 64, 6 stages); CLUSTER 2 and INFLIGHT 1 no faster.
  CLUSTER = 2 pairs the blocks of two neighbouring column tiles (same rows) in a thread-block cluster along grid x
  that share the A tile: each block's TMA thread loads half of the A and metadata rows of a stage and multicasts them
  to both blocks, so L2 serves each A byte once per cluster; a stage is refilled only once the consumers of both
  blocks released it (each consumer warp arrives on its own block's empty barrier and on its peer's). RASTER orders
  the tiles in bands of tile rows (L2 reuse of B at large N: 8192^3 fp16 1180 -> 1080 us at RASTER 8); PERSIST = 1
  launches one block per SM that loops over tiles, the stages' rounds counted across tiles, so that the producer
  loads the next tile while the consumers store this one (CLUSTER 1 and INFLIGHT 0 only; measured within 2% of
  PERSIST 0). CONSUMERS = 3 (512 threads) gives each consumer warpgroup one slab of a 192-row tile, for 192 x 256
  tiles with 128 accumulators per consumer thread. A thread gets 128 registers at launch, so the producer hands
  most of its share to the consumers (setmaxnreg: 32 for the producer, 160 for each consumer), and since ptxas
  still fits every single instruction into the launch's 128, a 256-column slab is issued as two m64n128k32
  instructions, which read the slab's A twice. CLUSTER 1 and INFLIGHT 0 only; on the H200 correct and
  sanitizer-clean in one verification each (evals/results/issue15_h200/gpu_verify_session11_consumers3.txt; the GPU
  test that holds them, tests/families/test_sparse24_wgmma_gpu.py, not yet run) and no faster: 158.9 us at 4096^3
  fp16 against the 256 x 128 start's 157.1 (159.8 persistent).
preparation: epilogue_operands
parameters:
  BM: [128, 192, 256]
  BN: [64, 128, 256]
  BK: [64, 128]
  STAGES: [3, 4, 5, 6]
  LAG: [1, 2, 3, 4]  # tiles of B copies in flight behind the newest before its oldest is signalled
  CLUSTER: [1, 2]  # blocks along grid x (same rows of C) that share each A tile by TMA multicast
  INFLIGHT: [0, 1]  # wgmma groups a consumer leaves in flight when it moves to the next tile
  BTMA: [0, 1]  # B through TMA when N is a multiple of 8 (cp.async otherwise)
  RASTER: [1, 4, 8, 16]  # tile rows swept together, column by column (1: row by row, the launch order)
  PERSIST: [0, 1]  # one block per SM looping over tiles (the next tile's loads overlap this one's epilogue)
  CONSUMERS: [2, 3]  # consumer warpgroups, each owning BM / CONSUMERS rows of the tile
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "value_bytes == 2"
  # the producer signals tile t once it issued t + LAG, while the consumer waiting for t still holds its INFLIGHT
  # older tiles' stages: with fewer stages both wait on each other
  - "LAG + INFLIGHT < STAGES"
  - "BM % (64 * CONSUMERS) == 0"  # whole 64-row slabs per consumer warpgroup
  # accumulators and metadata words per consumer thread (both arrays with INFLIGHT 1), over BM // (64 CONSUMERS)
  # slabs: at 144 (256 x 128 x 128, INFLIGHT 1) ptxas spills and serialises the wgmma (note C7512)
  - "BM // (64 * CONSUMERS) * (BN // 2 + (1 + INFLIGHT) * BK // 32) <= 136"
  - "BM // (64 * CONSUMERS) * BN <= 256"
  # three consumers (BM 192: one slab each) hold 128 accumulators in 160 registers: one array of words only.
  # CLUSTER stays 1 there by the rule below it: a 2-block cluster's 96-row share of the tile is no whole slab
  - "CONSUMERS == 2 or INFLIGHT == 0"
  - "BM % (64 * CLUSTER) == 0"  # each block's share of an A box: whole 64-row slabs, 1024-byte aligned (swizzle)
  - "CLUSTER == 1 or N > BN"  # the second block of a cluster must have columns of C to compute
  - "PERSIST == 0 or (CLUSTER == 1 and INFLIGHT == 0)"  # the tile loop is written for single blocks, one group at a time
  # LAG paces the cp.async copies of B only: where B goes by TMA its values compile to the same behaviour, and a
  # search would spend iterations on them
  - "LAG == 1 or BTMA == 0 or N % 8 != 0"
  - "STAGES * 1024 * ceil_div(BK * BN * value_bytes + BM * BK // 2 * value_bytes + BM * BK // 8, 1024) + 16 * STAGES + 1024 <= 232448"
kernels:
  - entry: sp24_wgmma_sp
    grid: ["PERSIST * min(ceil_div(N, BN) * ceil_div(M, BM), num_sms) + (1 - PERSIST) * ceil_div(ceil_div(N, BN), CLUSTER) * CLUSTER",
           "PERSIST + (1 - PERSIST) * ceil_div(M, BM)", "1"]
    block: ["128 * (CONSUMERS + 1)", "1", "1"]
    cluster: ["CLUSTER", "1", "1"]
    shared_bytes: "STAGES * 1024 * ceil_div(BK * BN * value_bytes + BM * BK // 2 * value_bytes + BM * BK // 8, 1024) + 16 * STAGES + 1024"
    args: [tmap_A, tmap_E, tmap_B, B, bias, C, M, N, K, has_bias, act, alpha]
tensor_maps:
  tmap_A: {array: A_values, box: ["32", "BM // CLUSTER"], swizzle: "64B", l2_promotion: "128B"}
  tmap_E: {array: A_meta, box: ["BK // 2", "BM // 16 // CLUSTER"], dims: ["K // 2", "M // 16"], strides: ["2 * K"]}
  # B's rows are 16-byte aligned only when N is a multiple of 8, the only case the kernel reads through this map; for
  # other N it views the first 8 (N // 8) columns of a narrower row pitch, a valid map the kernel never uses
  tmap_B: {array: B, box: ["64", "BK"], swizzle: "128B", dims: ["8 * (N // 8)", "K"], strides: ["16 * (N // 8)"],
           l2_promotion: "128B"}
accumulate: fp32
---*/
// Why A comes from shared memory (descriptor) and not from registers: each consumer issues one instruction per
// A fragment (N = BN covers the whole tile width), so registers would not reuse A, and loading them would cost
// the same shared-memory reads plus ldmatrix issue slots and registers next to SLABS * BN/2 accumulators. (Three
// consumers at BN = 256 are the exception: two instructions per fragment, see MMA_N.)
//
// Shared memory (base rounded up to 1024 bytes), per stage: B, then A, then the metadata words, the stage rounded up
// to whole 1024 bytes (192-row metadata takes 1536 at BK 64) so that every stage starts in the same swizzle phase.
//   B: BN/64 blocks of 64 columns, each BK rows of 128 bytes; the 16-byte chunk c of row k sits at chunk c ^ (k % 8)
//      (the 128-byte swizzle). Descriptor (N-major, 128B swizzle): leading offset BK * 128 (next 64 columns),
//      stride offset 1024 (next 8 rows of K); step s (32 rows of K) starts 4096 s bytes in, and an instruction of
//      MMA_N < BN columns (part p) at block p MMA_N/64.
//   A: BK/64 boxes of BM rows x 64 bytes (32 compressed values), chunks XOR-ed with (row / 2) % 4 (64-byte swizzle,
//      done by TMA). Descriptor (K-major, 64B swizzle): stride offset 512 (next 8 rows); slab l starts at row 64 l;
//      step s reads box s / 2 from byte 32 (s % 2) of each row.
//   E: the tile's metadata words in the stored order [16-row block][16-column block][g], BK/2 words per block.
//   With CLUSTER > 1 the block of rank r loads rows r BM/CLUSTER .. (r+1) BM/CLUSTER - 1 of each A box (offset
//   r BM/CLUSTER * 64 bytes, a multiple of 1024, so the swizzle is the same) and 16-row blocks r BM/16/CLUSTER ..
//   of the metadata (offset r E_STAGE_BYTES/CLUSTER), multicast to the same offsets in every block of the cluster:
//   each block's stage holds the whole tile, laid out exactly as with CLUSTER = 1.
// Metadata (PTX ISA, sparse wgmma m64nNk32 f16/bf16): warp w of the warpgroup supplies rows 16w .. 16w+15 with the
// m16n8k32 mma.sp layout; with selector 0 lane 4g + j (j = 0, 1) gives the word of rows g and g + 8 and logical
// columns 16j .. 16j+15 of the step, which is the stored word (16-row block, 2s + j, g). e4m3 (k64): lane 4g + t
// gives one row, g + 8 (t % 2), and columns 32 (t / 2) .. +31, assembled from two stored words (sp24w_load_meta).
// Accumulators: d[4j + 2h + e] of thread (warp w, lane 4g + t) is row 16w + g + 8h, column 8j + 2t + e of the
// instruction's MMA_N columns of the slab.
// tests/families/test_sparse24_wgmma.py emulates every index here against the PTX definitions.

#define THREADS (128 * (CONSUMERS + 1))
#define SLABS (BM / (64 * CONSUMERS))         // 64-row slabs per consumer warpgroup
// Register budget of three consumers. At 512 threads a thread has 128 registers at launch; setmaxnreg moves them
// from the producer (32, which its B copies fit only one at a time: SP24W_COPY_UNROLL) to the consumers (160:
// 128 * 32 + 384 * 160 = 65536). 152 would not do: ptxas needs 154 around 128 accumulators in flight. ptxas still
// fits each instruction's own operands within the launch's 128 (error C7602: m64n256 needs 155), so a 256-column
// slab takes two m64n128 instructions, each reading A again.
#if CONSUMERS == 3
#define PRODUCER_REGS "32"
#define CONSUMER_REGS "160"
#define SP24W_COPY_UNROLL _Pragma("unroll 1")
#else
#define SP24W_COPY_UNROLL
#endif
#if CONSUMERS == 3 && BN == 256
#define MMA_N 128
#else
#define MMA_N BN
#endif
#define PARTS (BN / MMA_N)                    // instructions per slab and step of K, side by side in N
#define ACC (MMA_N / 2)                       // accumulators per instruction and thread
// e4m3 (SD_DTYPE 3, the sp24_wgmma_sp_fp8 header): 8-bit wgmma reads B only K-major, so B comes transposed (Bt, N x
// K, made by sp24w_transpose_b in the same sequence) and by TMA alone; an instruction covers 64 columns of K
#define B_KMAJOR (SD_DTYPE == 3)
// e4m3 products keep only part of fp32's precision in the instruction's running sum (each product is cut to a unit
// of the instruction's largest: sparse24_gemm's ALIGNED_SUM_BITS). Left in the accumulator over the whole K, up to
// 0.7% of C's elements fell beyond the fp32 bound at K = 1024 on the H200
// (evals/results/issue15_h200/gpu_tests_fp8_session13_unpromoted_h200.txt). So every PROMOTE instructions (1, 2 or
// 4) put their products into scratch accumulators that plain fp32 adds then fold into the tile's (promotion, as the
// dense fp8 libraries do by default; sp24w_issue_promoted). The SCRATCH scratch arrays (BN / 2 registers each) need
// the producer's registers: 40 for it, 232 for each of the two consumers (128 * 40 + 256 * 232 <= 65536); ptxas fits
// each instruction within the launch's 168. A group carried across k-tiles (INFLIGHT 1) was tried in session 14:
// ptxas serialises every wgmma when scratch registers of a group in flight are read after a barrier's wait loop, and
// carrying only within straight-line pairs of k-tiles (both stages waited for first) measured 773 us at 8192^3
// against 726 us without (evals/results/issue15_h200/explore_fp8_session14_h200.txt), so INFLIGHT stays 0.
#define SP24W_PROMOTE B_KMAJOR
#if SP24W_PROMOTE && INFLIGHT
#error "e4m3 promotes each instruction's products within its k-tile: INFLIGHT 0 only"
#endif
#if SP24W_PROMOTE
#define PRODUCER_REGS "40"
#define CONSUMER_REGS "232"
#endif
#define K_STEP (64 / SP24_VB)                 // logical columns of K per instruction: 32 (16-bit), 64 (e4m3)
#define STEPS (BK / K_STEP)                   // instructions per slab and part in a k-tile
#define B_STAGE_BYTES (BK * BN * SP24_VB)
#define A_STAGE_BYTES (BM * BK / 2 * SP24_VB)  // BM rows of BK/2 compressed values
#define A_BOXES (A_STAGE_BYTES / (64 * BM))   // 64-byte-wide A boxes per stage, 32 bytes (one step) twice each
#define E_STAGE_BYTES (BM * BK / 8)
#define STAGE_BYTES ((B_STAGE_BYTES + A_STAGE_BYTES + E_STAGE_BYTES + 1023) / 1024 * 1024)
#define CP_ASYNC_ARRIVALS 129                 // 128 producer threads' landed B copies, plus the TMA thread's expect_tx
#define EMPTY_ARRIVALS (4 * CONSUMERS * CLUSTER)  // one lane per consumer warp of every block in the cluster
#define A_SHARE_ROWS (BM / CLUSTER)           // rows of each A box this block's TMA thread loads for the cluster

// The tensor map's layout (128 opaque bytes, 64-byte aligned), so that no toolkit header is needed under NVRTC.
struct alignas(64) sp24w_tensor_map { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned sp24w_smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void sp24w_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// The producer's wait for a released stage: with CLUSTER > 1 the releases come from the consumers of every block of
// the cluster (remote ones with release.cluster), so the wait acquires at cluster scope.
#if CLUSTER > 1
#define SP24W_EMPTY_SEM ".acquire.cluster"
#else
#define SP24W_EMPTY_SEM ""
#endif
__device__ __forceinline__ void sp24w_wait_empty(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity" SP24W_EMPTY_SEM ".shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// A box into this block only (B: each block of a cluster has its own columns).
__device__ __forceinline__ void sp24w_tma_2d_local(unsigned dst, const sp24w_tensor_map* map, int x, int y, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}

// This block's part of an A or metadata box: with CLUSTER > 1 written to the same offset of every block of the
// cluster (ctaMask: all ranks), each copy crediting its bytes to the barrier at the same offset of that block.
__device__ __forceinline__ void sp24w_tma_2d(unsigned dst, const sp24w_tensor_map* map, int x, int y, unsigned bar) {
#if CLUSTER > 1
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar),
                    "h"((unsigned short)((1u << CLUSTER) - 1)) : "memory");
#else
    sp24w_tma_2d_local(dst, map, x, y, bar);
#endif
}

// The block's rank in its cluster (0 without clusters).
__device__ __forceinline__ int sp24w_rank() {
#if CLUSTER > 1
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}

#if CLUSTER > 1
// One arrival on the barrier at the same offset as `bar` in the cluster's block `rank`, ordered after this thread's
// earlier accesses at cluster scope (the consumer's release of a stage its peer's TMA thread will refill).
__device__ __forceinline__ void sp24w_arrive_remote(unsigned bar, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
}
__device__ __forceinline__ void sp24w_cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void sp24w_cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
#endif

// The tile of C of linear index `linear` (over clusters; `cols` clusters per tile row, `rows` tile rows). Tiles are
// taken in order of their linear index (blocks launch x fastest; a persistent block steps by the grid): consecutive
// indices are the tiles of RASTER tile rows column by column (a cluster's blocks stay neighbours in a row), so that
// the blocks resident at once read a band of A rows and of B columns that fits L2, instead of every column of B for
// one or two rows of tiles (at 8192^3, 134 MB of B against 50 MB of L2). RASTER = 1 is row by row.
__device__ __forceinline__ void sp24w_tile(int linear, int cols, int rows, int& m0, int& n0) {
    const int first = linear / (RASTER * cols) * RASTER;  // the group's first tile row
    const int height = min(rows - first, RASTER);  // the last group may be shorter
    const int within = linear - first * cols;
    m0 = (first + within % height) * BM;
    n0 = ((within / height) * CLUSTER + (int)(blockIdx.x % CLUSTER)) * BN;
}

// Matrix descriptor: start, leading and stride byte offsets (all >> 4) and the swizzle mode (1: 128B, 2: 64B).
__device__ __forceinline__ unsigned long long sp24w_desc(unsigned addr, unsigned lead, unsigned stride, unsigned mode) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32) | ((unsigned long long)mode << 62);
}

#if B_KMAJOR
#define SP24W_K "k64"
#define SP24W_TYPES "e4m3.e4m3"
#define SP24W_TRANSPOSE ""                    // 8-bit operands take no transpose flags: both K-major
#else
#define SP24W_K "k32"
#define SP24W_TYPES SP24_T16 "." SP24_T16
#define SP24W_TRANSPOSE ", 0, 1"              // A K-major, B transposed (N-major)
#endif
// Per instruction width: the accumulator registers, then the operand numbers of the A and B descriptors and the
// metadata word, then of the scale-d flag.
#if MMA_N == 64
#define SP24W_SHAPE "m64n64" SP24W_K
#define SP24W_ACC_REGS "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31}"
#define SP24W_OPS "%32, %33, %34"
#define SP24W_SCALE_D "%35"
#define SP24W_ACC_OPERANDS(d) SP24W_F32(d, 0)
#elif MMA_N == 128
#define SP24W_SHAPE "m64n128" SP24W_K
#define SP24W_ACC_REGS "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48," \
    "%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define SP24W_OPS "%64, %65, %66"
#define SP24W_SCALE_D "%67"
#define SP24W_ACC_OPERANDS(d) SP24W_F32(d, 0), SP24W_F32(d, 32)
#elif BN == 256
#define SP24W_SHAPE "m64n256" SP24W_K
#define SP24W_ACC_REGS "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48," \
    "%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71," \
    "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94," \
    "%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114," \
    "%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define SP24W_OPS "%128, %129, %130"
#define SP24W_SCALE_D "%131"
#define SP24W_ACC_OPERANDS(d) SP24W_F32(d, 0), SP24W_F32(d, 32), SP24W_F32(d, 64), SP24W_F32(d, 96)
#endif
#define SP24W_F8(d, i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                       "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define SP24W_F32(d, i) SP24W_F8(d, i), SP24W_F8(d, (i) + 8), SP24W_F8(d, (i) + 16), SP24W_F8(d, (i) + 24)

// d = A B (+ d when `accumulate`) for one slab and one step of K_STEP logical columns: A (64 x K_STEP/2 compressed)
// and B (K_STEP x MMA_N) by descriptor, metadata e as sp24w_load_meta gathers it (selector 0); A
// K-major, B N-major (16-bit) or K-major (e4m3).
__device__ __forceinline__ void sp24w_mma(float (&d)[ACC], unsigned long long a_desc, unsigned long long b_desc, unsigned e,
                                          bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SP24W_SCALE_D ", 0;\n"
                 "wgmma.mma_async.sp.sync.aligned." SP24W_SHAPE ".f32." SP24W_TYPES " "
                 SP24W_ACC_REGS ", " SP24W_OPS ", 0, p, 1, 1" SP24W_TRANSPOSE ";\n}"
                 : SP24W_ACC_OPERANDS(d)
                 : "l"(a_desc), "l"(b_desc), "r"(e), "r"((unsigned)accumulate));
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous instructions.
template <int R>
__device__ __forceinline__ void sp24w_pin(float (&d)[R][ACC]) {
#pragma unroll
    for (int l = 0; l < R; ++l)
#pragma unroll
        for (int i = 0; i < ACC; ++i) asm volatile("" : "+f"(d[l][i]) :: "memory");
}

// The tile's metadata words this thread supplies, e[l][k] for slab l and step k (selector 0). 16-bit: lanes 0 and 1
// of each quad, the stored word (16-row block, 2k + lane % 2, lane / 4) as it is (16 columns of rows g and g + 8).
// e4m3: all four lanes, lane 4g + t giving row g + 8 (t % 2) and the step's columns 32 (t / 2) .. +31 (CuTe's
// ELayout_64x64 for 8-bit sparse GMMA), i.e. that row's halves of the stored words (16-row block, 4k + 2 (t / 2)
// [+ 1], g) side by side.
__device__ __forceinline__ void sp24w_load_meta(unsigned (&e)[SLABS][STEPS], const unsigned char* stage, int c, int w,
                                                int lane) {
    const unsigned* meta = reinterpret_cast<const unsigned*>(stage + B_STAGE_BYTES + A_STAGE_BYTES);
#pragma unroll
    for (int l = 0; l < SLABS; ++l)
#pragma unroll
        for (int k = 0; k < STEPS; ++k) {
            const unsigned* block = meta + (4 * (c * SLABS + l) + w) * (BK / 2);
#if B_KMAJOR
            const int t = lane & 3;
            const unsigned low = block[(4 * k + 2 * (t >> 1)) * 8 + lane / 4];
            const unsigned high = block[(4 * k + 2 * (t >> 1) + 1) * 8 + lane / 4];
            const unsigned word = __byte_perm(low, high, (t & 1) ? 0x7632 : 0x5410);  // row g + 8: the upper halves
#else
            const unsigned word = block[(2 * k + (lane & 1)) * 8 + lane / 4];
#endif
            e[l][k] = word ? word : 0x44444444u;  // zero only where TMA filled past M or K: positions 0 and 1
        }
}

// Descriptor of B's part p (columns p MMA_N ..) for step k of a stage whose B starts at b_base.
__device__ __forceinline__ unsigned long long sp24w_b_desc(unsigned b_base, int k, int p) {
#if B_KMAJOR  // rows p MMA_N .. of the step's 128-byte atom (k / 2), from byte 64 (k % 2) of each
    return sp24w_desc(b_base + (k / 2) * (BN * 128) + p * MMA_N * 128 + 64 * (k % 2), 16, 1024, 1);
#else  // from B's 64-column block p MMA_N / 64
    return sp24w_desc(b_base + p * (MMA_N / 64) * (BK * 128) + 4096 * k, BK * 128, 1024, 1);
#endif
}

// Descriptor of slab l of consumer c for step k of a stage whose A starts at a_base.
__device__ __forceinline__ unsigned long long sp24w_a_desc(unsigned a_base, int c, int l, int k) {
    return sp24w_desc(a_base + (k / 2) * (BM * 64) + (c * SLABS + l) * 64 * 64 + 32 * (k % 2), 16, 512, 2);
}

#if !SP24W_PROMOTE
// One tile's products of consumer warpgroup c as one committed wgmma group (`first`: the first tile, which
// overwrites the accumulators).
__device__ __forceinline__ void sp24w_issue(float (&acc)[SLABS * PARTS][ACC], const unsigned (&e)[SLABS][STEPS],
                                            const unsigned char* stage, int c, bool first) {
    const unsigned a_base = sp24w_smem(stage + B_STAGE_BYTES), b_base = sp24w_smem(stage);
    sp24w_pin(acc);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < STEPS; ++k) {
        unsigned long long b_desc[PARTS];
#pragma unroll
        for (int p = 0; p < PARTS; ++p) b_desc[p] = sp24w_b_desc(b_base, k, p);
#pragma unroll
        for (int l = 0; l < SLABS; ++l)
#pragma unroll
            for (int p = 0; p < PARTS; ++p)
                sp24w_mma(acc[l * PARTS + p], sp24w_a_desc(a_base, c, l, k), b_desc[p], e[l][k], !first || k > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
#else
// Group i of a k-tile (slab i PROMOTE / STEPS, steps from i PROMOTE % STEPS) into the scratch array `part`, the first
// instruction overwriting it, as one committed wgmma group.
__device__ __forceinline__ void sp24w_issue_group(float (&part)[PARTS][ACC], const unsigned (&e)[SLABS][STEPS],
                                                  unsigned a_base, unsigned b_base, int c, int i) {
    const int l = i * PROMOTE / STEPS, k0 = i * PROMOTE % STEPS;
    sp24w_pin(part);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int q = 0; q < PROMOTE; ++q)
#pragma unroll
        for (int p = 0; p < PARTS; ++p)
            sp24w_mma(part[p], sp24w_a_desc(a_base, c, l, k0 + q), sp24w_b_desc(b_base, k0 + q, p), e[l][k0 + q], q > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// One tile's products of consumer warpgroup c, promoted (see SP24W_PROMOTE): PROMOTE instructions (of one slab, steps
// in a row) make one group into one of SCRATCH scratch arrays; once the next group is issued (SCRATCH 2), wait_group
// 1 retires it and plain fp32 adds fold it into the slab's accumulators (`first`: the first tile, whose step 0
// copies). So one group stays in flight while the last one's products are added, and the other consumer warpgroup
// keeps the tensor cores busy across each tile's last wait. SCRATCH 1 retires every group before the next: 64 fewer
// registers, for 256 x 128 tiles, which read 31% fewer bytes from L2 per product than 128 x 128 (72 KB per
// 16 instructions against 52 KB per 8). Measured at 8192^3 it is slower (828 us against the start's 725): Nsight
// Compute puts the start's L2 throughput at 65%, so the bytes were not its bound. Each instruction's 64 products per thread cost
// 64 adds on each scheduler, about as many issue cycles as the instruction's tensor-core time (an estimate from the
// rated e4m3 2:4 peak, not profiled). At 8192^3 the product alone took 912 us promoted every instruction, 715 us
// every 2 and 872 us every 4, where a k-tile's single group leaves nothing in flight while it is added
// (evals/results/issue15_h200/fp8_transpose_share_session14_h200.txt).
__device__ __forceinline__ void sp24w_issue_promoted(float (&acc)[SLABS * PARTS][ACC], const unsigned (&e)[SLABS][STEPS],
                                                     const unsigned char* stage, int c, bool first) {
    constexpr int GROUPS = SLABS * STEPS / PROMOTE;
    const unsigned a_base = sp24w_smem(stage + B_STAGE_BYTES), b_base = sp24w_smem(stage);
    float part[SCRATCH][PARTS][ACC];
#pragma unroll
    for (int i = 0; i <= GROUPS; ++i) {
        // SCRATCH 2: group i is issued, then i - 1 retired (wait_group 1); SCRATCH 1: i - 1 is retired (wait_group
        // 0) before i reuses its scratch array, and the other consumer warpgroups keep the tensor cores busy
        if (SCRATCH == 2 && i < GROUPS) sp24w_issue_group(part[i % SCRATCH], e, a_base, b_base, c, i);
        if (i > 0) {  // group j = i - 1 retired
            if (SCRATCH == 2 && i < GROUPS) asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            else asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            const int j = i - 1, l = j * PROMOTE / STEPS;
            const bool copy = first && j * PROMOTE % STEPS == 0;
            sp24w_pin(part[j % SCRATCH]);
#pragma unroll
            for (int p = 0; p < PARTS; ++p)
#pragma unroll
                for (int n = 0; n < ACC; ++n)
                    acc[l * PARTS + p][n] = copy ? part[j % SCRATCH][p][n] : acc[l * PARTS + p][n] + part[j % SCRATCH][p][n];
        }
        if (SCRATCH == 1 && i < GROUPS) sp24w_issue_group(part[0], e, a_base, b_base, c, i);
    }
}
#endif

// The consumer warp's release of a stage no group in flight reads: its block's empty barrier and, with CLUSTER > 1,
// its peers' (their TMA threads write this block's stage too).
__device__ __forceinline__ void sp24w_release(unsigned empty, int rank, int lane) {
    if (lane == 0) {
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(empty) : "memory");
#if CLUSTER > 1
#pragma unroll
        for (int r = 1; r < CLUSTER; ++r) sp24w_arrive_remote(empty, (rank + r) % CLUSTER);
#endif
    }
}

// B rows k0 .. k0+BK-1, columns n0 .. n0+BN-1 into the stage's swizzled B blocks (zeros past K and N), as one
// cp.async group of this thread; the producer loop signals the stage once the group has landed.
__device__ __forceinline__ void sp24w_load_b(unsigned char* bt, const sp24_in_t* __restrict__ B, int k0, int n0, int N,
                                             int K, int tid) {
    if (N % 8 == 0) {  // every 16-byte chunk of a B row is wholly inside N or wholly past it
        SP24W_COPY_UNROLL
        for (int i = tid; i < BK * BN / 8; i += 128) {
            const int k = i / (BN / 8), c = i % (BN / 8);
            const bool valid = k0 + k < K && n0 + 8 * c < N;
            const sp24_in_t* src = B + (valid ? (long long)(k0 + k) * N + n0 + 8 * c : 0);
            const unsigned dst = sp24w_smem(bt + (c / 8) * (BK * 128) + k * 128 + (((c % 8) ^ (k % 8)) << 4));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
        }
    } else {  // rows of B are not 16-byte aligned: element by element through registers
        SP24W_COPY_UNROLL
        for (int i = tid; i < BK * BN; i += 128) {
            const int k = i / BN, n = i % BN;
            const sp24_in_t v = k0 + k < K && n0 + n < N ? B[(long long)(k0 + k) * N + n0 + n] : (sp24_in_t)0;
            *reinterpret_cast<sp24_in_t*>(bt + (n / 64) * (BK * 128) + k * 128 + ((((n % 64) / 8) ^ (k % 8)) << 4) + 2 * (n % 8)) = v;
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// This thread's B writes of the stage at `full` are complete (cp.async.wait_group before the call): a proxy fence
// makes them visible to wgmma, which reads shared memory through the async proxy, then the thread's arrival. The
// fence comes from the writing thread after its writes have landed, the documented pattern; an arrival triggered by
// cp.async completion (cp.async.mbarrier.arrive) leaves no point to put it. (The wrong results measured on the H200
// before this change had another cause, the metadata registers: see the consumer loop.)
__device__ __forceinline__ void sp24w_b_landed(unsigned full) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(full) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
sp24_wgmma_sp(const __grid_constant__ sp24w_tensor_map tmap_A, const __grid_constant__ sp24w_tensor_map tmap_E,
              const __grid_constant__ sp24w_tensor_map tmap_B, const sp24_in_t* __restrict__ B, const unsigned short* __restrict__ bias, unsigned short* __restrict__ C,
              int M, int N, int K, int has_bias, int act, float alpha)
{
    extern __shared__ __align__(1024) unsigned char sp24w_raw[];
    // the swizzle patterns repeat every 1024 bytes of address: TMA, cp.async and wgmma agree only from such a base
    unsigned char* smem = sp24w_raw + ((1024 - (sp24w_smem(sp24w_raw) & 1023)) & 1023);
    const unsigned bars = sp24w_smem(smem + STAGES * STAGE_BYTES);  // full[s] at 8s, empty[s] at 8(STAGES + s)
    const int tid = threadIdx.x, wg = tid / 128;
    // this block's tiles: first_tile, first_tile + tile_step, ... below cols * rows (one without PERSIST)
#if PERSIST
    const int cols = (N + BN - 1) / BN, rows = (M + BM - 1) / BM, first_tile = blockIdx.x, tile_step = gridDim.x;
#else
    const int cols = gridDim.x / CLUSTER, rows = gridDim.y, first_tile = blockIdx.y * cols + blockIdx.x / CLUSTER;
    const int tile_step = cols * rows;
#endif
    const int tiles = (K + BK - 1) / BK;  // k-tiles per tile of C
    const int rank = sp24w_rank();  // this block's share of the A and metadata boxes
#if B_KMAJOR
    const bool b_tma = true;  // Bt's rows are K bytes, a multiple of 64: always a valid tensor map
#else
    const bool b_tma = BTMA && N % 8 == 0;  // B by TMA (tmap_B is B itself only then)
#endif

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bars + 8 * s), "r"(b_tma ? 1 : CP_ASYNC_ARRIVALS)
                         : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bars + 8 * (STAGES + s)), "r"(EMPTY_ARRIVALS) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the TMA unit's completions
    }
#if CLUSTER > 1
    // every block's barriers initialised before any block multicasts into it or arrives on them remotely
    sp24w_cluster_arrive();
    sp24w_cluster_wait();
#else
    __syncthreads();
#endif

    if (wg == 0) {  // producer
#ifdef PRODUCER_REGS
        asm volatile("setmaxnreg.dec.sync.aligned.u32 " PRODUCER_REGS ";");  // right at the branch: see CONSUMER_REGS
#endif
        int it = 0;  // k-tiles this block produced over all its tiles: stage it % STAGES, round it / STAGES
        for (int tile = first_tile; tile < cols * rows; tile += tile_step) {
            int m0, n0;  // with CLUSTER > 1 n0 may lie past N: nothing is stored
            sp24w_tile(tile, cols, rows, m0, n0);
            for (int kt = 0; kt < tiles && (tid == 0 || !b_tma); ++kt, ++it) {  // with B by TMA, the TMA thread alone
                const int s = it % STAGES;
                const unsigned full = bars + 8 * s;
                // the first round passes at once; later ones once the consumers of every block of the cluster released s
                sp24w_wait_empty(bars + 8 * (STAGES + s), ((it / STAGES) & 1) ^ 1);
                unsigned char* stage = smem + s * STAGE_BYTES;
                if (tid == 0) {  // the whole A and metadata tile lands here: this block's share and its peers'
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                 :: "r"(full), "r"(A_STAGE_BYTES + E_STAGE_BYTES + (b_tma ? B_STAGE_BYTES : 0)) : "memory");
                    const int row = rank * A_SHARE_ROWS;
#pragma unroll
                    for (int j = 0; j < A_BOXES; ++j)
                        sp24w_tma_2d(sp24w_smem(stage + B_STAGE_BYTES + j * BM * 64 + row * 64), &tmap_A,
                                     kt * BK / 2 + j * (64 / SP24_VB), m0 + row, full);
                    sp24w_tma_2d(sp24w_smem(stage + B_STAGE_BYTES + A_STAGE_BYTES + row * BK / 8), &tmap_E, kt * BK / 2,
                                 (m0 + row) / 16, full);
                    if (b_tma) {  // this block's columns, zero past K and N, into the swizzled blocks
#if B_KMAJOR  // Bt's rows n0 .. n0+BN-1 in boxes of 128 columns of K (one 128-byte swizzle row each)
#pragma unroll
                        for (int j = 0; j < BK / 128; ++j)
                            sp24w_tma_2d_local(sp24w_smem(stage + j * (BN * 128)), &tmap_B, kt * BK + 128 * j, n0, full);
#else  // boxes of 64 columns of B
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j)
                            sp24w_tma_2d_local(sp24w_smem(stage + j * (BK * 128)), &tmap_B, n0 + 64 * j, kt * BK, full);
#endif
                        continue;
                    }
                }
                sp24w_load_b(stage, B, kt * BK, n0, N, K, tid);
                if (it >= LAG) {  // k-tile it - LAG has landed once at most the LAG newer ones' groups are in flight
                    asm volatile("cp.async.wait_group %0;" :: "n"(LAG) : "memory");
                    sp24w_b_landed(bars + 8 * ((it - LAG) % STAGES));
                }
            }
        }
        if (!b_tma) {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
            for (int j = it > LAG ? it - LAG : 0; j < it; ++j) sp24w_b_landed(bars + 8 * (j % STAGES));
        }
#if CLUSTER > 1
        sp24w_cluster_arrive();  // the exit barrier (below) counts every thread of the cluster
        sp24w_cluster_wait();
#endif
        return;
    }

    // consumers: warpgroup c = wg - 1 owns slabs c*SLABS .. ; w is the warp's place in its warpgroup
#ifdef CONSUMER_REGS
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " CONSUMER_REGS ";");  // waits for the producer's release
#endif
    const int c = wg - 1, w = (tid / 32) % 4, lane = tid % 32;
    // slab l, part p at l * PARTS + p; never zeroed: the first product overwrites it (scale-d 0), so that no other
    // instruction writes the accumulators, which would make ptxas serialise the wgmma
    float acc[SLABS * PARTS][ACC];

#if INFLIGHT == 0
    int it = 0;  // k-tiles this block consumed over all its tiles, as the producer counts them
#endif
    for (int tile = first_tile; tile < cols * rows; tile += tile_step) {
        int m0, n0;
        sp24w_tile(tile, cols, rows, m0, n0);
#if INFLIGHT == 0
        for (int kt = 0; kt < tiles; ++kt, ++it) {
            const int s = it % STAGES;
            sp24w_wait(bars + 8 * s, (it / STAGES) & 1);
            const unsigned char* stage = smem + s * STAGE_BYTES;
            unsigned e[SLABS][STEPS];
            sp24w_load_meta(e, stage, c, w, lane);
#if SP24W_PROMOTE  // each slab's group already retired
            sp24w_issue_promoted(acc, e, stage, c, kt == 0);
#else
            sp24w_issue(acc, e, stage, c, kt == 0);
            // The metadata words are wgmma input registers: none may be written while a group that reads them is in
            // flight, so the next tile's words wait for this tile's group. (Keeping one group in flight with one array of
            // words measured wrong on the H200 in up to 28% of the elements: ptxas reused the registers across the
            // loop's back edge; INFLIGHT = 1 below keeps two arrays.) The other consumer warpgroups keep the tensor
            // cores busy meanwhile.
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            sp24w_pin(acc);
#endif
            sp24w_release(bars + 8 * (STAGES + s), rank, lane);
        }
#else
        // One tile of C per block (PERSIST is 0), one group in flight across k-tiles: k-tile t's group is issued,
        // then wait_group 1 retires t-1's, whose stage is released; only then are t+1's words loaded, into the array
        // t-1 read. Even k-tiles read e0, odd ones e1 (the loop is unrolled by two), so the words of the group in
        // flight are never written: distinct PTX registers, and ptxas keeps them apart (tests/tools/test_sass.py
        // checks the machine code).
        unsigned e0[SLABS][STEPS], e1[SLABS][STEPS];
        sp24w_wait(bars, 0);  // tiles >= 1: K is at least K_ALIGN
        sp24w_load_meta(e0, smem, c, w, lane);
        for (int kt = 0; kt < tiles; kt += 2) {
            sp24w_issue(acc, e0, smem + (kt % STAGES) * STAGE_BYTES, c, kt == 0);  // tile kt
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // tile kt - 1 retired
            sp24w_pin(acc);
            if (kt > 0) sp24w_release(bars + 8 * (STAGES + (kt - 1) % STAGES), rank, lane);
            if (kt + 1 == tiles) break;  // an odd number of tiles: kt was the last
            const int s1 = (kt + 1) % STAGES;
            sp24w_wait(bars + 8 * s1, ((kt + 1) / STAGES) & 1);
            sp24w_load_meta(e1, smem + s1 * STAGE_BYTES, c, w, lane);
            sp24w_issue(acc, e1, smem + s1 * STAGE_BYTES, c, false);  // tile kt + 1
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // tile kt retired
            sp24w_pin(acc);
            sp24w_release(bars + 8 * (STAGES + kt % STAGES), rank, lane);
            if (kt + 2 < tiles) {
                const int s2 = (kt + 2) % STAGES;
                sp24w_wait(bars + 8 * s2, ((kt + 2) / STAGES) & 1);
                sp24w_load_meta(e0, smem + s2 * STAGE_BYTES, c, w, lane);
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the last tile retired
        sp24w_pin(acc);
        sp24w_release(bars + 8 * (STAGES + (tiles - 1) % STAGES), rank, lane);
#endif
#if CLUSTER > 1
        // The exit barrier: its arrive (a release) follows this warp's remote arrivals, and every multicast into this
        // block has landed (each tile's full barrier counted it); no block leaves before all threads of the cluster
        // arrived, since a peer's last releases may still be on their way to this block's empty barriers. The epilogue,
        // which touches no shared memory, runs in between. (With clusters a block has one tile: PERSIST is 0.)
        sp24w_cluster_arrive();
#endif
        // the epilogue; with PERSIST the producer is already loading the next tile's first stages meanwhile
        const int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int l = 0; l < SLABS; ++l) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + 64 * (c * SLABS + l) + 16 * w + g + 8 * h;
                if (row >= M) continue;
                const float b = has_bias ? sp24_out_to_f32(bias[row]) : 0.f;
#pragma unroll
                for (int p = 0; p < PARTS; ++p)
#pragma unroll
                    for (int j = 0; j < MMA_N / 8; ++j)
                        sp24_store_pair(C, row, n0 + p * MMA_N + 8 * j + 2 * t, N, acc[l * PARTS + p][4 * j + 2 * h],
                                        acc[l * PARTS + p][4 * j + 2 * h + 1], alpha, b, act);
            }
        }
    }
#if CLUSTER > 1
    sp24w_cluster_wait();
#endif
}

#if B_KMAJOR
// Bt = B^T for the e4m3 sequence: B (K x N bytes, row-major) into Bt (N x K), so that 8-bit wgmma reads B K-major.
// It moves K x N bytes each way on every call, so it runs at copy speed: a block takes a 128 x 128 byte tile in
// 16-byte loads and stores (whole 128-byte lines of B and of Bt). Shared memory holds the tile by rows of B, each
// 16-byte chunk at chunk ^ (row / 16 % 8), so that both the row stores and the reads down 16 rows are free of bank
// conflicts. Thread t reads 16 rows x 4 columns (16 words), turns them into 4 rows of Bt x 16 columns of K with byte
// permutes, and stores 4 x 16 bytes. K is a multiple of 64, so a tile's K is whole or half; N has a tail (bytes
// where N is not a multiple of 16, which also leaves B's rows unaligned for vectors).
#define SP24W_T 128
extern "C" __global__ void __launch_bounds__(256)
sp24w_transpose_b(const unsigned char* __restrict__ B, unsigned char* __restrict__ Bt, int N, int K)
{
    __shared__ uint4 tile[SP24W_T][SP24W_T / 16];
    const int n0 = blockIdx.x * SP24W_T, k0 = blockIdx.y * SP24W_T, tid = threadIdx.x;
#pragma unroll
    for (int s = 0; s < SP24W_T * SP24W_T / 16 / 256; ++s) {
        const int r = (tid + 256 * s) / 8, q = (tid + 256 * s) % 8, n = n0 + 16 * q;
        const long long at = (long long)(k0 + r) * N + n;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (k0 + r < K) {
            if (N % 16 == 0) {
                if (n < N)
                    v = *reinterpret_cast<const uint4*>(B + at);
            } else {
                unsigned w[4] = {0u, 0u, 0u, 0u};
                for (int b = 0; b < 16 && n + b < N; ++b)
                    w[b / 4] |= (unsigned)B[at + b] << (8 * (b % 4));
                v = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
        tile[r][q ^ (r / 16 % 8)] = v;
    }
    __syncthreads();
    const int kc = tid % 8, g = tid / 8;  // rows 16 kc.. of B (a 16-byte run of K), columns 4 g.. (4 rows of Bt)
    if (k0 + 16 * kc >= K)
        return;
    const unsigned* words = reinterpret_cast<const unsigned*>(tile);
    unsigned w[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)  // row 16 kc + j, word g % 4 of chunk g / 4 (stored at chunk g / 4 ^ kc)
        w[j] = words[(16 * kc + j) * (SP24W_T / 4) + 4 * ((g / 4) ^ kc) + g % 4];
    unsigned out[4][4];  // out[i][m]: column 4 g + i, rows 16 kc + 4 m .. + 3
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const unsigned lo01 = __byte_perm(w[4 * m], w[4 * m + 1], 0x5140), lo23 = __byte_perm(w[4 * m + 2], w[4 * m + 3], 0x5140);
        const unsigned hi01 = __byte_perm(w[4 * m], w[4 * m + 1], 0x7362), hi23 = __byte_perm(w[4 * m + 2], w[4 * m + 3], 0x7362);
        out[0][m] = __byte_perm(lo01, lo23, 0x5410);
        out[1][m] = __byte_perm(lo01, lo23, 0x7632);
        out[2][m] = __byte_perm(hi01, hi23, 0x5410);
        out[3][m] = __byte_perm(hi01, hi23, 0x7632);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = n0 + 4 * g + i;
        if (n < N)
            *reinterpret_cast<uint4*>(Bt + (long long)n * K + k0 + 16 * kc) = make_uint4(out[i][0], out[i][1], out[i][2], out[i][3]);
    }
}
#endif

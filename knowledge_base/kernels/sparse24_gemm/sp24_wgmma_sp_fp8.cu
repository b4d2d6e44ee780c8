/*---
name: sp24_wgmma_sp_fp8
family: sparse24_gemm
body_from: sp24_wgmma_sp
operation: spmm
format: "2:4"
dtypes: [fp8_e4m3]
archs: [sm_90a]
strategy: tensor_core_wgmma
summary: >
  Hopper 2:4 sparse GEMM in e4m3 (fp16 out) on wgmma.mma_async.sp m64nBNk64, the code of sp24_wgmma_sp compiled
  for 8-bit operands. 8-bit wgmma reads both operands K-major from shared memory, and B is N-major (K x N,
  row-major), so the sequence first transposes B into the workspace Bt (N x K; a 128 x 128 tile per block through
  shared memory in 16-byte accesses: 39 us at 8192^2 bytes, a plain copy 36 us; the fp8 baselines use the same
  transposition), then runs the warp-specialised kernel with B always by TMA: boxes of 128 columns of K x BN rows of
  Bt, one 128-byte swizzle row each (K-major descriptor, 64 bytes per step). An instruction covers 64 logical columns
  of K: 32 bytes of each compressed A row, as in 16-bit, so A's boxes, swizzle and descriptors are the same bytes; all
  four lanes of each quad supply metadata, lane 4g + t the 32 columns 32 (t / 2) .. of row g + 8 (t % 2) (CuTe's
  ELayout_64x64), assembled from two stored words with one byte permute. e4m3 instructions keep fewer bits than
  fp32 in their running sum, so every PROMOTE instructions write one of SCRATCH scratch arrays and their products
  are added into fp32 accumulators (SP24W_PROMOTE): with two, while the next ones run, which limits tiles to
  128 x 128 or 256 x 64; with one (each group retired before the next), 256 x 128 (not yet run on a GPU). Pipeline,
  clusters, raster order, persistence and epilogue as in sp24_wgmma_sp. H200, 8192^3
  (session 14, evals/results/issue15_h200/explore_fp8_session14_h200.txt): 726 us persistent at 128 x 128 x 256, 4
  stages, promoted every 2 instructions (1515 dense-equivalent TFLOP/s), 1.05x dense fp8 cuBLASLt, 0.73x cuSPARSELt
  (528 us; its result's norm-wise error is 6x cuBLASLt's, as cuBLASLt's without promotion); every instruction 951
  us, every 4 913 us (explore_fp8_session14_fair_baselines_h200.txt); 980-984 us launched per tile and 1455 us in
  2-block clusters (session 13, every instruction).
preparation: epilogue_operands
parameters:
  BM: [128, 256]
  BN: [64, 128, 256]
  BK: [128, 256]  # whole 128-byte rows of Bt per box
  STAGES: [2, 3, 4, 5, 6, 8]
  LAG: [1]  # paces cp.async copies of B, which this sequence never makes
  CLUSTER: [1, 2]
  INFLIGHT: [0]  # each group's products are promoted within its k-tile
  BTMA: [1]  # Bt always goes by TMA
  RASTER: [1, 4, 8, 16]
  PERSIST: [0, 1]
  CONSUMERS: [2]
  PROMOTE: [1, 2, 4]  # instructions whose products the tensor core sums before they are added in fp32
  SCRATCH: [2, 1]  # scratch arrays: 2 keeps a group in flight while the last one is added, 1 frees registers
constraints:  # over the parameters and the problem symbols; a choice breaking one is never tried
  - "value_bytes == 1"
  - "BK // 64 % PROMOTE == 0"  # a group's steps lie in one k-tile
  - "LAG + INFLIGHT < STAGES"
  - "BM % (64 * CONSUMERS) == 0"
  # accumulators, SCRATCH groups' scratch accumulators (promotion) and metadata words per consumer thread, within
  # the 232 registers a consumer gets (128 x 128 x 256: 196; 256 x 128 x 128 with one scratch array: 196)
  - "(BM // (64 * CONSUMERS) + SCRATCH) * BN // 2 + BM // (64 * CONSUMERS) * BK // 64 <= 200"
  - "BM % (64 * CLUSTER) == 0"
  - "CLUSTER == 1 or N > BN"
  - "PERSIST == 0 or (CLUSTER == 1 and INFLIGHT == 0)"
  - "STAGES * 1024 * ceil_div(BK * BN * value_bytes + BM * BK // 2 * value_bytes + BM * BK // 8, 1024) + 16 * STAGES + 1024 <= 232448"
workspace:
  Bt: {dtype: value, size: "N * K"}
kernels:
  - entry: sp24w_transpose_b
    grid: ["ceil_div(N, 128)", "ceil_div(K, 128)", "1"]
    block: ["256", "1", "1"]
    args: [B, Bt, N, K]
  - entry: sp24_wgmma_sp
    grid: ["PERSIST * min(ceil_div(N, BN) * ceil_div(M, BM), num_sms) + (1 - PERSIST) * ceil_div(ceil_div(N, BN), CLUSTER) * CLUSTER",
           "PERSIST + (1 - PERSIST) * ceil_div(M, BM)", "1"]
    block: ["128 * (CONSUMERS + 1)", "1", "1"]
    cluster: ["CLUSTER", "1", "1"]
    shared_bytes: "STAGES * 1024 * ceil_div(BK * BN * value_bytes + BM * BK // 2 * value_bytes + BM * BK // 8, 1024) + 16 * STAGES + 1024"
    args: [tmap_A, tmap_E, tmap_B, B, bias, C, M, N, K, has_bias, act, alpha]
tensor_maps:
  tmap_A: {array: A_values, box: ["64", "BM // CLUSTER"], swizzle: "64B", l2_promotion: "128B"}
  tmap_E: {array: A_meta, box: ["BK // 2", "BM // 16 // CLUSTER"], dims: ["K // 2", "M // 16"], strides: ["2 * K"]}
  tmap_B: {array: Bt, box: ["128", "BN"], swizzle: "128B", dims: ["K", "N"], strides: ["K"], l2_promotion: "128B"}
accumulate: fp32
---*/

/*---
name: spmv_merge_path
family: csr_spmv
operation: spmv
format: csr
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: merge_path
summary: >
  Merge-path SpMV (Merrill and Garland) for skewed rows: power-law graphs, circuits with dense rows, many
  empty rows. The work is the merge of the row ends with the nonzero indices; every block takes a tile of
  BLOCK * ITEMS merge items (rows plus nonzeros), every thread ITEMS of them, so work per thread is equal
  whatever the row lengths. The preparation `merge_path` finds each tile's start once. A block streams its
  tile's nonzeros with aligned 16-byte loads, forms the products into shared memory, walks the merge path
  per thread, combines the threads' partial rows with a segmented scan of warp shuffles and stores its rows
  with coalesced writes. Rows that cross a tile boundary are finished by a second, small launch that sums the
  tiles' fp32 carries in a fixed order (no atomics: the result is deterministic). One launch cannot do it
  without a race: a cross-block handshake needs a flag or counter of known state, and workspaces hold
  undefined bytes at every call. EARLY 1 (sm_90) lets the fix-up launch begin once the last tile has started:
  its launch and its reads of the preparation's arrays overlap the tiles' tail, and it waits for them
  (griddepcontrol.wait) before it reads their carries.
preparation: merge_path
streams: [rowptr, colind, values, tile_row, tile_nz, fix_tile, fix_first]
parameters:  # in the order the search steps them: ITEMS 4 was 2-24% slower than 8, BLOCK 128-512 within 8% (sweeps of sessions 15-16, session 17's suite)
  ITEMS: [4, 8, 16]
  BLOCK: [128, 256, 512]
  HINT: [0, 1]
  EARLY: [0, 1]
constraints:
  - "BLOCK * ITEMS <= 4096"  # the tile's row ends and products in static shared memory (under 48 KB)
workspace:
  tile_carry: {dtype: fp32, size: "n_tiles"}
  tile_head: {dtype: fp32, size: "n_tiles"}
kernels:
  - entry: spmv_merge_tiles
    grid: ["n_tiles", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, tile_row, tile_nz, tile_carry, tile_head, M, nnz]
  - entry: spmv_merge_fixup
    grid: ["ceil_div(max(n_fix, 1) * 32, 256)", "1", "1"]
    block: ["256", "1", "1"]
    early: "EARLY"
    args: [tile_row, tile_carry, tile_head, fix_tile, fix_first, y, n_fix]
---*/
// Tile b holds the merge items from coordinate (i0, j0) = (tile_row[b], tile_nz[b]) (rows ended, nonzeros
// consumed) to (i1, j1): rows i0 .. i1-1 end in it and nonzeros j0 .. j1-1 lie in it; n_rows + n_nz items.
// 1. s_end[r] = rowptr[i0 + r + 1] - j0 for r = 0 .. n_rows (the last one, row i1, is open; n_nz when i1 = M).
// 2. s_val[k] = values[j0 + k] * x[colind[j0 + k]] for the tile's nonzeros (aligned quads, masked).
// 3. Thread t takes local merge items [t * ITEMS, (t + 1) * ITEMS) clipped to the tile: a binary search over
//    s_end gives its start (i, j); at each item, row end i comes first when s_end[i] <= j, else nonzero j.
//    A row end stores the running sum at s_val[n_nz + i] (after the products: n_nz + n_rows <= tile size).
// 4. Each thread's carry-out (the row it stops in, its running sum) goes through a segmented inclusive scan
//    keyed by row; thread t's carry-in is thread t-1's inclusive value (t starts in the row t-1 stopped in)
//    and is added to the first row t ends. Thread 0 has none: the tile's first row, when it began in an
//    earlier tile, goes to tile_head[b] instead of y. The scan's last value is the open row i1's partial:
//    tile_carry[b], written by every tile.
// 5. Rows i0 .. i1-1 are stored to y with consecutive threads on consecutive rows.
// Fix-up: warp f takes tile b = fix_tile[f] and writes y[tile_row[b]] = tile_head[b] + the sum of
// tile_carry[fix_first[f] .. b-1] (lanes strided, shuffle reduction). Every y is written once, by a store.
#define SD_TILE (BLOCK * ITEMS)
#define SD_WARPS (BLOCK / 32)

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_merge_tiles(const int* __restrict__ rowptr, const int* __restrict__ colind,
                 const value_t* __restrict__ values, const value_t* __restrict__ x,
                 value_t* __restrict__ y, const int* __restrict__ tile_row, const int* __restrict__ tile_nz,
                 float* __restrict__ tile_carry, float* __restrict__ tile_head, int M, int nnz)
{
    __shared__ int s_end[SD_TILE + 1];
    __shared__ float s_val[SD_TILE];
    __shared__ float s_incl[BLOCK];
    __shared__ int s_wkey[SD_WARPS];
    __shared__ float s_wval[SD_WARPS];
    __shared__ int s_wfull[SD_WARPS];

    if (EARLY) sd_allow_next_launch();  // the fix-up may start once the last tile has started (sd_allow_next_launch)
    const int b = blockIdx.x;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int i0 = __ldg(tile_row + b), i1 = __ldg(tile_row + b + 1);
    const int j0 = __ldg(tile_nz + b), j1 = __ldg(tile_nz + b + 1);
    const int n_rows = i1 - i0, n_nz = j1 - j0;
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();

    for (int r = tid; r <= n_rows; r += BLOCK)
        s_end[r] = i0 + r < M ? __ldg(rowptr + i0 + r + 1) - j0 : n_nz;
    for (int a = (j0 & ~3) + 4 * tid; a < j1; a += 8 * BLOCK) {
        int c[2][4];
        float v[2][4];
        sd_quads_load<BLOCK, 2>(a, j1, [&](int aa, int (&cc)[4], float (&vv)[4]) {
            sd_quad_load<HINT>(colind, values, aa, j0, j1, nnz, pol, cc, vv);
        }, c, v);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (c[u][e] >= 0) s_val[a + u * 4 * BLOCK + e - j0] = v[u][e] * sd_to_f32(__ldg(x + c[u][e]));
    }
    __syncthreads();

    const int items = n_rows + n_nz;
    const int d = min(tid * ITEMS, items);
    const int count = min(d + ITEMS, items) - d;
    int lo = max(0, d - n_nz), hi = min(d, n_rows);
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (s_end[mid] <= d - mid - 1) lo = mid + 1;
        else hi = mid;
    }
    const int i_start = lo;
    int i = lo, j = d - lo;
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (k < count) {
            if (s_end[i] <= j) { s_val[n_nz + i] = acc; acc = 0.f; ++i; }
            else { acc += s_val[j]; ++j; }
        }
    }

    // segmented inclusive scan of (row, carry) over the block; keys never decrease with the thread index
    const int key = i;
    float incl = acc;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float v_up = __shfl_up_sync(SD_FULL_MASK, incl, off);
        const int k_up = __shfl_up_sync(SD_FULL_MASK, key, off);
        if (lane >= off && k_up == key) incl += v_up;
    }
    const int key_first = __shfl_sync(SD_FULL_MASK, key, 0);
    if (lane == 31) { s_wkey[warp] = key; s_wval[warp] = incl; s_wfull[warp] = key_first == key; }
    __syncthreads();
    if (key_first == key) {  // this thread's row reaches back to the warp's first lane: earlier warps add in
        float pre = 0.f;
        for (int w = warp - 1; w >= 0 && s_wkey[w] == key; --w) {
            pre += s_wval[w];
            if (!s_wfull[w]) break;
        }
        incl += pre;
    }
    s_incl[tid] = incl;
    __syncthreads();
    if (tid > 0 && i > i_start) s_val[n_nz + i_start] += s_incl[tid - 1];
    __syncthreads();

    const bool head = n_rows > 0 && __ldg(rowptr + i0) < j0;  // row i0 began in an earlier tile
    for (int r = tid; r < n_rows; r += BLOCK) {
        if (r == 0 && head) tile_head[b] = s_val[n_nz];
        else y[i0 + r] = sd_from_f32(s_val[n_nz + r]);
    }
    if (tid == BLOCK - 1) tile_carry[b] = s_incl[BLOCK - 1];
}

extern "C" __global__ void __launch_bounds__(256)
spmv_merge_fixup(const int* __restrict__ tile_row, const float* __restrict__ tile_carry,
                 const float* __restrict__ tile_head, const int* __restrict__ fix_tile,
                 const int* __restrict__ fix_first, value_t* __restrict__ y, int n_fix)
{
    const int f = (blockIdx.x * 256 + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    // the preparation's arrays first (with EARLY, while the tiles still run), then the tiles' carries
    const int b = f < n_fix ? __ldg(fix_tile + f) : 0;
    const int first = f < n_fix ? __ldg(fix_first + f) : 0;
    const int row = f < n_fix ? __ldg(tile_row + b) : 0;
    if (EARLY) sd_wait_earlier_launches();
    if (f >= n_fix) return;  // whole warps leave together
    float acc = 0.f;
    // through L2 (ld.global.cg), never the non-coherent path: with EARLY this grid began before those writes
    for (int t = first + lane; t < b; t += 32) acc += __ldcg(tile_carry + t);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset);
    if (lane == 0) y[row] = sd_from_f32(__ldcg(tile_head + b) + acc);
}

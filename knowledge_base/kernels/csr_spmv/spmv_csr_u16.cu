/*---
name: spmv_csr_u16
family: csr_spmv
operation: spmv
format: csr_u16
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: u16_columns
summary: >
  CSR with 16-bit column offsets, for matrices whose rows each span fewer than 65536 columns (banded,
  stencil and FEM matrices in a bandwidth-reducing order, road networks, block-diagonal matrices). The
  preparation `csr_u16` stores every column as a uint16 offset from its row's smallest column, at the
  nonzero's own position, so index traffic drops from 4 to 2 bytes per nonzero (6 instead of 8 bytes per
  fp32 nonzero, 4 instead of 6 for fp16 and bf16) while rowptr and values are read as they are. GROUP lanes
  per row as in spmv_csr_vec4, each with one 8-byte load of four offsets and one 16- or 8-byte load of four
  values per aligned quad, masked to the row, UNROLL quads in flight; the matrix is streamed (HINT=1: L2
  evict-first, so x stays in L2). A row too wide for 16 bits (row_base -1) is read through its int32
  columns by the same lanes, so any matrix is exact and one launch does all rows; only the narrow rows save
  bytes. Rows of similar length, like spmv_csr_vec4: one very long row holds up its warp.
preparation: csr_u16
streams: [rowptr, col16, values, row_base]  # a wide row's int32 columns left out: a floor
parameters:
  GROUP: [1, 2, 4, 8, 16, 32]
  UNROLL: [1, 2, 4]
  BLOCK: [128, 256, 512]
  HINT: [0, 1]
kernels:
  - entry: spmv_csr_u16
    grid: ["ceil_div(M * GROUP, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [rowptr, colind, values, x, y, col16, row_base, M, nnz]
---*/
// Mapping: thread t belongs to group t / GROUP, which owns row r = t / GROUP; base = row_base[r]. The row's
// nonzeros [rowptr[r], rowptr[r+1]) are covered by aligned quads q = start & ~3, q + 4, ...; lane l takes quads
// l, l + GROUP, ... (UNROLL per step, all loads before the FMAs). Quad a of a narrow row (base >= 0) reads
// col16[a .. a+3] with one 8-byte load (col16 is padded to a multiple of 4) and values[a .. a+3] (one vector
// load when a + 4 <= nnz, else element by element): column = base + offset. A wide row (base -1) reads
// colind[a .. a+3] instead (the prelude's quad load). Columns outside the row are masked (-1, no gather). The
// group reduces with shuffles; lane 0 writes y[r] (0 for an empty row), so every y is written once.

// Four consecutive uint16 offsets from an 8-byte aligned address, streamed like the prelude's loads.
template <int SD_H>
__device__ __forceinline__ uint2 sd_ld4_u16(const unsigned short* p, unsigned long long pol) {
    uint2 r;
    if constexpr (SD_H) {
        asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"
            : "=r"(r.x), "=r"(r.y) : "l"(p), "l"(pol));
    } else {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    }
    return r;
}

// Partial dot product of the nonzeros [lo, hi) of a row with x, for one lane of a group of STRIDE lanes (the
// quads lane, lane + STRIDE, ...; UR quads per step with all loads issued before the FMAs). Columns are
// base + col16[k], or colind[k] when base < 0 (a row wider than 16 bits).
template <int STRIDE, int UR, int SD_H>
__device__ __forceinline__ float sd_u16_walk(const int* __restrict__ colind, const unsigned short* __restrict__ col16,
                                             const value_t* __restrict__ values, const value_t* __restrict__ x,
                                             int base, int lo, int hi, int lane, int nnz, unsigned long long pol) {
    float acc = 0.f;
    for (int a = (lo & ~3) + 4 * lane; a < hi; a += 4 * STRIDE * UR) {
        int c[UR][4];
        float v[UR][4];
#pragma unroll
        for (int u = 0; u < UR; ++u) {
            const int aa = a + u * 4 * STRIDE;
            if (aa < hi && base < 0) {
                sd_quad_load<SD_H>(colind, values, aa, lo, hi, nnz, pol, c[u], v[u]);
            } else if (aa < hi) {
                const uint2 off = sd_ld4_u16<SD_H>(col16 + aa, pol);
                sd_quad_values<SD_H>(values, aa, nnz, pol, v[u]);
                const unsigned int w[4] = {off.x & 0xffffu, off.x >> 16, off.y & 0xffffu, off.y >> 16};
#pragma unroll
                for (int e = 0; e < 4; ++e) c[u][e] = (aa + e >= lo && aa + e < hi) ? base + (int)w[e] : -1;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) { c[u][e] = -1; v[u][e] = 0.f; }
            }
        }
        sd_quads_fma<UR, 0>(x, c, v, acc);
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_csr_u16(const int* __restrict__ rowptr, const int* __restrict__ colind,
             const value_t* __restrict__ values, const value_t* __restrict__ x,
             value_t* __restrict__ y, const unsigned short* __restrict__ col16,
             const int* __restrict__ row_base, int M, int nnz)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const int lane = threadIdx.x % GROUP;
    const long long row = t / GROUP;
    const bool valid = row < M;
    const int start = valid ? __ldg(rowptr + row) : 0;
    const int end = valid ? __ldg(rowptr + row + 1) : 0;
    const int base = valid ? __ldg(row_base + row) : 0;
    unsigned long long pol = 0;
    if (HINT) pol = sd_policy_evict_first();

    float acc = sd_u16_walk<GROUP, UNROLL, HINT>(colind, col16, values, x, base, start, end, lane, nnz, pol);
#pragma unroll
    for (int offset = GROUP / 2; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(SD_FULL_MASK, acc, offset, GROUP);
    if (valid && lane == 0) y[row] = sd_from_f32(acc);
}

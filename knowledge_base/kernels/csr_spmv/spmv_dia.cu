/*---
name: spmv_dia
family: csr_spmv
operation: spmv
format: dia
dtypes: [fp32, fp16, bf16]
archs: [sm_80, sm_90]
strategy: diagonal
summary: >
  For stencil and banded matrices whose nonzeros lie on few diagonals (offsets col - row). The preparation
  `diagonals` stores the MAX_DIAGS densest diagonals in DIA (column-major by diagonal, so the threads of a
  warp read consecutive values of one diagonal, with a per-row bit mask of the entries present) and every
  other nonzero in a small CSR remainder. One thread per row: no column indices are read for the DIA part
  and x is read at consecutive addresses along each diagonal; the same thread then adds its remainder entries,
  unless the remainder is empty (a stencil's: its row pointers are then never read). The mask words are as narrow
  as MAX_DIAGS allows (a byte per row up to 8 diagonals, two up to 16). Before both (sessions 10-11, 4-byte mask
  words, row pointers always read): 66-71% of the bandwidth floor on two stencils. With narrow words, the loads of
  a present entry waiting for its mask word: 38-47% of its own format's floor on six stencils (session 17). Now
  every stored diagonal's value and x are loaded without waiting for the mask (not measured yet).
  Absent entries are skipped (never 0 * x), so NaN and Inf propagate as in CSR; fp32 accumulation.
  Any matrix is exact; only when the remainder is small is it fast.
preparation: diagonals
streams: [dia_offsets, dia_vals, dia_mask, rowptr_rest if rest_nnz > 0, colind_rest if rest_nnz > 0, values_rest if rest_nnz > 0]
parameters:
  MAX_DIAGS: [8, 16, 32, 64]
  BLOCK: [128, 256, 512]
kernels:
  - entry: spmv_dia
    grid: ["ceil_div(M, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [dia_offsets, dia_vals, dia_mask, rowptr_rest, colind_rest, values_rest, x, y, n_diags, rest_nnz, M, K]
---*/
// Thread t takes row r = blockIdx.x * BLOCK + threadIdx.x. For each stored diagonal k (offset d =
// dia_offsets[k], the same for the whole warp: a broadcast load), the row's entry is present when bit k % W
// of dia_mask[(k / W) * M + r] is set (W bits a word, the preparation's mask_bits(MAX_DIAGS)). The thread reads
// dia_vals[k * M + r] (consecutive across the warp; zero where absent) and x[r + d] (consecutive too, clamped
// into [0, K)) for every stored diagonal, and adds the product of a present entry whose column lies in [0, K). Then, when the matrix has a remainder (rest_nnz > 0, the same for every thread), the row's remainder
// entries rowptr_rest[r] .. rowptr_rest[r + 1] in CSR. y[r] is written for every row, 0 for an empty one.
#if MAX_DIAGS <= 8
typedef unsigned char dia_mask_t;
#elif MAX_DIAGS <= 16
typedef unsigned short dia_mask_t;
#else
typedef unsigned int dia_mask_t;
#endif
#define MASK_BITS (8 * (int)sizeof(dia_mask_t))

extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_dia(const int* __restrict__ dia_offsets, const value_t* __restrict__ dia_vals,
         const dia_mask_t* __restrict__ dia_mask, const int* __restrict__ rowptr_rest,
         const int* __restrict__ colind_rest, const value_t* __restrict__ values_rest,
         const value_t* __restrict__ x, value_t* __restrict__ y, int n_diags, int rest_nnz, int M, int K)
{
    const long long r = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (r >= M) return;
    const int nd = K > 0 ? min(n_diags, MAX_DIAGS) : 0;  // no column, no entry (and no x to clamp into)
    float acc = 0.f;
    for (int w = 0; w * MASK_BITS < nd; ++w) {
        const unsigned int bits = (unsigned int)__ldcs(dia_mask + (long long)w * M + r);
        const int k_end = min(nd - w * MASK_BITS, MASK_BITS);
#pragma unroll 8
        for (int j = 0; j < k_end; ++j) {
            const int k = w * MASK_BITS + j;
            const long long col = r + __ldg(dia_offsets + k);
            // the value and x are loaded whether or not the entry is present (x at a column clamped into [0, K)):
            // no load waits for the mask word, so a step costs one memory round trip, not two. Only a present
            // entry is added (never 0 * x)
            const float v = sd_to_f32(__ldcs(dia_vals + (long long)k * M + r));
            const float xv = sd_to_f32(__ldg(x + min(max(col, 0LL), (long long)K - 1)));
            if (((bits >> j) & 1u) && col >= 0 && col < K) acc = fmaf(v, xv, acc);
        }
    }
    if (rest_nnz > 0) {
        const int lo = __ldg(rowptr_rest + r), hi = __ldg(rowptr_rest + r + 1);
        for (int e = lo; e < hi; ++e) {
            const int c = __ldg(colind_rest + e);
            if (c < 0 || c >= K) continue;
            acc = fmaf(sd_to_f32(__ldg(values_rest + e)), sd_to_f32(__ldg(x + c)), acc);
        }
    }
    y[r] = sd_from_f32(acc);
}

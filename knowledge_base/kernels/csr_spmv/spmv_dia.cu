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
  and x is read at consecutive addresses along each diagonal; the same thread then adds its remainder entries.
  Absent entries are skipped (never 0 * x), so NaN and Inf propagate as in CSR; fp32 accumulation.
  Any matrix is exact; only when the remainder is small is it fast.
preparation: diagonals
parameters:
  MAX_DIAGS: [8, 16, 32, 64]
  BLOCK: [128, 256, 512]
kernels:
  - entry: spmv_dia
    grid: ["ceil_div(M, BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [dia_offsets, dia_vals, dia_mask, rowptr_rest, colind_rest, values_rest, x, y, n_diags, M, K]
---*/
// Thread t takes row r = blockIdx.x * BLOCK + threadIdx.x. For each stored diagonal k (offset d =
// dia_offsets[k], the same for the whole warp: a broadcast load), the row's entry is present when bit k % 32
// of dia_mask[(k / 32) * M + r] is set; it then reads dia_vals[k * M + r] (consecutive across the warp) and
// x[r + d] (consecutive too), the column checked against [0, K). Then the row's remainder entries
// rowptr_rest[r] .. rowptr_rest[r + 1] in CSR. y[r] is written for every row, 0 for an empty one.
extern "C" __global__ void __launch_bounds__(BLOCK)
spmv_dia(const int* __restrict__ dia_offsets, const value_t* __restrict__ dia_vals,
         const int* __restrict__ dia_mask, const int* __restrict__ rowptr_rest,
         const int* __restrict__ colind_rest, const value_t* __restrict__ values_rest,
         const value_t* __restrict__ x, value_t* __restrict__ y, int n_diags, int M, int K)
{
    const long long r = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (r >= M) return;
    const int nd = min(n_diags, MAX_DIAGS);
    float acc = 0.f;
    for (int w = 0; w * 32 < nd; ++w) {
        const unsigned int bits = (unsigned int)__ldcs(dia_mask + (long long)w * M + r);
        const int k_end = min(nd - w * 32, 32);
#pragma unroll 8
        for (int j = 0; j < k_end; ++j) {
            if (!((bits >> j) & 1u)) continue;
            const int k = w * 32 + j;
            const long long col = r + __ldg(dia_offsets + k);
            if (col < 0 || col >= K) continue;
            const float v = sd_to_f32(__ldcs(dia_vals + (long long)k * M + r));
            acc = fmaf(v, sd_to_f32(__ldg(x + col)), acc);
        }
    }
    const int lo = __ldg(rowptr_rest + r), hi = __ldg(rowptr_rest + r + 1);
    for (int e = lo; e < hi; ++e) {
        const int c = __ldg(colind_rest + e);
        if (c < 0 || c >= K) continue;
        acc = fmaf(sd_to_f32(__ldg(values_rest + e)), sd_to_f32(__ldg(x + c)), acc);
    }
    y[r] = sd_from_f32(acc);
}

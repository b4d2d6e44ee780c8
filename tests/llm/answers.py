"""Canned model answers shared by the agent unit tests and the end-to-end test."""

from __future__ import annotations

NEW_KERNEL_SOURCE = r'''
// one thread per output element: row = blockIdx.x, columns in tiles of COLS threads
extern "C" __global__ void spmm_thread_per_output(const int* __restrict__ rowptr, const int* __restrict__ colind,
                                                  const value_t* __restrict__ values, const value_t* __restrict__ B,
                                                  value_t* __restrict__ C, int M, int N)
{
    const int row = blockIdx.x;
    const int col = blockIdx.y * COLS + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int j = rowptr[row]; j < rowptr[row + 1]; ++j)
        acc += sd_to_f32(values[j]) * sd_to_f32(B[(long long)colind[j] * N + col]);
    C[(long long)row * N + col] = sd_from_f32(acc);
}
'''


def new_kernel(cols: int = 32, **changes) -> dict:
    """A coder answer with a new SpMM kernel under the contract; `changes` replace fields of the kernel."""
    kernel = {
        "name": "spmm_thread_per_output",
        "source": NEW_KERNEL_SOURCE,
        "parameters": {"COLS": cols},
        "launches": [{"entry": "spmm_thread_per_output", "grid": ["M", "ceil_div(N, COLS)", "1"],
                      "block": ["COLS", "1", "1"], "args": ["rowptr", "colind", "values", "B", "C", "M", "N"]}],
    }
    return {"change": "one thread per output element, so that every row is guarded", "new_kernel": {**kernel, **changes}}


def reference(vw: int = 4, warps: int = 4, unroll: int = 8, lanes: int = 8) -> dict:
    return {"change": "row-split with wide loads", "reference": {"kernel": "spmm_csr_rowsplit",
                                                                "params": {"VW": vw, "LANES": lanes, "WARPS": warps,
                                                                           "UNROLL": unroll}}}

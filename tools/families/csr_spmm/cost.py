"""A cost model per SpMM kernel (C = A B, A in CSR, B dense K x N): how many B elements it pulls through L2 per
call, at the rate each kernel was measured to pull them on the H200, or its DRAM bytes at copy bandwidth,
whichever takes longer, plus a launch.

The rates are measurements, not guesses (bench/NOTES.md, sessions 2-4, M = K = 4096, N = 256):
- row split, one B row per nonzero: fp32 5% 73.2 us and 1% 21.2 us (3.0e6 products per us); fp16 5% 61.8 us
  (3.6e6: the 16-bit B rows are half the bytes);
- tensor-core row groups, one B row per column of a group of 8 rows (nnz / group_overlap of them): uniform 5%
  65.4 us, banded 5% 33.4 us, uniform 1% 21.1 us (2.75e6 elements per us);
- the shared-memory tile was slower than row split on every spec measured (120-300 us against 18-73 us): it is
  priced at 2.5x row split until calibration says otherwise.
BSR on tensor cores pulls one B row per block column of each block (the same path as the row groups) and is
priced at their rate; it has no measurement yet. The planner scales each prediction by the kernel's calibration
from earlier runs on the same GPU (the experience store).
"""

from __future__ import annotations

from collections.abc import Mapping

COPY_BYTES_PER_US = 4.25e6  # 4.25 TB/s, evals/results/floors_h200.json
LAUNCH_US = 2.5
ROWSPLIT_PRODUCTS_PER_US = {4: 3.0e6, 2: 3.6e6}  # by value bytes
TENSOR_ELEMENTS_PER_US = 2.75e6
SMEM_TILE_OVER_ROWSPLIT = 2.5


def dram_bytes(f: Mapping[str, float], N: int, value_bytes: int, stored_values: float, indices: float) -> float:
    """A's stored values and indices, the row pointers, B once and C once."""
    return (stored_values * value_bytes + indices * 4 + 4 * (f["rows"] + 1) + f["cols"] * N * value_bytes
            + f["rows"] * N * value_bytes)


def predicted_us(kernel: str, start: Mapping[str, int], f: Mapping[str, float], N: int, value_bytes: int) -> float:
    nnz = f["nnz"]
    csr_dram = dram_bytes(f, N, value_bytes, nnz, nnz) / COPY_BYTES_PER_US
    rowsplit = nnz * N / ROWSPLIT_PRODUCTS_PER_US[value_bytes]
    if kernel == "spmm_csr_rowsplit":
        pulled = rowsplit
        dram = csr_dram
    elif kernel == "spmm_csr_smem_tile":
        pulled = SMEM_TILE_OVER_ROWSPLIT * rowsplit
        dram = csr_dram
    elif kernel == "spmm_csr_tc_rowgroup":
        pulled = nnz / max(f.get("group_overlap", 1.0), 1.0) * N / TENSOR_ELEMENTS_PER_US
        dram = csr_dram
    elif kernel == "spmm_bsr_tc":
        block = start["BR"]
        fill = max(f.get(f"block_fill_{block}", 0.0), 1e-6)  # nonzeros over stored values
        stored = nnz / fill
        pulled = stored / block * N / TENSOR_ELEMENTS_PER_US  # one B row per block column of each block
        dram = dram_bytes(f, N, value_bytes, stored, stored / (block * block)) / COPY_BYTES_PER_US
    else:
        raise KeyError(f"no cost model for {kernel}")
    return max(pulled, dram) + LAUNCH_US

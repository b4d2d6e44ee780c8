"""The operands of the CSR families (SpMV, SpMM) as the baseline libraries take them, and their densification."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sparseditto.tools.baselines.common import Array
from sparseditto.tools.dtypes import dtype as dtype_info

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

# The value types the CSR baselines handle; bf16 travels as raw uint16 bits (CuPy has no bfloat16).
CSR_VALUE_DTYPES = ("fp32", "fp16", "bf16")
# The dense operand by output: y = A x (x a vector), C = A B (B a row-major matrix).
_DENSE_OPERAND = {"y": "x", "C": "B"}
_DENSE_LIMIT_BYTES = 4 << 30


@dataclass(frozen=True)
class CsrProduct:
    """A (M x K, CSR with int32 indices) times a dense operand: a vector x (K,) or a row-major matrix B (K, N)."""

    rowptr: Array
    colind: Array
    values: Array
    dense: Array
    M: int
    K: int
    dtype: str

    @property
    def vector(self) -> bool:
        return self.dense.ndim == 1

    @property
    def bf16(self) -> bool:
        return self.dtype == "bf16"

    def new_output(self) -> Array:
        """An uninitialised C-contiguous output: (M,) for a vector product, (M, N) for a matrix product."""
        import cupy

        return cupy.empty((self.M, *self.dense.shape[1:]), dtype=self.values.dtype)


def csr_product(problem: Problem, device: Mapping[str, Array]) -> CsrProduct:
    """The operands of a CSR SpMV/SpMM problem by name, checked against its symbols and dtype. Mismatches are
    rejected rather than copied away: descriptors take raw pointers, so a copy made here would silently
    detach the baselines from later in-place changes to the caller's arrays."""
    outputs = list(problem.outputs)
    if len(outputs) != 1 or outputs[0] not in _DENSE_OPERAND:
        raise ValueError(f"not a CSR product: outputs {outputs}, expected one of {sorted(_DENSE_OPERAND)}")
    if problem.dtype not in CSR_VALUE_DTYPES:
        raise ValueError(f"no CSR baseline for dtype {problem.dtype!r}; expected one of {CSR_VALUE_DTYPES}")
    M, K = problem.symbols["M"], problem.symbols["K"]
    values, dense = device["values"], device[_DENSE_OPERAND[outputs[0]]]
    shape = (K,) if outputs[0] == "y" else (K, problem.symbols["N"])
    storage = np.dtype(dtype_info(problem.dtype).storage).name
    if values.dtype.name != storage or dense.dtype.name != storage:
        raise ValueError(f"{problem.dtype} expects {storage} storage, got values {values.dtype}, dense {dense.dtype}")
    if dense.shape != shape or not dense.flags.c_contiguous:
        raise ValueError(f"dense operand must be C-contiguous with shape {shape}, got {dense.shape}")
    return CsrProduct(device["rowptr"], device["colind"], values, dense, M, K, problem.dtype)


def densify(product: CsrProduct) -> Array:
    """Dense (M, K) C-contiguous copy of the CSR matrix in the dtype of its values (uint16 = bf16 bits), refused
    above 4 GiB, where the dense baseline is not a realistic option.

    Accumulates in fp32 so duplicate entries are summed (as CSR semantics require) for every dtype,
    including bf16, which CuPy cannot add natively; bf16 is rounded to nearest-even."""
    import cupy
    import cupyx

    rowptr, colind, values, M, K = product.rowptr, product.colind, product.values, product.M, product.K
    if (size := M * K * values.dtype.itemsize) > _DENSE_LIMIT_BYTES:
        raise MemoryError(f"densified matrix would take {size} bytes (limit {_DENSE_LIMIT_BYTES})")
    dense = cupy.zeros((M, K), dtype=cupy.float32)
    nnz = int(colind.size)
    if nnz:
        rows = cupy.searchsorted(rowptr, cupy.arange(nnz, dtype=rowptr.dtype), side="right") - 1
        flat_index = rows.astype(cupy.int64) * K + colind.astype(cupy.int64)
        if values.dtype == cupy.uint16:
            as_float = (values.astype(cupy.uint32) << 16).view(cupy.float32)
        else:
            as_float = values.astype(cupy.float32, copy=False)
        cupyx.scatter_add(dense.ravel(), flat_index, as_float)
    if values.dtype == cupy.uint16:
        bits = dense.view(cupy.uint32)
        bits += (bits >> 16) & 1
        bits += 0x7FFF
        bits >>= 16
        return bits.astype(cupy.uint16)
    return dense.astype(values.dtype, copy=False)

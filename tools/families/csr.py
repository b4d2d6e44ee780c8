"""Shared parts of the CSR families: the sparse matrix of a spec, in canonical CSR and storage types."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparseditto.spec import MatrixFilePattern, Spec, UnstructuredPattern
from sparseditto.tools.families.base import VALUE_BYTES, to_float64, to_storage
from sparseditto.tools.matrices import generate_csr, load_matrix_file, matrix_shape

TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}


def spec_matrix_shape(spec: Spec) -> tuple[int, int, int]:
    """(M, K, expected nnz) of the spec's sparse matrix."""
    if isinstance(spec.pattern, MatrixFilePattern):
        return matrix_shape(spec.pattern)
    pat: UnstructuredPattern = spec.pattern  # type: ignore[assignment]
    per_row = pat.mean_row_length(spec.K)
    return spec.M, spec.K, int(round(per_row * spec.M))


def make_matrix(spec: Spec, rng: np.random.Generator, M: int, K: int) -> sp.csr_matrix:
    """The sparse matrix for one trial; a file matrix keeps its pattern and gets fresh values per seed."""
    if isinstance(spec.pattern, MatrixFilePattern):
        mat = load_matrix_file(spec.pattern)
        if (M, K) != mat.shape:
            mat = mat[:M, :K].tocsr()
        mat.data = rng.uniform(-1.0, 1.0, size=mat.nnz).astype(np.float32)
        return mat
    return generate_csr(spec.pattern, M, K, np.float32, rng)


def csr_inputs(mat: sp.csr_matrix, dtype: str) -> dict[str, np.ndarray]:
    return {
        "rowptr": mat.indptr.astype(np.int32),
        "colind": mat.indices.astype(np.int32),
        "values": to_storage(mat.data, dtype),
    }


def csr_float64(inputs: dict[str, np.ndarray], dtype: str, shape: tuple[int, int]) -> sp.csr_matrix:
    return sp.csr_matrix((to_float64(inputs["values"], dtype), inputs["colind"], inputs["rowptr"]), shape=shape)


def csr_bytes(M: int, nnz: int, dtype: str) -> int:
    return 4 * (M + 1) + nnz * (4 + VALUE_BYTES[dtype])

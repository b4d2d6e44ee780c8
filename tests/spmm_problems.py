"""A CSR SpMM problem in fp32 from a SciPy matrix, for the NumPy emulations of the SpMM kernels' lane mappings."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparseditto.tools.families.base import Output, Problem


def spmm_problem(mat: sp.spmatrix, N: int, seed: int = 0) -> Problem:
    """C = A B with A's pattern from `mat` (indices sorted), values and B drawn uniformly from [-1, 1)."""
    mat = sp.csr_matrix(mat)
    mat.sort_indices()
    M, K = mat.shape
    rng = np.random.default_rng(seed)
    return Problem(dtype="fp32", symbols={"M": M, "K": K, "N": N, "nnz": mat.nnz},
                   inputs={"rowptr": mat.indptr.astype(np.int32), "colind": mat.indices.astype(np.int32),
                           "values": rng.uniform(-1, 1, mat.nnz).astype(np.float32),
                           "B": rng.uniform(-1, 1, (K, N)).astype(np.float32)},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": "fp32", "B": "fp32"},
                   outputs={"C": Output((M, N), "fp32", 1e-5)})

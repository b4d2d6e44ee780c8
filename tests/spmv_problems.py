"""An SpMV problem from any SciPy matrix, for the CPU tests of the SpMV formats' preparations and emulations."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.dtypes import to_storage
from sparseditto.tools.families.base import Output, Problem


def problem_of(mat: sp.spmatrix, dtype: str = "fp32", seed: int = 0, sort: bool = True) -> Problem:
    """y = A x with A = `mat` (column indices sorted within rows unless `sort` is False), values and x uniform in
    [-1, 1) rounded to `dtype`."""
    mat = sp.csr_matrix(mat)
    if sort:
        mat.sort_indices()
    M, K = mat.shape
    rng = np.random.default_rng(seed)
    return Problem(dtype=dtype, symbols={"M": M, "K": K, "N": 1, "nnz": mat.nnz},
                   inputs={"rowptr": mat.indptr.astype(np.int32), "colind": mat.indices.astype(np.int32),
                           "values": to_storage(rng.uniform(-1, 1, mat.nnz), dtype),
                           "x": to_storage(rng.uniform(-1, 1, K), dtype)},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": dtype, "x": dtype},
                   outputs={"y": Output((M,), dtype, 1e-5)})


def matrix_spec(folder, mat: sp.spmatrix, name: str, dtype: str = "fp32") -> Spec:
    """An SpMV spec of `mat` saved as `folder`/`name`.npz (a matrix file, as a user brings it)."""
    path = folder / f"{name}.npz"
    sp.save_npz(path, sp.csr_matrix(mat))
    return parse_spec({"name": name, "operation": "spmv", "dtype": dtype,
                       "pattern": {"kind": "matrix_file", "path": str(path)}})

"""Reverse Cuthill-McKee renumbering: the one-time preparation of the spmv_csr_rcm kernel."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Gather, Structure, by_structure


@by_structure(reads=())
def rcm_reordered(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """Rows and columns renumbered together by reverse Cuthill-McKee on the pattern of A + A^T, so that a permuted
    mesh or road grid becomes banded again and neighbouring rows gather neighbouring x: new row i is old row
    `rcm_row[i]`, new column j old column `rcm_col[j]`. That needs every column index below M (a square matrix, or
    a tall one whose absent columns M > K are simply never read); otherwise (a wide matrix, compute-sanitizer's
    slices of a square one among them) both orders stay the identity. Each row keeps its entries in their CSR order,
    so a row's sum is formed in the same order as in A.

    Arrays: `rcm_rowptr` (int32), `rcm_colind` (int32, new column numbers), `rcm_vals` (the values' storage type,
    gathered at every call), `rcm_row` (int32, M long), `rcm_col` (int32, `rcm_cols` long). The kernel computes
    x'[j] = x[rcm_col[j]] (0 where that column is past K), then y[rcm_row[i]] = row i of the renumbered matrix times
    x'. Symbols: `rcm_cols` (M when renumbered, else the columns the matrix references). The structure is made once
    (`by_structure`); it needs no shape beyond the CSR arrays, so an exported launch.py prepares it alike."""
    rowptr = rowptr.astype(np.int64)
    colind = np.asarray(colind)
    M, nnz = len(rowptr) - 1, int(rowptr[-1])
    referenced = int(colind.max()) + 1 if nnz else 0
    if referenced <= M:
        pattern = sp.csr_matrix((np.ones(nnz, dtype=np.int8), colind, rowptr), shape=(M, M))
        perm = reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True).astype(np.int64)
        row, col = perm, perm
    else:
        row, col = np.arange(M, dtype=np.int64), np.arange(referenced, dtype=np.int64)
    new_col = np.empty(len(col), dtype=np.int64)
    new_col[col] = np.arange(len(col), dtype=np.int64)
    lengths = np.diff(rowptr)[row]
    new_rowptr = np.zeros(M + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_rowptr[1:])
    # entry k of new row i is entry k of old row row[i]
    src = np.repeat(rowptr[row] - new_rowptr[:-1], lengths) + np.arange(nnz, dtype=np.int64)
    arrays = {"rcm_rowptr": new_rowptr.astype(np.int32),
              "rcm_colind": at_least_one(new_col[colind[src]].astype(np.int32)),
              "rcm_row": at_least_one(row.astype(np.int32)), "rcm_col": at_least_one(col.astype(np.int32))}
    return Structure(arrays=arrays, symbols={"rcm_cols": len(col)}, gathers={"rcm_vals": Gather(size=max(nnz, 1), dst=np.arange(nnz), src=src)})

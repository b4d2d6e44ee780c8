"""CSR with 16-bit column offsets: the one-time preparation of the spmv_csr_u16 kernel.

A row whose columns span fewer than 65536 (banded, stencil and FEM matrices in a good ordering, blocks on the
diagonal) stores each column as a uint16 offset from the row's smallest column: 2 bytes of index traffic per
nonzero instead of 4. The offsets sit at the nonzeros' own positions, so the kernel reads the original
`rowptr` and `values` unchanged (nothing is copied or reordered), and a row too wide for 16 bits is simply read
through its own int32 columns in `colind`: the CSR remainder is the original CSR of those rows.
"""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Structure, by_structure

SPAN = 1 << 16  # offsets 0 .. 65535


@by_structure(reads=())
def csr_u16(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """Per-row bases and 16-bit offsets; the rows that do not fit fall back to their int32 columns.

    Arrays (each at least one element long: a zero-length device array cannot be passed):
    - `col16` (uint16, nnz rounded up to a multiple of 4, so that every aligned 8-byte load of four offsets
      lies inside it): colind[k] - row_base[r] for the nonzeros k of a fitting row r, 0 elsewhere;
    - `row_base` (int32, M): the row's smallest column (0 for an empty row), -1 for a row whose columns span
      65536 or more: the kernel reads that row's `colind` instead.
    Symbols (reported, not needed by the launch): `n_wide_rows`, and `wide_nnz`, the nonzeros that fell back.
    Columns need not be sorted within a row. The values are not copied: the preparation depends on the
    structure only, made once per structure (`by_structure`)."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    M, nnz = len(rowptr) - 1, int(rowptr[-1])
    colind = np.asarray(colind, dtype=np.int64)[:nnz]
    lengths = np.diff(rowptr)
    filled = np.flatnonzero(lengths > 0)
    low = np.zeros(M, dtype=np.int64)
    high = np.zeros(M, dtype=np.int64)
    if len(filled):
        low[filled] = np.minimum.reduceat(colind, rowptr[filled])
        high[filled] = np.maximum.reduceat(colind, rowptr[filled])
    fits = high - low < SPAN
    row_base = np.where(fits, low, -1)

    rows = np.repeat(np.arange(M, dtype=np.int64), lengths)
    col16 = np.zeros(max(-(-nnz // 4) * 4, 4), dtype=np.uint16)
    inside = fits[rows]
    col16[:nnz][inside] = (colind[inside] - low[rows[inside]]).astype(np.uint16)

    arrays = {"col16": col16, "row_base": at_least_one(row_base.astype(np.int32))}
    return Structure(arrays, {"n_wide_rows": int((~fits).sum()), "wide_nnz": int(lengths[~fits].sum())}, {})

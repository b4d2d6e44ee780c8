"""SELL-C-sigma: the one-time preparation of the spmv_sell_c_sigma kernel (Kreutzer et al., 2014)."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Gather, Structure, by_structure

_INT32_MAX = np.iinfo(np.int32).max


@by_structure(reads=("C", "SIGMA"))
def sell_c_sigma(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """Rows sorted by length (longest first, stable) within windows of SIGMA rows, then cut into slices of C
    consecutive sorted rows; each slice is padded to its longest row and stored column-major, so element j of
    sorted row r (slice s = r // C) lies at slice_ptr[s] + j * C + r % C and C consecutive threads read
    consecutive addresses. A last slice of fewer than C rows keeps the full C lanes (the missing rows are
    all padding).

    Arrays: `sell_cols` (int32; padding repeats the row's last column, or 0 for an empty or missing row),
    `sell_vals` (the values' storage type; padding 0), `slice_ptr` (int32, each slice's start), `slice_len`
    (int32, each slice's padded length), `row_perm` (int32, the original row of each sorted row), `row_len`
    (int32, each sorted row's true length: the kernel stops there, so padding is never multiplied).
    Symbols: `n_slices`, `sell_nnz` (the padded element count). The structure is made once (`by_structure`); the
    values are gathered into `sell_vals` at every call."""
    C, sigma = int(params["C"]), int(params["SIGMA"])
    if C <= 0 or sigma <= 0 or sigma % C:
        raise ValueError(f"SELL-C-sigma needs SIGMA a positive multiple of C (C={C}, SIGMA={sigma})")
    rowptr = rowptr.astype(np.int64)
    colind = np.asarray(colind)
    M = len(rowptr) - 1
    lengths = np.diff(rowptr)

    # sort by descending length within each window of SIGMA rows (stable: equal rows keep their order)
    window = np.arange(M, dtype=np.int64) // sigma
    perm = np.lexsort((-lengths, window)).astype(np.int64)
    sorted_len = lengths[perm]

    n_slices = -(-M // C)
    padded_len = np.zeros(n_slices * C, dtype=np.int64)
    padded_len[:M] = sorted_len
    slice_len = padded_len.reshape(n_slices, C).max(axis=1) if n_slices else np.zeros(0, np.int64)
    slice_ptr = np.zeros(n_slices + 1, dtype=np.int64)
    np.cumsum(slice_len * C, out=slice_ptr[1:])
    sell_nnz = int(slice_ptr[-1])
    if sell_nnz > _INT32_MAX:
        raise ValueError(f"SELL-C-sigma with C={C}, SIGMA={sigma} pads to {sell_nnz} elements: more than int32 indexes")

    sell_cols = np.zeros(max(sell_nnz, 1), dtype=np.int32)
    # padding columns: the row's last valid column (0 for empty rows and missing rows); filled per slot below
    last_col = np.zeros(n_slices * C, dtype=np.int32)
    nonempty = sorted_len > 0
    last_col[:M][nonempty] = colind[rowptr[perm[nonempty] + 1] - 1]
    slot_slice = np.repeat(np.arange(n_slices, dtype=np.int64), slice_len * C)
    slot_in = np.arange(sell_nnz, dtype=np.int64) - slice_ptr[:-1][slot_slice]
    slot_row = slot_slice * C + slot_in % C  # sorted row of each slot
    sell_cols[:sell_nnz] = last_col[slot_row]

    # the true entries: entry k of sorted row r goes to slice_ptr[r // C] + k * C + r % C
    nnz = int(rowptr[-1])
    src = dst = np.zeros(0, dtype=np.int64)
    if nnz:
        rows_sorted = np.repeat(np.arange(M, dtype=np.int64), sorted_len)
        first = np.cumsum(sorted_len) - sorted_len
        k = np.arange(nnz, dtype=np.int64) - np.repeat(first, sorted_len)
        src = np.repeat(rowptr[perm], sorted_len) + k
        dst = slice_ptr[rows_sorted // C] + k * C + rows_sorted % C
        sell_cols[dst] = colind[src]

    arrays = {"sell_cols": sell_cols,
              "slice_ptr": at_least_one(slice_ptr[:-1].astype(np.int32)),
              "slice_len": at_least_one(slice_len.astype(np.int32)),
              "row_perm": at_least_one(perm.astype(np.int32)), "row_len": at_least_one(sorted_len.astype(np.int32))}
    return Structure(arrays, {"n_slices": n_slices, "sell_nnz": sell_nnz},
                     {"sell_vals": Gather(max(sell_nnz, 1), dst, src)})

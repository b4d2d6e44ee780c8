"""One-time preparations of CSR SpMM kernels; their cost is measured and reported apart from the per-call time."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Structure, by_structure
from sparseditto.tools.matrices import sorted_unique


def row_group_keys(rowptr: np.ndarray, colind: np.ndarray, rows: int = 8) -> tuple[np.ndarray, np.ndarray, int]:
    """Each nonzero's (group of `rows` rows, column) pair as the key group * K + column, the sorted distinct keys,
    and K (any bound above the columns)."""
    colind = np.asarray(colind, dtype=np.int64)
    K = int(colind.max()) + 1 if len(colind) else 1
    groups = np.repeat(np.arange(len(rowptr) - 1, dtype=np.int64) // rows, np.diff(np.asarray(rowptr, dtype=np.int64)))
    keys = groups * K + colind
    return keys, sorted_unique(keys), K


@by_structure(reads=("ROWS",))
def row_group_union(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """For each group of R consecutive rows (R = the parameter ROWS, 8 where a kernel has none), the sorted union
    of their column indices, padded with the group's last column to a multiple of 16 (`group_cols`, group g at
    group_ptr[g] .. group_ptr[g+1]), and for every nonzero its place in its group's R x (max_union + 8) tile:
    (row % R) * (max_union + 8) + its position in the union (`nnz_tile_pos`), and per union entry the bits of
    the group's rows that hold it (`group_mask`, bit r for row Rg + r; 0 on padding), so that a kernel on CUDA
    cores multiplies present entries only and an Inf in B reaches only the rows that reference it. Each (row,
    column) must appear once: a repeat would take one tile place twice. Depends on the pattern only (made once per
    structure, `by_structure`); values stay in CSR."""
    rowptr = rowptr.astype(np.int64)
    M, rows = len(rowptr) - 1, params.get("ROWS", 8)
    n_groups = -(-M // rows)
    keys, union, K = row_group_keys(rowptr, colind, rows)
    group_of_nnz = keys // K
    nnz_slot_global = np.searchsorted(union, keys)
    union_group = union // K
    counts = np.bincount(union_group, minlength=n_groups)
    padded = -(-counts // 16) * 16
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(padded, out=starts[1:])
    union_start = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=union_start[1:])
    # each union entry's place in the padded list; padding repeats the group's last column (its weights are 0)
    place = starts[union_group] + (np.arange(len(union)) - union_start[union_group])
    group_cols = np.zeros(max(int(starts[-1]), 1), dtype=np.int32)
    last = np.zeros(n_groups, dtype=np.int64)
    last[counts > 0] = union[union_start[1:][counts > 0] - 1] % K
    group_cols[: int(starts[-1])] = np.repeat(last, padded)
    group_cols[place] = union % K
    max_union = int(padded.max()) if n_groups else 0
    row_in_group = np.repeat(np.arange(M, dtype=np.int64) % rows, np.diff(rowptr))
    slot = nnz_slot_global - union_start[group_of_nnz]
    placed = (starts[group_of_nnz] + slot) * rows + row_in_group  # (padded place, row) of each nonzero
    distinct = sorted_unique(placed)
    if len(distinct) != len(placed):
        raise ValueError("a (row, column) pair appears twice: a row group's tile holds one value per element")
    group_mask = np.bincount(distinct // rows, weights=np.left_shift(1, distinct % rows), minlength=len(group_cols))
    tile_pos = (row_in_group * (max_union + 8) + slot).astype(np.int32)
    arrays = {"group_cols": group_cols, "group_ptr": starts.astype(np.int32),
              "nnz_tile_pos": at_least_one(tile_pos), "group_mask": group_mask.astype(np.int32)}
    return Structure(arrays, {"n_groups": n_groups, "max_union": max_union}, gathers={})



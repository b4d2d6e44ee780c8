"""One-time format preparations a candidate may declare. Their cost is measured and reported apart.

Each takes the problem's host inputs and the candidate's parameters and returns extra arrays (passed
to kernels by name) and extra symbols (usable in launch expressions).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sparseditto.tools.families.base import Problem

Prepared = tuple[dict[str, np.ndarray], dict[str, int]]


def _long_row_chunks(problem: Problem, params: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, int], np.ndarray]:
    rowptr = problem.inputs["rowptr"].astype(np.int64)
    lengths = np.diff(rowptr)
    long_rows = np.flatnonzero(lengths > params["LONG_ROW"]).astype(np.int32)
    per_row = -(-lengths[long_rows] // params["CHUNK"])
    chunk_long_index = np.repeat(np.arange(len(long_rows), dtype=np.int32), per_row)
    first = np.cumsum(per_row) - per_row
    within = np.arange(int(per_row.sum())) - np.repeat(first, per_row)
    chunk_start = (np.repeat(rowptr[long_rows], per_row) + within * params["CHUNK"]).astype(np.int32)
    arrays = {
        "long_rows": long_rows if len(long_rows) else np.zeros(1, np.int32),
        "chunk_long_index": chunk_long_index if len(chunk_long_index) else np.zeros(1, np.int32),
        "chunk_start": chunk_start if len(chunk_start) else np.zeros(1, np.int32),
    }
    return arrays, {"n_long_rows": len(long_rows), "n_long_chunks": len(chunk_start)}, per_row


def long_row_chunks(problem: Problem, params: dict[str, int]) -> Prepared:
    """Rows longer than LONG_ROW, cut into chunks of CHUNK nonzeros (row index and start per chunk)."""
    arrays, symbols, _ = _long_row_chunks(problem, params)
    return arrays, symbols


def long_row_chunk_ptr(problem: Problem, params: dict[str, int]) -> Prepared:
    """long_row_chunks plus long_chunk_ptr (long row i owns chunks long_chunk_ptr[i] .. long_chunk_ptr[i+1])
    and multi_rows, the indices i of the long rows with more than one chunk (n_multi_rows of them)."""
    arrays, symbols, per_row = _long_row_chunks(problem, params)
    ptr = np.zeros(len(per_row) + 1, dtype=np.int64)
    np.cumsum(per_row, out=ptr[1:])
    arrays["long_chunk_ptr"] = ptr.astype(np.int32)
    multi = np.flatnonzero(per_row > 1).astype(np.int32)
    arrays["multi_rows"] = multi if len(multi) else np.zeros(1, np.int32)
    symbols["n_multi_rows"] = len(multi)
    return arrays, symbols


def row_group_keys(rowptr: np.ndarray, colind: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each nonzero's (group of 8 rows, column) pair as the key group * K + column, the sorted distinct keys,
    and K (any bound above the columns)."""
    colind = np.asarray(colind, dtype=np.int64)
    K = int(colind.max()) + 1 if len(colind) else 1
    groups = np.repeat(np.arange(len(rowptr) - 1, dtype=np.int64) // 8, np.diff(np.asarray(rowptr, dtype=np.int64)))
    keys = groups * K + colind
    return keys, np.unique(keys), K


def row_group_union(problem: Problem, params: dict[str, int]) -> Prepared:
    """For each group of 8 consecutive rows, the sorted union of their column indices, padded with the group's
    last column to a multiple of 16 (`group_cols`, group g at group_ptr[g] .. group_ptr[g+1]), and for every
    nonzero its place in its group's 8 x (max_union + 8) tile: (row % 8) * (max_union + 8) + its position in
    the union (`nnz_tile_pos`). Depends on the pattern only; values stay in CSR."""
    rowptr = problem.inputs["rowptr"].astype(np.int64)
    M = len(rowptr) - 1
    n_groups = -(-M // 8)
    keys, union, K = row_group_keys(rowptr, problem.inputs["colind"])
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
    row_in_group = np.repeat(np.arange(M, dtype=np.int64) % 8, np.diff(rowptr))
    tile_pos = (row_in_group * (max_union + 8) + nnz_slot_global - union_start[group_of_nnz]).astype(np.int32)
    arrays = {"group_cols": group_cols, "group_ptr": starts.astype(np.int32),
              "nnz_tile_pos": tile_pos if len(tile_pos) else np.zeros(1, np.int32)}
    return arrays, {"n_groups": n_groups, "max_union": max_union}


PREPARATIONS: dict[str, Callable[[Problem, dict[str, int]], Prepared]] = {
    "long_row_chunk_ptr": long_row_chunk_ptr,
    "row_group_union": row_group_union,
}

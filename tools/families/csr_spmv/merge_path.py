"""Merge-path tiles: the one-time preparation of the spmv_merge_path kernel (Merrill and Garland, SC 2016).

The work of y = A x is the merge of two sorted lists, the row ends rowptr[1..M] and the nonzero indices
0..nnz-1: a row's end comes after its last nonzero, so merge item p (0-based) is row end r when
p = r + rowptr[r + 1] and a nonzero otherwise. Cutting the merged list into tiles of BLOCK * ITEMS items gives
every block the same work whatever the row lengths; this preparation finds where each tile starts (the search
a kernel would otherwise repeat at every call) and which rows cross a tile boundary.
"""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem
from sparseditto.tools.families.csr_common import at_least_one


def merge_coordinates(rowptr: np.ndarray, diagonals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows ended, nonzeros consumed) after the first d merge items, for each d in `diagonals`: row end r is
    among them when r + rowptr[r + 1] < d, a strictly increasing test in r, hence one sorted search."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    ends = np.arange(len(rowptr) - 1, dtype=np.int64) + rowptr[1:]
    rows = np.searchsorted(ends, diagonals, side="left").astype(np.int64)
    return rows, np.asarray(diagonals, dtype=np.int64) - rows


def merge_path(problem: Problem, params: dict[str, int]) -> Prepared:
    """Tiles of BLOCK * ITEMS merge items (the last one shorter) and the rows that cross their boundaries.

    Arrays (int32, each at least one element long: a zero-length device array cannot be passed):
    - `tile_row`, `tile_nz` (n_tiles + 1): tile b covers rows ended tile_row[b] .. tile_row[b+1] and nonzeros
      tile_nz[b] .. tile_nz[b+1]; the last entries are (M, nnz);
    - `fix_tile` (n_fix): the tiles whose first row ends in them but began in an earlier tile (its nonzeros
      before tile_nz[b]); the kernel leaves that row to the fix-up launch;
    - `fix_first` (n_fix): for each, the first tile whose last row is that row: the fix-up adds the tiles'
      carries from there up to the tile before fix_tile.
    Symbols: `n_tiles`, `n_fix`."""
    tile = int(params["BLOCK"]) * int(params["ITEMS"])
    if tile <= 0:
        raise ValueError(f"merge-path tiles need BLOCK * ITEMS > 0 (BLOCK={params['BLOCK']}, ITEMS={params['ITEMS']})")
    rowptr = np.asarray(problem.inputs["rowptr"], dtype=np.int64)
    M, nnz = len(rowptr) - 1, int(rowptr[-1])
    items = M + nnz
    n_tiles = max(1, -(-items // tile))
    tile_row, tile_nz = merge_coordinates(rowptr, np.minimum(np.arange(n_tiles + 1, dtype=np.int64) * tile, items))

    first_row, next_row = tile_row[:-1], tile_row[1:]
    # a tile's first row ends in it (the tile consumes its row end) and has nonzeros before the tile
    ends_here = first_row < next_row
    began_before = rowptr[np.minimum(first_row, M)] < tile_nz[:-1]
    fix_tile = np.flatnonzero(ends_here & began_before)
    # the tiles whose open row at the end is that row are contiguous: the first one is found by a sorted search
    fix_first = np.searchsorted(next_row, first_row[fix_tile], side="left")

    arrays = {"tile_row": tile_row.astype(np.int32), "tile_nz": tile_nz.astype(np.int32),
              "fix_tile": at_least_one(fix_tile.astype(np.int32)), "fix_first": at_least_one(fix_first.astype(np.int32))}
    return arrays, {"n_tiles": n_tiles, "n_fix": len(fix_tile)}

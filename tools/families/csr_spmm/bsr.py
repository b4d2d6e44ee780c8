"""BSR: the one-time preparation of the spmm_bsr_tc kernel, dense BR x BC blocks that tensor cores multiply whole."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem
from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.matrices import sorted_unique

_INT32_MAX = np.iinfo(np.int32).max


def _block_keys(rowptr: np.ndarray, colind: np.ndarray, BR: int, BC: int) -> tuple[np.ndarray, int, np.ndarray]:
    """Each nonzero's block as the key block_row * block_cols + block_col (rows and columns of blocks in
    order), block_cols (any bound above the block columns), and each nonzero's row."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    colind = np.asarray(colind, dtype=np.int64)
    block_cols = int(colind.max()) // BC + 1 if len(colind) else 1
    rows = np.repeat(np.arange(len(rowptr) - 1, dtype=np.int64), np.diff(rowptr))
    return (rows // BR) * block_cols + colind // BC, block_cols, rows


def block_fill(rowptr: np.ndarray, colind: np.ndarray, BR: int, BC: int) -> float:
    """Stored values over true nonzeros of the BR x BC blocking (1 for a matrix of full blocks): the bytes and
    products a BSR kernel spends per useful one, so a planner can refuse BSR before preparing it."""
    keys, _, _ = _block_keys(rowptr, colind, BR, BC)
    return len(sorted_unique(keys)) * BR * BC / max(len(keys), 1)


def bsr_blocks(problem: Problem, params: dict[str, int]) -> Prepared:
    """CSR cut into BR x BC blocks on a grid anchored at (0, 0); every block holding a nonzero is stored dense,
    zeros filled, blocks of a block row sorted by block column. The last block row and column may reach past
    M and K (their extra rows and columns hold zeros).

    Arrays: `bsr_ptr` (int32, n_brows + 1: block row i holds blocks bsr_ptr[i] .. bsr_ptr[i+1]), `bsr_col`
    (int32, each block's block column: its columns start at bsr_col[b] * BC), `bsr_vals` (the values' storage
    type, row-major within a block: element (r, c) of block b at (b * BR + r) * BC + c).
    Symbols: `n_brows`, `n_blocks`, `fill_permille` (1000 x stored values over nonzeros, rounded up: what
    the planner refuses BSR by when the blocks are mostly zeros)."""
    BR, BC = int(params["BR"]), int(params["BC"])
    if BR <= 0 or BC <= 0:
        raise ValueError(f"BSR blocks need positive BR and BC (BR={BR}, BC={BC})")
    rowptr = problem.inputs["rowptr"].astype(np.int64)
    colind = np.asarray(problem.inputs["colind"], dtype=np.int64)
    values = np.asarray(problem.inputs["values"])
    M = len(rowptr) - 1
    n_brows = -(-M // BR)
    keys, block_cols, rows = _block_keys(rowptr, colind, BR, BC)
    blocks = sorted_unique(keys)
    n_blocks = len(blocks)
    if n_blocks > _INT32_MAX:
        raise ValueError(f"{n_blocks} blocks of {BR} x {BC}: more than int32 block indexes")
    bsr_ptr = np.zeros(n_brows + 1, dtype=np.int64)
    np.cumsum(np.bincount(blocks // block_cols, minlength=n_brows), out=bsr_ptr[1:])
    place = np.searchsorted(blocks, keys) * (BR * BC) + (rows % BR) * BC + colind % BC
    bsr_vals = np.zeros(max(n_blocks, 1) * BR * BC, dtype=values.dtype)
    bsr_vals[place] = values
    bsr_col = at_least_one((blocks % block_cols).astype(np.int32))
    stored = n_blocks * BR * BC
    arrays = {"bsr_ptr": bsr_ptr.astype(np.int32), "bsr_col": bsr_col, "bsr_vals": bsr_vals}
    return arrays, {"n_brows": n_brows, "n_blocks": n_blocks, "fill_permille": -(-1000 * stored // max(len(keys), 1))}

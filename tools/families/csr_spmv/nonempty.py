"""The nonempty rows of a CSR matrix: the one-time preparation of the spmv_csr_nonempty kernel.

On a matrix whose rows are mostly empty (hypersparse, tall LP matrices, graphs with isolated vertices) a kernel
that gives every row a group of lanes spends nearly all its warps reading two equal row pointers and storing a
zero: 12.5M rows of which 98% are empty took 1.5 ms at 16 lanes per row, 12 times cuSPARSE
(evals/results/issue14_h200/run_session16_hypersparse_1m-spmv-fp32_report.md). Listing the nonempty rows once
lets the walk touch only those, and lets the empty rows be written as zeros with coalesced stores.
"""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem
from sparseditto.tools.families.csr_common import at_least_one

FILL_ROWS_PER_THREAD = 16  # a zero-filling block owns 16 * BLOCK consecutive rows (the kernel's SD_FILL_ROWS)


def nonempty_rows(problem: Problem, params: dict[str, int]) -> Prepared:
    """The nonempty rows in the order the walk takes them, and the sorted list the fill reads.

    Arrays (int32, each at least one element long: a zero-length device array cannot be passed):
    - `walk_row`, `walk_start`, `walk_end` (n_long + n_short): the rows longer than LONG_ROW first (a warp
      each), then the other nonempty rows (GROUP lanes each), both in increasing row order; entry i is row
      walk_row[i] with nonzeros walk_start[i] .. walk_end[i] - 1;
    - `fill_rows` (n_long + n_short): every nonempty row, in increasing order;
    - `fill_first` (n_fill_blocks + 1): block f of the fill owns rows f * F .. (f + 1) * F - 1 (F = 16 BLOCK),
      and fill_rows[fill_first[f] .. fill_first[f+1]) are the nonempty ones among them.
    Symbols: `n_long`, `n_short`, `n_fill_blocks`."""
    rowptr = np.asarray(problem.inputs["rowptr"], dtype=np.int64)
    M = len(rowptr) - 1
    lengths = np.diff(rowptr)
    rows = np.flatnonzero(lengths)
    is_long = lengths[rows] > params["LONG_ROW"]
    walk = np.concatenate([rows[is_long], rows[~is_long]])
    fill = FILL_ROWS_PER_THREAD * int(params["BLOCK"])
    n_fill_blocks = -(-M // fill)
    fill_first = np.searchsorted(rows, np.arange(n_fill_blocks + 1, dtype=np.int64) * fill, side="left")
    arrays = {"walk_row": walk, "walk_start": rowptr[walk], "walk_end": rowptr[walk + 1], "fill_rows": rows,
              "fill_first": fill_first}
    arrays = {name: at_least_one(a.astype(np.int32)) for name, a in arrays.items()}
    return arrays, {"n_long": int(is_long.sum()), "n_short": int((~is_long).sum()), "n_fill_blocks": n_fill_blocks}

"""The nonempty rows of a CSR matrix: the one-time preparation of the spmv_csr_nonempty kernel.

On a matrix whose rows are mostly empty (hypersparse, tall LP matrices, graphs with isolated vertices) a kernel
that gives every row a group of lanes spends nearly all its warps reading two equal row pointers and storing a
zero: 12.5M rows of which 92% are empty took 1.5 ms at 16 lanes per row, 12 times cuSPARSE
(evals/results/issue14_h200/run_session16_hypersparse_1m-spmv-fp32_report.md). Listing the nonempty rows once
lets the walk touch only those, and lets the empty rows be written as zeros with coalesced stores.
"""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem
from sparseditto.tools.families.csr_common import at_least_one

FILL_ROWS_PER_THREAD = 8  # a zero-filling block owns 8 * BLOCK consecutive rows (the kernel's SD_FILL_ROWS)


def nonempty_rows(problem: Problem, params: dict[str, int]) -> Prepared:
    """The nonempty rows, their extents, and which of them each zero-filling block's range holds.

    Arrays (int32, each at least one element long: a zero-length device array cannot be passed):
    - `nz_rows` (n_nonempty): the nonempty rows in increasing order;
    - `nz_ptr` (n_nonempty + 1): nonempty row i holds the nonzeros nz_ptr[i] .. nz_ptr[i+1] - 1. These are the
      row pointers of those rows: the empty rows between two of them start and end where the next one starts;
    - `fill_first` (n_fill_blocks + 1): block f of the fill owns rows f * F .. (f + 1) * F - 1 (F = 8 BLOCK), and
      nz_rows[fill_first[f] .. fill_first[f+1]) are the nonempty ones among them.
    Symbols: `n_nonempty`, `n_fill_blocks`."""
    rowptr = np.asarray(problem.inputs["rowptr"], dtype=np.int64)
    M = len(rowptr) - 1
    rows = np.flatnonzero(rowptr[1:] != rowptr[:-1])
    nz_ptr = np.empty(len(rows) + 1, dtype=np.int64)
    nz_ptr[:-1] = rowptr[rows]
    nz_ptr[-1] = rowptr[rows[-1] + 1] if len(rows) else rowptr[0]
    fill = FILL_ROWS_PER_THREAD * int(params["BLOCK"])
    n_fill_blocks = -(-M // fill)
    fill_first = np.searchsorted(rows, np.arange(n_fill_blocks + 1, dtype=np.int64) * fill, side="left")
    arrays = {"nz_rows": at_least_one(rows.astype(np.int32)), "nz_ptr": nz_ptr.astype(np.int32),
              "fill_first": fill_first.astype(np.int32)}
    return arrays, {"n_nonempty": len(rows), "n_fill_blocks": n_fill_blocks}

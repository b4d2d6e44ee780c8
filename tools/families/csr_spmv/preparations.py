"""One-time preparations of CSR SpMV kernels; their cost is measured and reported apart from the per-call time."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem
from sparseditto.tools.families.csr_common import at_least_one


def long_row_chunk_ptr(problem: Problem, params: dict[str, int]) -> Prepared:
    """Rows longer than LONG_ROW, cut into chunks of CHUNK nonzeros: each chunk's long-row index and start
    (`chunk_long_index`, `chunk_start`), the long rows (`long_rows`), long row i's chunks
    long_chunk_ptr[i] .. long_chunk_ptr[i+1], and `multi_rows`, the indices i of the long rows with more than
    one chunk (n_multi_rows of them)."""
    rowptr = problem.inputs["rowptr"].astype(np.int64)
    lengths = np.diff(rowptr)
    long_rows = np.flatnonzero(lengths > params["LONG_ROW"]).astype(np.int32)
    per_row = -(-lengths[long_rows] // params["CHUNK"])
    chunk_long_index = np.repeat(np.arange(len(long_rows), dtype=np.int32), per_row)
    first = np.cumsum(per_row) - per_row
    within = np.arange(int(per_row.sum())) - np.repeat(first, per_row)
    chunk_start = (np.repeat(rowptr[long_rows], per_row) + within * params["CHUNK"]).astype(np.int32)
    ptr = np.zeros(len(per_row) + 1, dtype=np.int64)
    np.cumsum(per_row, out=ptr[1:])
    multi = np.flatnonzero(per_row > 1).astype(np.int32)

    arrays = {"long_rows": at_least_one(long_rows), "chunk_long_index": at_least_one(chunk_long_index),
              "chunk_start": at_least_one(chunk_start), "long_chunk_ptr": ptr.astype(np.int32),
              "multi_rows": at_least_one(multi)}
    return arrays, {"n_long_rows": len(long_rows), "n_long_chunks": len(chunk_start), "n_multi_rows": len(multi)}

"""BSR for SpMV on CUDA cores (the spmv_bsr kernel): B x B blocks stored dense, one column index per block, and a bit
mask per block of the entries the matrix holds, so that a block's filled-in zeros are never multiplied (0 * Inf would
be NaN where the CSR product is finite)."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Gather, Structure, by_structure
from sparseditto.tools.matrices import sorted_unique

MASK_WORDS = {16: np.uint16, 32: np.uint32, 64: np.uint64}


def mask_bits(block: int) -> int:
    """Bits of one block's mask word, the kernel's bsr_mask_t for B: B * B bits needed, 16 at least."""
    return next(bits for bits in MASK_WORDS if bits >= block * block)


@by_structure(reads=("B",))
def bsr_masked(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """The matrix cut into B x B blocks on a grid anchored at (0, 0) (the last block row and column may reach past
    M and K); every block holding a nonzero is stored, its blocks in block-row order, by block column within one.

    Arrays: `bsr_ptr` (int32, n_brows + 1: block row i holds blocks bsr_ptr[i] .. bsr_ptr[i + 1]), `bsr_col`
    (int32: block b's columns start at bsr_col[b] * B), `bsr_vals` (the values' storage type, row-major within a
    block: element (r, c) of block b at (b * B + r) * B + c, 0 where the matrix has no entry), `bsr_mask` (one
    word of mask_bits(B) bits per block: bit r * B + c set when element (r, c) is an entry of the matrix).
    Symbols: `n_brows`, `n_blocks`. Each (row, column) must appear once: a repeated one is refused (a block holds
    one value per element). The structure is made once (`by_structure`); the values are gathered at every call."""
    B = int(params["B"])
    if not 1 <= B <= 8:
        raise ValueError(f"BSR blocks for SpMV need 1 <= B <= 8 (a 64-bit mask per block), not {B}")
    rowptr = rowptr.astype(np.int64)
    M = len(rowptr) - 1
    nnz = int(rowptr[-1])
    colind = colind[:nnz].astype(np.int64)
    rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(rowptr))
    # columns strictly rising within every row rule repeats out without a sort (canonical CSR)
    rising = np.diff(colind) > 0
    rising[rowptr[1:-1][(rowptr[1:-1] > 0) & (rowptr[1:-1] < nnz)] - 1] = True  # a row's first entry follows no other
    if not rising.all() and len(sorted_unique(rows * (int(colind.max()) + 1) + colind)) != nnz:
        raise ValueError("a (row, column) pair appears twice: a BSR block stores one value per element")
    block_cols = int(colind.max()) // B + 1 if nnz else 1
    keys = (rows // B) * block_cols + colind // B
    # a block row's keys are B rising runs (one per row): the stable sort (a merge sort) takes them nearly linearly
    order = np.argsort(keys, kind="stable")
    starts = np.concatenate([[True], keys[order][1:] != keys[order][:-1]]) if nnz else np.zeros(0, bool)
    block_of = np.empty(nnz, dtype=np.int64)
    block_of[order] = np.cumsum(starts) - 1
    block_keys = keys[order][starts]
    n_blocks, n_brows = len(block_keys), -(-M // B)
    bsr_ptr = np.zeros(n_brows + 1, dtype=np.int64)
    np.cumsum(np.bincount(block_keys // block_cols, minlength=n_brows), out=bsr_ptr[1:])
    bit = (rows % B) * B + colind % B
    # each (block, bit) once, so a word's sum of its bits is their OR; two 32-bit halves keep the float64 sums exact
    size = max(n_blocks, 1)
    low = np.bincount(block_of, weights=np.where(bit < 32, np.exp2(np.minimum(bit, 31)), 0.0), minlength=size)
    high = np.bincount(block_of, weights=np.where(bit >= 32, np.exp2(np.maximum(bit - 32, 0)), 0.0), minlength=size)
    mask = (high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)
    arrays = {"bsr_ptr": bsr_ptr.astype(np.int32), "bsr_col": at_least_one((block_keys % block_cols).astype(np.int32)),
              "bsr_mask": mask.astype(MASK_WORDS[mask_bits(B)])}
    gathers = {"bsr_vals": Gather(size * B * B, block_of * (B * B) + bit, np.arange(nnz))}
    return Structure(arrays, {"n_brows": n_brows, "n_blocks": n_blocks}, gathers)

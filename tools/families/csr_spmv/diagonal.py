"""Diagonal (DIA) storage of a CSR matrix for the spmv_dia kernel: the densest diagonals in DIA, the rest in CSR."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.csr_common import at_least_one
from sparseditto.tools.families.structure_cache import Gather, Structure, by_structure


def mask_bits(max_diags: int) -> int:
    """Bits of one dia_mask word: the kernel's dia_mask_t for MAX_DIAGS."""
    return 8 if max_diags <= 8 else 16 if max_diags <= 16 else 32


@by_structure(reads=("MAX_DIAGS",))
def diagonals(rowptr: np.ndarray, colind: np.ndarray, params: dict[str, int]) -> Structure:
    """The MAX_DIAGS densest diagonals (offset d = col - row) of the matrix in DIA, every other nonzero in a CSR
    remainder, so that any matrix is exact and a stencil or banded matrix is all DIA.

    Arrays (each at least one element long, a zero-length device array cannot be passed):
    - `dia_offsets` (int32, n_diags): the stored diagonals' offsets, ascending;
    - `dia_vals` (the values' storage type, n_diags * M): diagonal k's value for row r at k * M + r, 0 where the
      diagonal has no entry in that row;
    - `dia_mask` (ceil(n_diags / W) * M words of W = mask_bits(MAX_DIAGS) bits: uint8 up to 8 diagonals, uint16
      up to 16, else uint32): bit k % W of dia_mask[(k / W) * M + r] is set when diagonal k has an entry in row r;
      the kernel multiplies only those, so an absent entry never forms 0 * x (NaN, Inf in x stay in the rows that
      reference them). The narrow words spare a stencil's rows 2-3 of their 36-44 bytes;
    - `rowptr_rest` (int32, M + 1), `colind_rest` (int32), `values_rest`: the remainder in CSR, row order kept.
    Symbols: `n_diags`, `rest_nnz`. A repeated (row, column) entry keeps its first copy in DIA, the others in the
    remainder. The structure is made once (`by_structure`); the values are gathered into `dia_vals` and
    `values_rest` at every call."""
    rowptr = rowptr.astype(np.int64)
    M = len(rowptr) - 1
    nnz = int(rowptr[-1])
    colind = colind[:nnz].astype(np.int64)
    rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(rowptr))
    # offsets shifted to be >= 0: counted by a bincount and found by a table, linear in nnz where the range of
    # offsets is not much wider than nnz (sorting 20M offsets took seconds); by a sort where it is (hypersparse)
    shift = M - 1 if M else 0
    shifted = colind - rows + shift
    span = int(shifted.max()) + 1 if nnz else 1
    by_table = span <= 4 * nnz + 1024
    if by_table:
        counts_all = np.bincount(shifted, minlength=span)
        distinct = np.flatnonzero(counts_all)
        counts = counts_all[distinct]
    else:
        distinct, counts = np.unique(shifted, return_counts=True)
    max_diags = int(params["MAX_DIAGS"])
    # densest first, ties to the offset nearest the main diagonal, then the lower offset
    order = np.lexsort((distinct, np.abs(distinct - shift), -counts))[:max_diags]
    stored = np.sort(distinct[order])  # shifted offsets, ascending
    offsets = stored - shift
    n_diags = len(offsets)

    if by_table:
        lookup = np.full(span, -1, dtype=np.int32)  # shifted offset -> its slot, -1 where not stored
        lookup[stored] = np.arange(n_diags)
        slot = lookup[shifted].astype(np.int64)
    else:
        pos = np.searchsorted(stored, shifted)
        found = (pos < n_diags) & (stored[np.minimum(pos, max(n_diags - 1, 0))] == shifted) if n_diags \
            else np.zeros(nnz, bool)
        slot = np.where(found, pos, -1)
    in_dia = slot >= 0
    # a duplicate (row, diagonal) pair: only its first copy goes to DIA. Columns strictly rising within every row
    # (canonical CSR) rule duplicates out without sorting
    rising = np.diff(colind) > 0
    rising[rowptr[1:-1][(rowptr[1:-1] > 0) & (rowptr[1:-1] < nnz)] - 1] = True  # a row's first entry follows no other
    duplicates = not rising.all()
    if duplicates and in_dia.any():
        idx = np.flatnonzero(in_dia)
        _, first_pos = np.unique(rows[idx] * n_diags + slot[idx], return_index=True)
        first = np.zeros(nnz, bool)
        first[idx[first_pos]] = True
        in_dia &= first

    bits = mask_bits(max_diags)
    word = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
    r, k = rows[in_dia], slot[in_dia]
    # each (row, diagonal) at most once now, so each word's bits are distinct and their sum is their OR
    mask_size = max(-(-n_diags // bits) * M, 1)
    dia_mask = np.bincount((k // bits) * M + r, weights=np.left_shift(1, k % bits).astype(np.float64),
                           minlength=mask_size).astype(word)

    rest = np.flatnonzero(~in_dia)
    rowptr_rest = np.zeros(M + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows[rest], minlength=M), out=rowptr_rest[1:])
    rest_nnz = len(rest)

    arrays = {
        "dia_offsets": at_least_one(offsets.astype(np.int32)),
        "dia_mask": dia_mask,
        "rowptr_rest": rowptr_rest,
        "colind_rest": at_least_one(colind[rest].astype(np.int32)),
    }
    gathers = {"dia_vals": Gather(max(n_diags * M, 1), k * M + r, np.flatnonzero(in_dia)),
               "values_rest": Gather(max(rest_nnz, 1), np.arange(rest_nnz), rest)}
    return Structure(arrays, {"n_diags": n_diags, "rest_nnz": rest_nnz}, gathers)

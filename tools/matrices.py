"""Sparse matrices for a spec: seeded generators for each row-length distribution, and file loading.

Every matrix comes out as canonical CSR (int32 indices, columns sorted and unique within each row),
the form the CSR families promise their kernels.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.io
import scipy.sparse as sp

from sparseditto.errors import SpecError

if TYPE_CHECKING:
    from sparseditto.tools.families.csr_common import MatrixFilePattern, UnstructuredPattern


def row_lengths(pattern: UnstructuredPattern, M: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """Nonzeros per row. power_law keeps the mean of the other distributions with a heavy tail."""
    mean = pattern.mean_row_length(K)
    if pattern.distribution in {"uniform", "banded"}:
        base = int(np.floor(mean))
        lengths = np.full(M, base, dtype=np.int64)
        extra = int(round((mean - base) * M))
        if extra:
            lengths[rng.choice(M, size=extra, replace=False)] += 1
        return np.minimum(lengths, K)
    # P(length = d) ~ d^-a: Pareto with tail exponent a - 1, rescaled to the requested mean, capped at K
    a = pattern.power_law_exponent
    raw = rng.pareto(a - 1.0, size=M) + 1.0
    lengths = np.maximum(1, np.floor(raw * (mean / raw.mean()))).astype(np.int64)
    lengths = np.minimum(lengths, K)
    target = int(round(mean * M))
    # fix the total to exactly mean*M by adjusting random rows, so runs are comparable across seeds
    diff = target - int(lengths.sum())
    while diff != 0:
        idx = rng.integers(0, M, size=min(abs(diff), M))
        step = 1 if diff > 0 else -1
        ok = (lengths[idx] + step >= 1) & (lengths[idx] + step <= K)
        idx = np.unique(idx[ok])[: abs(diff)]
        lengths[idx] += step
        diff -= step * len(idx)
    return lengths


def sorted_distinct_columns(lengths: np.ndarray, K: int, rng: np.random.Generator, band_center: np.ndarray | None) -> np.ndarray:
    """Distinct sorted column indices per row, vectorised over all rows.

    Draw L values in [0, K-L] per row, sort them within the row and add 0..L-1: the result is sorted
    and distinct. For banded rows the values are drawn from a window around the diagonal instead.
    """
    nnz = int(lengths.sum())
    rows = np.repeat(np.arange(len(lengths)), lengths)
    span = np.repeat(K - lengths + 1, lengths)
    if band_center is None:
        draws = (rng.random(nnz) * span).astype(np.int64)
    else:
        width = np.repeat(np.minimum(2 * lengths, K - lengths + 1), lengths)
        lo = np.clip(np.repeat(band_center, lengths) - width // 2, 0, span - width)
        draws = lo + (rng.random(nnz) * width).astype(np.int64)
    keys = rows * np.int64(K) + draws
    keys.sort()
    draws = keys - rows * np.int64(K)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return draws + (np.arange(nnz) - starts)


def generate_csr(pattern: UnstructuredPattern, M: int, K: int, dtype: np.dtype, rng: np.random.Generator) -> sp.csr_matrix:
    """A random CSR matrix with values uniform in [-1, 1), rounded to `dtype` (fp32/fp16, or fp32 holding bf16 values)."""
    lengths = row_lengths(pattern, M, K, rng)
    center = (np.arange(M) * K) // M if pattern.distribution == "banded" else None
    cols = sorted_distinct_columns(lengths, K, rng, center).astype(np.int32)
    rowptr = np.zeros(M + 1, dtype=np.int64)
    np.cumsum(lengths, out=rowptr[1:])
    values = rng.uniform(-1.0, 1.0, size=int(rowptr[-1])).astype(np.float32)
    return sp.csr_matrix((values, cols, rowptr.astype(np.int32)), shape=(M, K))


def load_matrix_file(pattern: MatrixFilePattern) -> sp.csr_matrix:
    """Read a Matrix Market or .npz matrix; pattern-only files get values uniform in [-1, 1) later. A file is
    parsed once per process (and again when it changes); each caller gets its own copy to modify."""
    path = Path(pattern.path)
    if not path.is_file():
        raise SpecError(f"pattern.path: no such matrix file {path}")
    return _read_matrix(str(path.resolve()), path.stat().st_mtime_ns).copy()


@functools.lru_cache(maxsize=4)
def _read_matrix(path_name: str, mtime_ns: int) -> sp.csr_matrix:
    path = Path(path_name)
    try:
        if path.suffix == ".npz":
            mat = sp.load_npz(path)
        elif path.suffix in {".mtx", ".mm"} or path.name.endswith(".mtx.gz"):
            mat = scipy.io.mmread(path)
        else:
            raise SpecError(f"pattern.path: {path.name}: expected a .mtx (Matrix Market) or .npz (SciPy sparse) file")
    except (ValueError, OSError) as exc:
        raise SpecError(f"pattern.path: cannot read {path.name}: {exc}") from None
    mat = sp.csr_matrix(mat)
    mat.sum_duplicates()
    mat.sort_indices()
    return mat


def matrix_shape(pattern: MatrixFilePattern) -> tuple[int, int, int]:
    """(rows, cols, nonzeros) of a matrix file, from the Matrix Market header when it gives them all (a general
    matrix; a symmetric one stores only one triangle), else from the matrix itself."""
    path = Path(pattern.path)
    if path.suffix in {".mtx", ".mm"} and path.is_file():
        rows, cols, entries, _, _, symmetry = scipy.io.mminfo(path)
        if symmetry == "general":
            return int(rows), int(cols), int(entries)
    mat = load_matrix_file(pattern)
    return mat.shape[0], mat.shape[1], mat.nnz

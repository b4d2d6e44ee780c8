"""Sparse matrices for a spec: seeded generators for each row-length distribution, and file loading.

Every matrix comes out as canonical CSR (int32 indices, columns sorted and unique within each row),
the form the CSR families promise their kernels.
"""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.io
import scipy.sparse as sp

from sparseditto.errors import SpecError, clip, clip_path

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
        idx = sorted_unique(idx[ok])[: abs(diff)]
        lengths[idx] += step
        diff -= step * len(idx)
    return lengths


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique by a sort and a mask: NumPy's hashing unique took 40 s on 33M keys that this sorts in 1.5 s."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


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


# what reading a matrix file may take, per stored entry (row, column and value as read, the CSR copy, sorting)
# and per row; a file that would take more than half this machine's memory is refused before it is read
LOAD_BYTES_PER_ENTRY = 64
LOAD_BYTES_PER_ROW = 16
INT32_MAX = 2**31 - 1
MATRIX_SUFFIXES = "a .mtx (Matrix Market) or .npz (scipy.sparse.save_npz) file"


def _refuse(path: Path, problem: str) -> SpecError:
    return SpecError(f"pattern.path: {clip(path.name)}: {problem}", field="pattern.path")


def _kind(path: Path) -> str:
    if path.suffix == ".npz":
        return "npz"
    if path.suffix in {".mtx", ".mm"} or path.name.endswith(".mtx.gz"):
        return "mtx"
    raise _refuse(path, f"expected {MATRIX_SUFFIXES}")


def _existing(path: Path) -> Path:
    try:
        if path.is_file():
            return path
    except (OSError, ValueError):  # a name the OS refuses (embedded NUL, too long)
        pass
    raise SpecError(f"pattern.path: no such matrix file {clip_path(path)}", field="pattern.path")


def _npz_header(path: Path) -> tuple[int, int, int, int]:
    """(rows, columns, stored entries, bytes of its arrays once uncompressed) from a SciPy .npz, reading only
    the small `shape` array and the header of the `data` array."""
    try:
        with zipfile.ZipFile(path) as z:
            members = {i.filename: i for i in z.infolist()}
            if "shape.npy" not in members or "format.npy" not in members or "data.npy" not in members:
                raise _refuse(path, "not a SciPy sparse matrix (no shape, format or data array); save one with scipy.sparse.save_npz")
            if members["shape.npy"].file_size > 4096 or members["format.npy"].file_size > 4096:
                raise _refuse(path, "not a SciPy sparse matrix (its shape or format array is not small)")
            with z.open("shape.npy") as f:
                shape = np.lib.format.read_array(f, allow_pickle=False)
            with z.open("data.npy") as f:
                version = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                data_shape, _, _ = read_header(f)
            unpacked = sum(i.file_size for i in members.values())
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything a broken or hostile file makes zipfile or numpy raise
        raise _refuse(path, f"not a readable .npz file ({type(exc).__name__}: {clip(str(exc))})") from None
    if shape.ndim != 1 or shape.size != 2 or shape.dtype.kind not in "iu":
        raise _refuse(path, f"not a SciPy sparse matrix (its shape array is {clip(repr(shape.tolist()))})")
    return int(shape[0]), int(shape[1]), int(np.prod(data_shape, dtype=np.int64)), unpacked


def matrix_file_header(path: Path) -> tuple[int, int, int]:
    """(rows, columns, an upper bound of the nonzeros) of a matrix file from its header alone; a file that is no
    matrix, an empty or all-zero one, or one too large for this machine is a SpecError naming the file."""
    from sparseditto.spec import describe_bytes, host_memory_bytes

    path = _existing(Path(path))
    kind = _kind(path)
    if kind == "npz":
        rows, cols, entries, unpacked = _npz_header(path)
        load = 3 * unpacked
    else:
        try:
            rows, cols, entries, fmt, _, symmetry = scipy.io.mminfo(path)
        except Exception as exc:  # noqa: BLE001 - whatever the Matrix Market reader makes of a broken file
            raise _refuse(path, f"not a readable Matrix Market file ({type(exc).__name__}: {clip(str(exc))})") from None
        rows, cols, entries = int(rows), int(cols), int(entries)
        if symmetry != "general":
            entries *= 2  # one triangle stored: both once read
        load = LOAD_BYTES_PER_ENTRY * entries + LOAD_BYTES_PER_ROW * rows + path.stat().st_size
    if rows < 1 or cols < 1:
        raise _refuse(path, f"the matrix is {rows} x {cols}: it needs at least one row and one column")
    if entries < 1:
        raise _refuse(path, f"the {rows} x {cols} matrix has no nonzeros: nothing to compute")
    if max(rows, cols, entries) > INT32_MAX:
        raise _refuse(path, f"{rows} x {cols} with {entries} entries: int32 CSR indices hold at most 2^31-1")
    memory = host_memory_bytes()
    if memory and load > memory // 2:
        raise _refuse(path, f"too large: reading it takes about {describe_bytes(load)}, more than half of this "
                            f"machine's {describe_bytes(memory)} of memory")
    return rows, cols, entries


def check_matrix_file(path: Path) -> None:
    """Everything a spec naming this matrix file needs of it, checked once per version of the file: it exists, is
    a matrix SparseDitto reads, fits this machine, and has at least one row, column and nonzero."""
    read_matrix(path)


def read_matrix(path: Path) -> sp.csr_matrix:
    """The file's matrix in canonical CSR, parsed once per process (and again when it changes). It is shared:
    do not modify it (`load_matrix_file` gives a copy)."""
    path = _existing(Path(path))
    stat = path.stat()
    return _read_matrix(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def load_matrix_file(pattern: MatrixFilePattern) -> sp.csr_matrix:
    """Read a Matrix Market or .npz matrix; pattern-only files get values uniform in [-1, 1) later. A file is
    parsed once per process (and again when it changes); each caller gets its own copy to modify."""
    return read_matrix(Path(pattern.path)).copy()


@functools.lru_cache(maxsize=4)
def _read_matrix(path_name: str, mtime_ns: int, size: int) -> sp.csr_matrix:
    path = Path(path_name)
    rows, cols, _ = matrix_file_header(path)
    try:
        mat = sp.load_npz(path) if _kind(path) == "npz" else scipy.io.mmread(path)
        mat = sp.csr_matrix(mat)
        mat.sum_duplicates()
        mat.sort_indices()
    except MemoryError:
        raise _refuse(path, "too large: this machine ran out of memory reading it") from None
    except Exception as exc:  # noqa: BLE001 - whatever the readers make of a broken file
        raise _refuse(path, f"cannot read it ({type(exc).__name__}: {clip(str(exc))})") from None
    if mat.shape != (rows, cols):
        raise _refuse(path, f"its header says {rows} x {cols} but it holds a {mat.shape[0]} x {mat.shape[1]} matrix")
    if mat.nnz == 0:
        raise _refuse(path, f"the {rows} x {cols} matrix has no nonzeros: nothing to compute")
    return mat


def matrix_shape(pattern: MatrixFilePattern) -> tuple[int, int, int]:
    """(rows, cols, nonzeros) of a matrix file (nonzeros as read: a symmetric file's both triangles, duplicates
    summed)."""
    mat = read_matrix(Path(pattern.path))
    return mat.shape[0], mat.shape[1], mat.nnz

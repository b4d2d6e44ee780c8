"""Where a spec's 2:4 matrix keeps its entries: a seeded random choice per group, or magnitude pruning of a dense
matrix the user gives as a .npy file (the two largest |a| of each group stay, the lower column first on a tie)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from sparseditto.errors import SpecError, clip_path
from sparseditto.tools.families.sparse24_gemm.compression import GROUP, KEPT

# the six ways to keep two of four, as (first, second) positions
PAIRS = np.array([(a, b) for a in range(GROUP) for b in range(a + 1, GROUP)], dtype=np.uint8)
# a dense weight file larger than this is refused before it is read (16384 x 16384 float32 is 1 GiB)
MAX_DENSE_BYTES = 4 << 30


def random_positions(rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """(M, K/4, 2) kept positions (uint8), each group's pair drawn uniformly from the six. In bytes: 64-bit positions
    of a 16384^2 matrix take 1 GB (bytes 134 MB); the step's peak at 8192^2 0.45 GB -> 0.12 GB, no faster
    (evals/results/issue15_h200/host_reference_seconds_session12_cpu.txt)."""
    return PAIRS[rng.integers(0, len(PAIRS), size=(M, K // GROUP), dtype=np.uint8)]


def magnitude_positions(dense: np.ndarray) -> np.ndarray:
    """(M, K/4, 2) positions of the two largest |a| of each group, increasing."""
    M, K = dense.shape
    order = np.argsort(-np.abs(dense.reshape(M, K // GROUP, GROUP)), axis=2, kind="stable")[:, :, :KEPT]
    return np.sort(order, axis=2)


@lru_cache(maxsize=4)
def _load(path: str, size: int, mtime: int) -> np.ndarray:
    """The checked dense matrix of one file version: a refused file raises, and is not cached."""
    where = f"pattern.path: {clip_path(Path(path))}"
    try:
        dense = np.load(path, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise SpecError(f"{where}: cannot be read as a .npy array ({type(exc).__name__})", field="pattern.path") from None
    if dense.ndim != 2 or dense.dtype.kind not in "fiu":
        raise SpecError(f"{where}: holds a {dense.ndim}-dimensional {dense.dtype} array; give a 2-dimensional array "
                        "of real numbers (M x K)", field="pattern.path")
    M, K = dense.shape
    if M < 16 or K < 64 or M % 16 or K % 64:
        raise SpecError(f"{where}: its shape {M} x {K} must have M a positive multiple of 16 and K of 64 (the "
                        "sparse tensor cores' metadata blocks)", field="pattern.path")
    if not np.isfinite(dense).all():
        raise SpecError(f"{where}: holds NaN or infinite values; magnitude pruning needs finite weights",
                        field="pattern.path")
    return dense


def load_dense(path: Path) -> np.ndarray:
    """The dense matrix of a .npy file (read and checked once per process and file version, memory-mapped): two
    dimensions, a real floating or integer type, finite, M a multiple of 16 and K of 64; SpecError naming
    pattern.path otherwise."""
    where = f"pattern.path: {clip_path(Path(path))}"
    try:
        stat = Path(path).stat()
    except (OSError, ValueError) as exc:
        raise SpecError(f"{where}: cannot be read as a .npy array ({type(exc).__name__})", field="pattern.path") from None
    if Path(path).suffix != ".npy":
        raise SpecError(f"{where}: not a .npy file; give the dense matrix saved with numpy.save", field="pattern.path")
    if stat.st_size > MAX_DENSE_BYTES:
        raise SpecError(f"{where}: {stat.st_size >> 20} MiB, more than the {MAX_DENSE_BYTES >> 30} GiB a dense "
                        "weight file may have", field="pattern.path")
    return _load(str(path), stat.st_size, stat.st_mtime_ns)

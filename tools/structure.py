"""Structural features of a sparse matrix: what a planner reads to choose a format and a kernel.

Row lengths come from every row. Features of the pattern itself (diagonals, blocks, column sharing, reuse of
x) come from whole bands of 32 consecutive rows. A matrix with few rows is read whole; a large one is read on a
random sample of bands, since that is enough for a ratio or a share, and it keeps a 30M-nonzero matrix well
under two seconds. A planner compares formats by these numbers:
- rows of very different lengths (cv, max against mean, p99, the steps warps take walking them): one launch
  that balances them (merge path, CSR-adaptive), or a split for dense rows;
- nonzeros on few diagonals: diagonal or banded storage;
- dense blocks: BSR on tensor cores;
- neighbouring rows that share columns: row groups on tensor cores;
- a narrow band: 16-bit column offsets;
- a matrix smaller than L2: one launch, no streaming.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

BAND_ROWS = 32  # rows per sampled band: whole blocks of every size up to 32
SAMPLE_BANDS = 1 << 11  # bands read when the matrix has more (65,536 rows)
BLOCK_SIZES = (2, 3, 4, 6, 8, 16, 32)
H200_L2_BYTES = 60 * 1024 * 1024  # as the H200 reports it (l2_bytes in evals/results/floors_h200.json)
WARP_LANES = 32
WALK_GROUPS = (1, 2, 4, 8, 16, 32)  # lanes per row of the row-walking kernels (their GROUP values)
WALK_NONZEROS = 8  # nonzeros a lane takes per step: two 16-byte loads of 4 (UNROLL 2, every start's value)
SHORT_ROW = 64  # rows the split kernel's start walks by groups; longer ones go to warps of their own (LONG_ROW)
SPMM_LONG_ROW = 128  # the same for the SpMM split kernel's start (its LONG_ROW)


def spmv_bytes(M: int, K: int, nnz: int, value_bytes: int = 4) -> int:
    """What a CSR SpMV streams: values and column indices, row pointers, x and y."""
    return nnz * (4 + value_bytes) + 4 * (M + 1) + value_bytes * (M + K)


def sampled_bands(M: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of up to SAMPLE_BANDS random whole bands of BAND_ROWS rows, in order (all rows of a small matrix)."""
    bands = M // BAND_ROWS
    if bands <= SAMPLE_BANDS:
        return np.arange(M)
    chosen = np.sort(rng.choice(bands, size=SAMPLE_BANDS, replace=False))
    return (chosen[:, None] * BAND_ROWS + np.arange(BAND_ROWS)).ravel()


def _distinct(keys: np.ndarray) -> int:
    """How many distinct keys. The keys come in sorted runs (rows, and columns sorted within a row), which a
    merging sort (timsort, NumPy's stable kind) orders several times faster than quicksort."""
    if not len(keys):
        return 0
    ordered = np.sort(keys, kind="stable")
    return int(1 + np.count_nonzero(ordered[1:] != ordered[:-1]))


def warp_walk_steps(lengths: np.ndarray, groups: tuple[int, ...]) -> dict[int, float]:
    """For each group in `groups`: the steps of every warp whose 32 / group consecutive rows are each walked by
    `group` lanes, WALK_NONZEROS per lane and step, summed over the warps, per row. A warp takes as many steps as
    its longest row needs, so short, empty and uneven rows leave lanes idle for the warp's whole walk. The longest
    row of every run of 1, 2, 4, .. 32 rows comes from halving maxima: one pass over the rows, whatever the groups."""
    runs = run_maxima(lengths, WARP_LANES)
    return {g: float((-(-runs[WARP_LANES // g] // (WALK_NONZEROS * g))).sum(dtype=np.int64) / max(len(lengths), 1))
            for g in groups}


def run_maxima(lengths: np.ndarray, most: int) -> dict[int, np.ndarray]:
    """The longest row of every run of 1, 2, 4, .. `most` consecutive rows (the rows padded with empty ones to a
    multiple of `most`), by halving maxima: one pass over the rows."""
    runs = {1: np.zeros(-(-len(lengths) // most) * most, dtype=lengths.dtype)}
    runs[1][:len(lengths)] = lengths
    while max(runs) < most:
        half = runs[max(runs)]
        runs[2 * max(runs)] = np.maximum(half[0::2], half[1::2])
    return runs


def warp_imbalance(lengths: np.ndarray) -> dict[str, float]:
    """Where a warp's groups of lanes each walk a row of their own (SpMM row split, 2, 4 or 8 rows a warp), the warp
    lasts as long as its longest row: the nonzeros the warps' walks take (rows a warp times its longest row) over the
    nonzeros, uneven rows costing idle lanes. The same over the rows the SpMM split kernel's start walks this way
    (`_short`: rows over SPMM_LONG_ROW go to chunks of their own). On session 20's skewed matrices at 4 rows a warp:
    web 2.38, power-law 2.63, LP 2.07, circuit 1.38 (short rows), the split kernel's measured time over its price
    without this 2.4, 2.4, 1.8, 1.5."""
    out = {}
    for name, walked in (("", lengths), ("_short", np.where(lengths > SPMM_LONG_ROW, 0, lengths))):
        runs, total = run_maxima(walked, 8), max(int(walked.sum(dtype=np.int64)), 1)
        out |= {f"warp_imbalance{name}_{r}": float(runs[r].sum(dtype=np.int64) * r / total) for r in (2, 4, 8)}
    return out


def walk_features(lengths: np.ndarray) -> dict[str, float]:
    """What a row walk costs (tools/families/csr_spmv/cost.py): the warps' steps over all rows at each group of
    lanes per row; the same with the rows over SHORT_ROW left to warps of their own (walk_short_*), and those rows'
    steps at a warp per row (long_row_steps) and their share (long_rows), and the walk of the nonempty rows alone with
    those over SHORT_ROW left out (walk_nonempty_short_*), all per row."""
    lengths = lengths.astype(np.int32)  # half the memory traffic of int64: this runs over every row
    short = np.where(lengths > SHORT_ROW, 0, lengths)
    long_rows = lengths[lengths > SHORT_ROW]
    features = {f"walk_steps_{g}": v for g, v in warp_walk_steps(lengths, WALK_GROUPS).items()}
    features |= {f"walk_short_steps_{g}": v for g, v in warp_walk_steps(short, WALK_GROUPS[:-1]).items()}
    nonempty = lengths[(lengths > 0) & (lengths <= SHORT_ROW)]
    nonempty_steps = (warp_walk_steps(nonempty, WALK_GROUPS[:-1]) if len(nonempty) < len(lengths)
                      else {g: features[f"walk_short_steps_{g}"] for g in WALK_GROUPS[:-1]})
    features |= {f"walk_nonempty_short_steps_{g}": v * len(nonempty) / max(len(lengths), 1)
                 for g, v in nonempty_steps.items()}
    features["long_row_steps"] = float((-(-long_rows // (4 * WARP_LANES))).sum(dtype=np.int64) / max(len(lengths), 1))
    features["long_rows"] = len(long_rows) / max(len(lengths), 1)
    return features


def row_length_features(lengths: np.ndarray, K: int, walks: bool = True) -> dict[str, float]:
    """Mean, spread, quantiles and extremes of the row lengths, and with `walks` the row walks' steps (all rows)."""
    M = len(lengths)
    if not M:
        return {}
    mean = float(lengths.mean())
    q50, q90, q99 = (float(q) for q in np.percentile(lengths, (50, 90, 99)))
    dense_row = max(10 * mean, np.sqrt(K))
    return {**(walk_features(lengths) if walks else {}), **warp_imbalance(lengths),
        "row_mean": mean,
        "row_max": float(lengths.max()),
        "row_cv": float(lengths.std() / mean) if mean else 0.0,
        "row_p50": q50, "row_p90": q90, "row_p99": q99,
        "row_max_over_mean": float(lengths.max() / mean) if mean else 0.0,
        "empty_rows": float(np.count_nonzero(lengths == 0) / M),
        "dense_rows": float(np.count_nonzero(lengths > dense_row)),
        "dense_row_share": float(lengths[lengths > dense_row].sum() / max(lengths.sum(), 1)),
    }


def pattern_features(sample: sp.csr_matrix, rows: np.ndarray, M: int, K: int) -> dict[str, float]:
    """Features of the pattern on `sample`, the matrix's rows `rows` (whole bands of BAND_ROWS, in order)."""
    nnz = sample.nnz
    if not nnz:
        return {}
    lengths = np.diff(sample.indptr)
    row_of = np.repeat(rows.astype(np.int64), lengths)
    cols = sample.indices.astype(np.int64)
    offset = cols - row_of * K // max(M, 1)  # distance from the (scaled) diagonal
    diagonals = np.bincount(offset - offset.min())
    top = np.sort(diagonals)[::-1]
    features = {
        "bandwidth": float(np.abs(offset).max() / max(K, 1)),
        "profile": float(np.abs(offset).mean() / max(K, 1)),
        "diag_share_top1": float(top[:1].sum() / nnz),
        "diag_share_top8": float(top[:8].sum() / nnz),
        "diag_share_top32": float(top[:32].sum() / nnz),
        "diagonals_per_row": float(np.count_nonzero(diagonals) / max(len(rows), 1)),
    }
    band = row_of // BAND_ROWS
    for b in BLOCK_SIZES:
        blocks = _distinct((row_of // b) * (K // b + 1) + cols // b)
        features[f"block_fill_{b}"] = float(nnz / (blocks * b * b))
    group_pairs = _distinct((row_of // 8) * K + cols)
    features["group_overlap"] = float(nnz / group_pairs)
    # the same for groups of 16 rows (row groups on CUDA cores may take 16 rows a warp)
    features["group_overlap_16"] = float(nnz / _distinct((row_of // 16) * K + cols))
    # neighbouring rows (r, r+1 in the same band): the share of a row's columns also in the next row
    pair_keys = row_of * K + cols
    next_keys = (row_of - 1) * K + cols  # a nonzero of row r+1 seen from row r
    same_band_next = np.isin(next_keys, pair_keys, assume_unique=True) & (row_of % BAND_ROWS != 0)
    features["neighbour_sharing"] = float(np.count_nonzero(same_band_next) / nnz)
    # reuse distance of x within a band: nonzeros read between two reads of the same column, against the band's size
    order = np.lexsort((np.arange(nnz), cols, band))
    same = (cols[order][1:] == cols[order][:-1]) & (band[order][1:] == band[order][:-1])
    gaps = (order[1:] - order[:-1])[same]
    features["x_reuse_share"] = float(len(gaps) / nnz)
    # 32-byte sectors of x (8 fp32 values) a band reads, per nonzero: what scattered reads of x cost
    features["x_sectors_per_nnz"] = float(_distinct(band * (K // 8 + 1) + cols // 8) / nnz)
    features["x_reuse_distance"] = float(np.median(gaps)) if len(gaps) else 0.0
    return features


def structural_features(lengths: np.ndarray, sample: sp.csr_matrix, rows: np.ndarray, K: int, value_bytes: int,
                        column_counts: np.ndarray | None = None, walks: bool = True) -> dict[str, float]:
    """Every feature: row lengths from all rows, the pattern's from the sample; column counts when the whole
    matrix is at hand (dense columns); the row walks' steps only with `walks` (0.1-0.35 s at 10-30M nonzeros)."""
    M, nnz = len(lengths), int(lengths.sum())
    features = {"rows": float(M), "cols": float(K), "nnz": float(nnz), "density": nnz / max(M * K, 1),
                "aspect": M / max(K, 1),
                "bytes_over_l2": spmv_bytes(M, K, nnz, value_bytes) / H200_L2_BYTES,
                **row_length_features(lengths, K, walks), **pattern_features(sample, rows, M, K)}
    if column_counts is not None and len(column_counts):
        mean = nnz / max(K, 1)
        dense = column_counts > max(10 * mean, np.sqrt(M))
        features["dense_cols"] = float(np.count_nonzero(dense))
        features["col_cv"] = float(column_counts.std() / mean) if mean else 0.0
    return features


def bfs_levels(matrix: sp.csr_matrix, rng: np.random.Generator, reach: int = 1 << 16, most: int = 4096) -> float:
    """The levels of a breadth-first search over each row's columns (square matrices; 0 otherwise) from a random
    nonempty row until it has reached `reach` rows: a mesh or road grid takes tens to hundreds in any order of its
    rows (the suite's road grids 193-195, its 2D stencil 176, its 3D FEM matrix 15), a random or power-law graph a
    handful (4-7; evals/results/issue14_h200/planner_prices_session18.txt). Whether renumbering can make a matrix
    banded, which no feature of its present order says."""
    M = matrix.shape[0]
    nonempty = np.flatnonzero(np.diff(matrix.indptr))
    if matrix.shape[1] != M or not len(nonempty):
        return 0.0
    indptr, indices = matrix.indptr.astype(np.int64), matrix.indices
    seen = np.zeros(M, dtype=bool)
    frontier = np.array([int(rng.choice(nonempty))])
    seen[frontier] = True
    count, levels = 1, 0
    while count < min(reach, M) and len(frontier) and levels < most:
        lengths = indptr[frontier + 1] - indptr[frontier]
        at = np.repeat(indptr[frontier] - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        reached = np.unique(indices[at])
        frontier = reached[~seen[reached]]
        seen[frontier] = True
        count += len(frontier)
        levels += 1
    return float(levels)


def matrix_features(matrix: sp.csr_matrix, value_bytes: int, rng: np.random.Generator) -> dict[str, float]:
    """Every feature of a whole CSR matrix (sorted column indices), the pattern's on a sample of bands."""
    M, K = matrix.shape
    rows = sampled_bands(M, rng)
    sample = matrix if len(rows) == M else matrix[rows]
    counts = np.bincount(matrix.indices, minlength=K)
    return {**structural_features(np.diff(matrix.indptr), sample, rows, K, value_bytes, counts),
            "bfs_levels": bfs_levels(matrix, rng)}

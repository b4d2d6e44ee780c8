"""Structural features on matrices whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparseditto.tools.structure import matrix_features, sampled_bands

RNG = np.random.default_rng(0)


def random_matrix(M: int, K: int, nnz: int, seed: int) -> sp.csr_matrix:
    """Uniformly scattered nonzeros (scipy's sp.random samples positions out of M*K, far slower)."""
    rng = np.random.default_rng(seed)
    return sp.csr_matrix((np.ones(nnz), (rng.integers(0, M, nnz), rng.integers(0, K, nnz))), shape=(M, K))


def features(matrix: sp.spmatrix, seed: int = 0) -> dict[str, float]:
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    return matrix_features(matrix, 4, np.random.default_rng(seed))


def test_more_than_twenty_features_all_finite():
    f = features(random_matrix(3000, 2000, 60_000, 1))
    assert len(f) >= 20
    assert all(np.isfinite(v) for v in f.values())


def test_a_tridiagonal_matrix_lives_on_three_diagonals_in_a_narrow_band():
    n = 4096
    f = features(sp.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1]))
    assert f["diag_share_top1"] > 0.33 and abs(f["diag_share_top8"] - 1.0) < 1e-12
    assert f["bandwidth"] < 1e-3 and f["row_cv"] < 0.01
    assert f["neighbour_sharing"] > 0.6  # rows r and r+1 share two of three columns


def test_dense_blocks_fill_their_block_size_exactly():
    blocks = sp.block_diag([np.ones((8, 8))] * 256)
    f = features(blocks)
    assert f["block_fill_8"] == 1.0 and f["block_fill_4"] == 1.0
    assert f["block_fill_16"] == 0.5 and f["group_overlap"] == 8.0
    assert f["group_overlap_16"] == 8.0  # two 8 x 8 blocks, 16 columns for 128 nonzeros
    tall = features(sp.block_diag([np.ones((16, 16))] * 128))
    assert tall["group_overlap"] == 8.0 and tall["group_overlap_16"] == 16.0


def test_empty_and_dense_rows_are_counted():
    M, K = 5000, 5000
    dense = sp.lil_matrix((M, K))
    dense[7, :] = 1.0
    dense[100:200, 3] = 1.0
    f = features(sp.csr_matrix(dense) + random_matrix(M, K, 25_000, 2))
    assert f["dense_rows"] == 1.0 and f["empty_rows"] > 0.0
    assert f["dense_cols"] >= 1.0 and f["row_max"] >= K


def test_uniform_random_rows_share_nothing_and_reuse_little():
    f = features(random_matrix(20000, 20000, 200_000, 3))
    assert f["group_overlap"] < 1.01 and f["neighbour_sharing"] < 0.01 and f["block_fill_4"] < 0.07


def test_a_large_matrix_is_read_on_whole_bands_and_the_estimate_is_stable():
    rows = sampled_bands(10_000_000, RNG)
    assert len(rows) == 2048 * 32 and np.all(np.diff(rows.reshape(-1, 32), axis=1) == 1)
    banded = sp.diags([np.ones(300_000 - k) for k in range(4)], list(range(4)), format="csr")
    a, b = features(banded, 1), features(banded, 2)
    assert abs(a["block_fill_4"] - b["block_fill_4"]) < 0.01 and abs(a["neighbour_sharing"] - b["neighbour_sharing"]) < 0.01


def brute_warp_steps(lengths: list[int], group: int) -> float:
    """Warps of 32 / group consecutive rows, each warp as many steps as its longest row takes at 8 nonzeros per lane
    and step, walked one warp at a time: the definition the features' one-pass count must agree with."""
    rows = 32 // group
    total = 0
    for first in range(0, len(lengths), rows):
        total += max(-(-n // (8 * group)) for n in lengths[first:first + rows])
    return total / max(len(lengths), 1)


def test_row_walk_steps_agree_with_a_warp_by_warp_count():
    """Every group size, on lengths of random spread with empty runs (the last warp partly filled), and the
    nonempty-rows walk: the rows that are neither empty nor over SHORT_ROW, per row of the whole matrix."""
    from sparseditto.tools.structure import SHORT_ROW, WALK_GROUPS, walk_features

    for seed in range(40):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(0, int(rng.integers(1, 300)), int(rng.integers(1, 400)))
        lengths[rng.random(len(lengths)) < 0.5] = 0
        f = walk_features(lengths)
        short = [int(n) if n <= SHORT_ROW else 0 for n in lengths]
        nonempty = [int(n) for n in lengths if 0 < n <= SHORT_ROW]
        for g in WALK_GROUPS:
            assert abs(f[f"walk_steps_{g}"] - brute_warp_steps(lengths.tolist(), g)) < 1e-12
        for g in WALK_GROUPS[:-1]:
            assert abs(f[f"walk_short_steps_{g}"] - brute_warp_steps(short, g)) < 1e-12
            expected = brute_warp_steps(nonempty, g) * len(nonempty) / len(lengths)
            assert abs(f[f"walk_nonempty_short_steps_{g}"] - expected) < 1e-12
        assert f["long_rows"] == np.count_nonzero(lengths > SHORT_ROW) / len(lengths)


def test_warp_imbalance_agrees_with_a_warp_by_warp_count():
    """Rows a warp times its longest row, over the nonzeros, for 2, 4 and 8 rows a warp (the last warp partly
    filled); `_short` with the rows over SPMM_LONG_ROW left out; even rows give 1."""
    from sparseditto.tools.structure import SPMM_LONG_ROW, warp_imbalance

    for seed in range(30):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(0, int(rng.integers(1, 400)), int(rng.integers(1, 300)))
        lengths[0] = max(lengths[0], 1)
        f = warp_imbalance(lengths)
        for name, walked in (("", lengths), ("_short", [int(n) if n <= SPMM_LONG_ROW else 0 for n in lengths])):
            walked = [int(n) for n in walked]
            for r in (2, 4, 8):
                expected = sum(max(walked[i:i + r]) * r for i in range(0, len(walked), r)) / max(sum(walked), 1)
                assert abs(f[f"warp_imbalance{name}_{r}"] - expected) < 1e-12
    even = warp_imbalance(np.full(64, 7))
    assert all(v == 1.0 for v in even.values())


def test_breadth_first_levels_tell_a_mesh_in_any_order_from_a_random_graph():
    n = 300
    eye = sp.identity(n, format="csr")
    path = sp.diags([np.ones(n - 1), np.ones(n - 1)], [1, -1], format="csr")
    grid = sp.csr_matrix(sp.kron(eye, path) + sp.kron(path, eye))
    perm = np.random.default_rng(1).permutation(n * n)
    scattered = features(grid[perm][:, perm])
    assert scattered["bfs_levels"] >= 150  # 65,536 rows of a 2D grid lie within about 181 steps of the nearest start
    assert scattered["x_sectors_per_nnz"] > 0.6 > features(grid)["x_sectors_per_nnz"]
    assert features(random_matrix(n * n, n * n, 16 * n * n, 2))["bfs_levels"] <= 8
    assert features(random_matrix(2000, 3000, 20_000, 3))["bfs_levels"] == 0.0  # rectangular: not a graph

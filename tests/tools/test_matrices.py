"""Generated matrices: canonical CSR with the requested nonzeros per row, for every distribution."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.tools.families.csr_common import UnstructuredPattern
from sparseditto.tools.matrices import generate_csr, row_lengths


def assert_canonical(mat: sp.csr_matrix, M: int, K: int) -> None:
    assert mat.shape == (M, K)
    assert mat.indptr.dtype == np.int32 and mat.indices.dtype == np.int32
    assert mat.indptr[0] == 0 and np.all(np.diff(mat.indptr) >= 0)
    for r in range(M):
        cols = mat.indices[mat.indptr[r]:mat.indptr[r + 1]]
        assert np.all(np.diff(cols) > 0), f"row {r}: columns not sorted and unique"
    if mat.nnz:
        assert mat.indices.min() >= 0 and mat.indices.max() < K
    assert mat.has_canonical_format
    assert np.all(mat.data >= -1.0) and np.all(mat.data < 1.0)


@pytest.mark.parametrize("distribution", ["uniform", "banded"])
def test_integer_nnz_per_row_is_exact(distribution):
    pattern = UnstructuredPattern(distribution=distribution, nnz_per_row=7)
    mat = generate_csr(pattern, 300, 50, np.float32, np.random.default_rng(0))
    assert_canonical(mat, 300, 50)
    assert np.all(np.diff(mat.indptr) == 7)


def test_density_sets_the_row_length():
    pattern = UnstructuredPattern(density=0.1)
    mat = generate_csr(pattern, 64, 120, np.float32, np.random.default_rng(1))
    assert_canonical(mat, 64, 120)
    assert np.all(np.diff(mat.indptr) == 12)


def test_fractional_mean_mixes_two_lengths_with_the_exact_total():
    pattern = UnstructuredPattern(nnz_per_row=7.5)
    mat = generate_csr(pattern, 200, 40, np.float32, np.random.default_rng(2))
    assert_canonical(mat, 200, 40)
    assert set(np.diff(mat.indptr).tolist()) == {7, 8}
    assert mat.nnz == 1500


def test_full_rows_when_nnz_per_row_equals_K():
    mat = generate_csr(UnstructuredPattern(nnz_per_row=16), 10, 16, np.float32, np.random.default_rng(0))
    assert_canonical(mat, 10, 16)
    assert np.array_equal(mat.indices, np.tile(np.arange(16, dtype=np.int32), 10))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_power_law_keeps_the_mean_with_a_heavy_tail(seed):
    pattern = UnstructuredPattern(distribution="power_law", nnz_per_row=16, power_law_exponent=2.2)
    M, K = 5000, 4000
    lengths = row_lengths(pattern, M, K, np.random.default_rng(seed))
    assert lengths.sum() == 16 * M
    assert lengths.min() >= 1 and lengths.max() <= K
    assert lengths.max() > 10 * 16  # a few very long rows
    assert np.median(lengths) < 16  # many short ones
    mat = generate_csr(pattern, M, K, np.float32, np.random.default_rng(seed))
    assert_canonical(mat, M, K)
    assert mat.nnz == 16 * M


def test_power_law_lengths_are_capped_at_K():
    pattern = UnstructuredPattern(distribution="power_law", nnz_per_row=30, power_law_exponent=1.6)
    lengths = row_lengths(pattern, 2000, 40, np.random.default_rng(5))
    assert lengths.max() <= 40
    assert lengths.sum() == 30 * 2000


def test_banded_columns_stay_near_the_diagonal():
    M, K, n = 400, 400, 6
    mat = generate_csr(UnstructuredPattern(distribution="banded", nnz_per_row=n), M, K, np.float32, np.random.default_rng(3))
    assert_canonical(mat, M, K)
    rows = np.repeat(np.arange(M), np.diff(mat.indptr))
    assert np.abs(mat.indices - rows).max() <= 3 * n


def test_uniform_columns_spread_over_the_row():
    M, K = 400, 400
    mat = generate_csr(UnstructuredPattern(nnz_per_row=6), M, K, np.float32, np.random.default_rng(3))
    rows = np.repeat(np.arange(M), np.diff(mat.indptr))
    assert np.abs(mat.indices - rows).max() > 100


def test_same_seed_same_matrix():
    pattern = UnstructuredPattern(distribution="power_law", density=0.01)
    a = generate_csr(pattern, 500, 500, np.float32, np.random.default_rng(9))
    b = generate_csr(pattern, 500, 500, np.float32, np.random.default_rng(9))
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices) and np.array_equal(a.data, b.data)


def test_a_symmetric_matrix_file_counts_both_triangles_and_each_caller_gets_its_own_copy(tmp_path):
    import scipy.io

    from sparseditto.tools.families.csr_common import MatrixFilePattern
    from sparseditto.tools.matrices import load_matrix_file, matrix_shape

    lower = sp.coo_matrix(([1.0, 2.0, 3.0, 4.0], ([0, 1, 2, 3], [0, 0, 1, 2])), shape=(4, 4))
    path = tmp_path / "sym.mtx"
    scipy.io.mmwrite(path, lower + sp.triu(lower.T, k=1), symmetry="symmetric")
    pattern = MatrixFilePattern(kind="matrix_file", path=path)
    assert matrix_shape(pattern) == (4, 4, 7)  # the header holds 4 entries; the matrix has 7
    first = load_matrix_file(pattern)
    assert first.nnz == 7
    first.data[:] = 0.0  # a caller's changes stay with its copy
    assert load_matrix_file(pattern).data.any()

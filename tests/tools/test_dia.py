"""The DIA SpMV kernel's preparation `diagonals` (CPU): DIA plus its CSR remainder hold exactly the CSR matrix,
a NumPy emulation of spmv_dia over the prepared arrays gives y = A x (an Inf stays in its own row), and the
kernel compiles and passes the compile-only verifier."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.dtypes import to_storage
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Output, Problem
from sparseditto.tools.families.csr_spmv.diagonal import diagonals, mask_bits

from compile_checks import verify_compile_only


def problem_of(mat: sp.spmatrix, dtype: str = "fp32", seed: int = 0) -> Problem:
    mat = sp.csr_matrix(mat)
    mat.sort_indices()
    M, K = mat.shape
    rng = np.random.default_rng(seed)
    values = to_storage(mat.data.astype(np.float32), dtype)
    return Problem(dtype=dtype, symbols={"M": M, "K": K, "N": 1, "nnz": mat.nnz},
                   inputs={"rowptr": mat.indptr.astype(np.int32), "colind": mat.indices.astype(np.int32),
                           "values": values, "x": to_storage(rng.uniform(-1, 1, K), dtype)},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": dtype, "x": dtype},
                   outputs={"y": Output((M,), dtype, 1e-5)})


def stencil_5pt(n: int) -> sp.csr_matrix:
    """The 2D Laplacian on an n x n grid: offsets 0, +-1, +-n, with the +-1 links cut at the grid's edges."""
    ones = np.ones(n * n)
    side = ones.copy()
    side[np.arange(1, n * n + 1) % n == 0] = 0  # no link from the last column of a grid row to the next row
    mat = sp.diags([4 * ones, -side[:-1], -side[:-1], -ones[:-n], -ones[:-n]], [0, 1, -1, n, -n], format="csr")
    mat.eliminate_zeros()
    return mat


def banded(M: int, K: int, half_width: int, seed: int = 1) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    offsets = list(range(-half_width, half_width + 1))
    return sp.diags([rng.uniform(-1, 1, M) for _ in offsets], offsets, shape=(M, K), format="csr")


def random_matrix(M: int, K: int, density: float, seed: int = 2, empty_rows=()) -> sp.csr_matrix:
    return with_empty_rows(sp.random(M, K, density=density, format="csr", random_state=seed), empty_rows)


def with_empty_rows(mat: sp.csr_matrix, rows) -> sp.csr_matrix:
    mat = sp.lil_matrix(mat)
    for r in rows:
        mat.rows[r], mat.data[r] = [], []
    return sp.csr_matrix(mat)


def reconstruct(problem: Problem, arrays, symbols) -> sp.csr_matrix:
    """The matrix the prepared arrays hold: DIA entries whose mask bit is set, plus the remainder."""
    M, K = problem.symbols["M"], problem.symbols["K"]
    logical = dtype_info(problem.dtype).logical
    n = symbols["n_diags"]
    rows, cols, vals = [], [], []
    for k in range(n):
        d = int(arrays["dia_offsets"][k])
        bits = 8 * arrays["dia_mask"].itemsize
        mask = (arrays["dia_mask"][(k // bits) * M:(k // bits + 1) * M] >> (k % bits)) & 1
        r = np.flatnonzero(mask)
        assert ((r + d >= 0) & (r + d < K)).all()
        rows.append(r), cols.append(r + d)
        vals.append(arrays["dia_vals"][k * M + r].view(logical).astype(np.float64))
    rp = arrays["rowptr_rest"]
    nr = symbols["rest_nnz"]
    assert rp[-1] == nr and len(rp) == M + 1
    rows.append(np.repeat(np.arange(M), np.diff(rp)))
    cols.append(arrays["colind_rest"][:nr])
    vals.append(arrays["values_rest"][:nr].view(logical).astype(np.float64))
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(M, K))


def emulate(problem: Problem, arrays, symbols, params) -> np.ndarray:
    """spmv_dia's arithmetic over the prepared arrays, row by row as its threads do (fp32 accumulation)."""
    M, K = problem.symbols["M"], problem.symbols["K"]
    logical = dtype_info(problem.dtype).logical
    x = problem.inputs["x"].view(logical).astype(np.float32)
    nd = min(symbols["n_diags"], params["MAX_DIAGS"])
    mask = arrays["dia_mask"]
    bits = mask_bits(params["MAX_DIAGS"])  # the kernel's word, by MAX_DIAGS alone
    assert mask.itemsize * 8 == bits
    vals = arrays["dia_vals"].view(logical).astype(np.float32)
    acc = np.zeros(M, np.float32)
    r = np.arange(M)
    nd = nd if K > 0 else 0
    for k in range(nd):
        present = ((mask[(k // bits) * M + r].astype(np.uint32) >> np.uint32(k % bits)) & 1).astype(bool)
        col = r + int(arrays["dia_offsets"][k])
        # every row loads its value and x (at the column clamped into [0, K)), present or not: both in bounds
        loaded_v, loaded_x = vals[k * M + r], x[np.clip(col, 0, K - 1)]
        present &= (col >= 0) & (col < K)
        acc[present] += loaded_v[present] * loaded_x[present]  # only present entries: never 0 * x
    if symbols["rest_nnz"] == 0:  # the kernel reads no row pointer then
        return acc
    rp, ci = arrays["rowptr_rest"], arrays["colind_rest"]
    vr = arrays["values_rest"].view(logical).astype(np.float32)
    for row in range(M):
        for e in range(rp[row], rp[row + 1]):
            acc[row] += vr[e] * x[ci[e]]
    return acc


CASES = {
    "stencil_5pt": (stencil_5pt(12), 8),
    "banded_over_max": (banded(300, 300, 10), 8),  # 21 diagonals, 8 kept
    "banded_rect_wide": (banded(90, 140, 20), 16),
    "banded_rect_tall": (banded(140, 90, 3), 64),
    "random": (random_matrix(70, 50, 0.08), 16),
    "random_empty_rows": (random_matrix(64, 64, 0.1, empty_rows=(0, 5, 63)), 32),
    "stencil_empty_rows": (with_empty_rows(stencil_5pt(8), (0, 17, 63)), 8),
    "empty": (sp.csr_matrix((10, 7)), 8),
    "many_diagonals": (random_matrix(80, 80, 0.5, seed=3), 64),  # more than 32 diagonals kept: two mask words
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_dia_plus_remainder_reconstructs_the_csr_exactly(case, dtype):
    mat, max_diags = CASES[case]
    problem = problem_of(mat, dtype)
    arrays, symbols = diagonals(problem, {"MAX_DIAGS": max_diags, "BLOCK": 256})
    assert symbols["n_diags"] <= max_diags
    n_offsets = len(np.unique(mat.tocoo().col - mat.tocoo().row))
    assert symbols["n_diags"] == min(n_offsets, max_diags)
    assert (symbols["rest_nnz"] == 0) == (n_offsets <= max_diags)
    expected = sp.csr_matrix((problem.inputs["values"].view(dtype_info(dtype).logical).astype(np.float64),
                              problem.inputs["colind"], problem.inputs["rowptr"]), shape=mat.shape)
    got = reconstruct(problem, arrays, symbols)
    n_dia = sum(bin(int(w)).count("1") for w in arrays["dia_mask"])
    assert n_dia + symbols["rest_nnz"] == mat.nnz
    assert got.nnz == expected.nnz
    assert (got != expected).nnz == 0  # entry for entry, bit-exact after widening
    assert arrays["dia_vals"].dtype == problem.inputs["values"].dtype == arrays["values_rest"].dtype
    for name in ("dia_offsets", "rowptr_rest", "colind_rest"):
        assert arrays[name].dtype == np.int32, name
    assert arrays["dia_mask"].dtype == {8: np.uint8, 16: np.uint16, 32: np.uint32}[mask_bits(max_diags)]
    assert all(len(a) >= 1 for a in arrays.values())


def test_unsorted_rows_and_repeated_entries_keep_one_copy_per_diagonal_in_dia():
    """Columns out of order within rows and a (row, column) entry given twice: the preparation must not assume a
    canonical CSR (it skips its sort only where every row's columns rise)."""
    stencil = stencil_5pt(6)
    rowptr, colind, data = stencil.indptr.copy(), stencil.indices.copy(), stencil.data.copy()
    rng = np.random.default_rng(7)
    for r in range(stencil.shape[0]):
        order = rng.permutation(np.arange(rowptr[r], rowptr[r + 1]))
        colind[rowptr[r]:rowptr[r + 1]], data[rowptr[r]:rowptr[r + 1]] = colind[order], data[order]
    repeated = 3  # row 3's first entry again, at the end of row 3
    at = rowptr[repeated + 1]
    colind, data = np.insert(colind, at, colind[rowptr[repeated]]), np.insert(data, at, 0.5)
    rowptr = rowptr + (np.arange(len(rowptr)) > repeated)
    mat = sp.csr_matrix((data, colind, rowptr), shape=stencil.shape)
    problem = problem_of(stencil)
    problem.inputs.update(rowptr=rowptr.astype(np.int32), colind=colind.astype(np.int32),
                          values=to_storage(data.astype(np.float32), "fp32"))
    arrays, symbols = diagonals(problem, {"MAX_DIAGS": 8, "BLOCK": 256})
    assert symbols == {"n_diags": 5, "rest_nnz": 1}  # the repeat goes to the remainder
    n_dia = sum(bin(int(w)).count("1") for w in arrays["dia_mask"])
    assert n_dia + symbols["rest_nnz"] == len(colind)
    got = reconstruct(problem, arrays, symbols)
    assert abs(got - mat).max() == 0  # duplicates summed on both sides


def test_stencil_is_all_dia_and_a_wide_band_has_a_remainder():
    arrays, symbols = diagonals(problem_of(stencil_5pt(10)), {"MAX_DIAGS": 8, "BLOCK": 128})
    assert symbols == {"n_diags": 5, "rest_nnz": 0}
    assert arrays["dia_offsets"].tolist() == [-10, -1, 0, 1, 10]
    band = banded(200, 200, 10)
    arrays, symbols = diagonals(problem_of(band), {"MAX_DIAGS": 8, "BLOCK": 128})
    assert symbols["n_diags"] == 8 and symbols["rest_nnz"] > 0
    # the densest diagonals are the ones nearest the main diagonal (the longest ones)
    assert sorted(arrays["dia_offsets"].tolist()) == [-4, -3, -2, -1, 0, 1, 2, 3]


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_emulation_gives_a_times_x(case):
    mat, max_diags = CASES[case]
    problem = problem_of(mat)
    params = {"MAX_DIAGS": max_diags, "BLOCK": 256}
    arrays, symbols = diagonals(problem, params)
    y = emulate(problem, arrays, symbols, params)
    expected = mat.astype(np.float64) @ problem.inputs["x"].astype(np.float64)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["stencil_5pt", "banded_over_max", "random"])
def test_an_inf_propagates_only_to_its_own_row(case):
    mat, max_diags = CASES[case]
    mat = sp.csr_matrix(mat, copy=True)
    # one Inf in the DIA part (first row's first entry) and one in the remainder when there is one
    targets = [0]
    params = {"MAX_DIAGS": max_diags, "BLOCK": 256}
    arrays, symbols = diagonals(problem_of(mat), params)
    if symbols["rest_nnz"]:
        rest_row = int(np.flatnonzero(np.diff(arrays["rowptr_rest"]))[-1])
        targets.append(rest_row)
        # the remainder's first entry of that row, found in the CSR
        c = arrays["colind_rest"][arrays["rowptr_rest"][rest_row]]
        lo, hi = mat.indptr[rest_row], mat.indptr[rest_row + 1]
        mat.data[lo + int(np.flatnonzero(mat.indices[lo:hi] == c)[0])] = np.inf
    mat.data[mat.indptr[0]] = np.inf
    problem = problem_of(mat)
    problem.inputs["x"] = np.abs(problem.inputs["x"]) + np.float32(0.5)  # positive x: the Inf is not cancelled
    arrays, symbols = diagonals(problem, params)
    y = emulate(problem, arrays, symbols, params)
    bad = np.flatnonzero(~np.isfinite(y)).tolist()
    assert bad == sorted(set(targets))
    assert np.isposinf(y[targets]).all()
    # and a NaN in x reaches only the rows whose entries reference it: column 12 is where the stencil's +1
    # diagonal has no entry in row 11 (the grid row's end), so a 0 * x there would show
    problem.inputs["x"] = problem.inputs["x"].copy()
    problem.inputs["x"][12] = np.nan
    y = emulate(problem, arrays, symbols, params)
    referencing = set(mat.tocoo().row[mat.tocoo().col == 12].tolist())
    assert 11 not in referencing or case != "stencil_5pt"
    assert set(np.flatnonzero(np.isnan(y)).tolist()) == referencing


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.spec import parse_spec

    kernel = get_kernel("spmv_dia")
    assert kernel.preparation == "diagonals" and "diagonals" in get_family("csr_spmv").preparations
    spec = parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 8}, "M": 2048, "K": 2048, "dtype": dtype})
    for params in ({"MAX_DIAGS": 8, "BLOCK": 256}, {"MAX_DIAGS": 64, "BLOCK": 512}):
        verify_compile_only(kernel.instantiate(params), spec, ("spmv_dia",))

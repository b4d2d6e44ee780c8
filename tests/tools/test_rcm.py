"""CSR renumbered by reverse Cuthill-McKee (spmv_csr_rcm): its preparation holds exactly P A P^T with each row's
entries in their CSR order and makes a randomly permuted grid banded again, keeps a wide matrix in its order, a NumPy
emulation of the two launches gives y = A x, the kernel compiles in every dtype, the planner offers it only where x
is read in a scattered order on regular rows, and on the GPU it is correct and clean under compute-sanitizer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.families.csr_spmv.rcm import rcm_reordered

from compile_checks import verify_compile_only
from spmv_problems import matrix_spec, problem_of


def grid(n: int) -> sp.csr_matrix:
    """A 5-point grid of n x n nodes."""
    eye = sp.identity(n, format="csr")
    path = sp.diags([np.ones(n - 1), np.ones(n - 1)], [1, -1], format="csr")
    return sp.csr_matrix(sp.kron(eye, path) + sp.kron(path, eye) + 4 * sp.identity(n * n))


def permuted(mat: sp.csr_matrix, seed: int) -> sp.csr_matrix:
    perm = np.random.default_rng(seed).permutation(mat.shape[0])
    return sp.csr_matrix(mat[perm][:, perm])


def bandwidth(rowptr: np.ndarray, colind: np.ndarray) -> int:
    rows = np.repeat(np.arange(len(rowptr) - 1), np.diff(rowptr))
    return int(np.abs(colind.astype(np.int64) - rows).max())


CASES = {
    "permuted_grid": permuted(grid(40), 1),
    "empty_rows": sp.csr_matrix(sp.random(300, 300, density=0.01, random_state=2)),
    "unsorted_rows": permuted(grid(12), 3),
    "wide": sp.csr_matrix(sp.random(50, 80, density=0.1, random_state=4)),
    "tall": sp.csr_matrix(sp.random(80, 50, density=0.1, random_state=5)),
}


def emulate(problem) -> np.ndarray:
    """The two launches in NumPy: x_new = x[rcm_col], then each renumbered row's sum stored at y[rcm_row[row]]."""
    arrays, _ = rcm_reordered(problem, {})
    x = problem.inputs["x"].astype(np.float64)
    rowptr = arrays["rcm_rowptr"]
    col = arrays["rcm_col"]
    x_new = np.where(col < len(x), x[np.minimum(col, len(x) - 1)], 0.0)  # a tall matrix's columns past x: 0
    y = np.full(len(rowptr) - 1, np.nan)
    for row in range(len(rowptr) - 1):
        lo, hi = rowptr[row], rowptr[row + 1]
        y[arrays["rcm_row"][row]] = float(np.dot(arrays["rcm_vals"][lo:hi].astype(np.float64), x_new[arrays["rcm_colind"][lo:hi]]))
    return y


@pytest.mark.parametrize("case", list(CASES))
def test_the_renumbered_matrix_is_p_a_p_transposed_with_each_rows_entries_in_order(case):
    mat = CASES[case]
    problem = problem_of(mat, sort=case != "unsorted_rows")
    if case == "unsorted_rows":  # reverse every row's entries: the preparation must keep whatever order it is given
        colind, values = problem.inputs["colind"], problem.inputs["values"]
        for r in range(mat.shape[0]):
            lo, hi = problem.inputs["rowptr"][r], problem.inputs["rowptr"][r + 1]
            colind[lo:hi], values[lo:hi] = colind[lo:hi][::-1].copy(), values[lo:hi][::-1].copy()
    arrays, symbols = rcm_reordered(problem, {})
    row, col = arrays["rcm_row"], arrays["rcm_col"]
    assert symbols == {"rcm_cols": len(col)} and sorted(row) == list(range(mat.shape[0]))
    assert sorted(col) == list(range(len(col))) and mat.indices.max() < len(col)
    if mat.indices.max() < mat.shape[0]:  # square or tall: one renumbering of rows and columns together
        assert (row == col).all()
    else:
        assert (row == np.arange(mat.shape[0])).all() and (col == np.arange(len(col))).all()
    rowptr, colind, values = (problem.inputs[k] for k in ("rowptr", "colind", "values"))
    for new_row, old_row in enumerate(row):
        lo, hi = arrays["rcm_rowptr"][new_row], arrays["rcm_rowptr"][new_row + 1]
        olo, ohi = rowptr[old_row], rowptr[old_row + 1]
        assert (col[arrays["rcm_colind"][lo:hi]] == colind[olo:ohi]).all()
        assert (arrays["rcm_vals"][lo:hi] == values[olo:ohi]).all()


def test_a_randomly_permuted_grid_becomes_banded_again():
    problem = problem_of(CASES["permuted_grid"])
    arrays, _ = rcm_reordered(problem, {})
    before = bandwidth(problem.inputs["rowptr"], problem.inputs["colind"])
    after = bandwidth(arrays["rcm_rowptr"], arrays["rcm_colind"])
    assert before > 1000 and after <= 2 * 40 + 2


@pytest.mark.parametrize("case", list(CASES))
def test_emulated_launches_give_a_times_x_and_write_every_row(case):
    problem = problem_of(CASES[case], seed=5)
    A = sp.csr_matrix((problem.inputs["values"].astype(np.float64), problem.inputs["colind"], problem.inputs["rowptr"]),
                      shape=CASES[case].shape)
    np.testing.assert_allclose(emulate(problem), A @ problem.inputs["x"].astype(np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmv_csr_rcm")
    assert kernel.preparation == "rcm_reordered" and "rcm_reordered" in get_family("csr_spmv").preparations
    spec = parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 8}, "M": 2048, "K": 2048, "dtype": dtype})
    for params in ({"GROUP": 1, "UNROLL": 2, "BLOCK": 256}, {"GROUP": 4, "UNROLL": 4, "BLOCK": 128},
                   {"GROUP": 32, "UNROLL": 1, "BLOCK": 512}):
        verify_compile_only(kernel.instantiate(params), spec, ("spmv_rcm_permute_x", "spmv_rcm_rows"))


def test_the_planner_offers_it_on_a_scattered_grid_only(tmp_path):
    family = get_family("csr_spmv")

    def offered(mat: sp.csr_matrix, name: str) -> bool:
        spec = matrix_spec(tmp_path, mat, name)
        return "spmv_csr_rcm" in {s.kernel for s in family.strategies(spec, family.features(spec))}

    assert offered(permuted(grid(300), 6), "scattered")
    assert not offered(grid(300), "natural")
    rng, n = np.random.default_rng(7), 90_000
    lengths = np.minimum(rng.zipf(1.8, n), 3000)  # power-law rows: no band to recover
    rows = np.repeat(np.arange(n), lengths)
    power_law = sp.csr_matrix((np.ones(len(rows)), (rows, rng.integers(0, n, len(rows)))), shape=(n, n))
    assert not offered(power_law, "power_law")


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "params"), [("permuted_grid", {"GROUP": 1, "UNROLL": 2, "BLOCK": 256}),
                                              ("empty_rows", {"GROUP": 4, "UNROLL": 1, "BLOCK": 128}),
                                              ("wide", {"GROUP": 2, "UNROLL": 2, "BLOCK": 256}),
                                              ("tall", {"GROUP": 1, "UNROLL": 4, "BLOCK": 128})])
def test_it_is_correct_and_clean_on_the_gpu(tmp_path, case, params):
    """Correct on fresh inputs (IEEE specials in the values), at held-out shapes and in every timed run, and clean
    under compute-sanitizer's tools (whose slices of a square matrix are wide); a tall matrix's renumbered columns
    past x are never read."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    spec = matrix_spec(tmp_path, CASES[case], case)
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=10, profile=False).verify(
        get_kernel("spmv_csr_rcm").instantiate(params), spec)
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message

"""BSR SpMV on CUDA cores (spmv_bsr): its preparation stores every nonzero once in its block with the mask bit set
and nothing else, refuses a repeated entry, a NumPy emulation of the warp's lane mapping gives y = A x and keeps an
Inf of x out of the rows that do not reference it, the kernel compiles in every dtype, and the planner offers it
first on a matrix of dense blocks and not on a scattered one."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.csr_spmv.bsr import bsr_masked, mask_bits

from compile_checks import verify_compile_only
from spmv_problems import matrix_spec, problem_of


def dense_blocks(n_nodes: int, block: int, neighbours: int, seed: int) -> sp.csr_matrix:
    """An FEM-like matrix: n_nodes x n_nodes nodes, each coupled to itself and `neighbours` random others by a dense
    block x block block, and a last node row cut short so that M is no multiple of the block."""
    rng = np.random.default_rng(seed)
    edges = n_nodes * neighbours
    nodes_i = np.concatenate([rng.integers(0, n_nodes, edges), np.arange(n_nodes)])
    nodes_j = np.concatenate([rng.integers(0, n_nodes, edges), np.arange(n_nodes)])
    r, c = np.divmod(np.arange(block * block), block)
    rows = (nodes_i[:, None] * block + r).ravel()
    cols = (nodes_j[:, None] * block + c).ravel()
    n = n_nodes * block
    mat = sp.csr_matrix((rng.uniform(-1, 1, len(rows)), (rows, cols)), shape=(n, n))  # repeated pairs summed
    return sp.csr_matrix(mat[: n - 1])


CASES = {
    "blocks3": (dense_blocks(200, 3, 6, 1), 3),
    "blocks4_grid2": (dense_blocks(150, 4, 5, 2), 2),  # a finer grid than the blocks: still full
    "blocks3_grid4": (dense_blocks(150, 3, 5, 3), 4),  # a grid across the blocks: partly full
    "blocks8": (dense_blocks(60, 8, 4, 4), 8),
    "random_rect": (sp.random(700, 500, density=0.01, random_state=5, format="csr"), 6),
    "empty_rows": (sp.csr_matrix(sp.random(400, 400, density=0.003, random_state=6, format="csr")), 3),
}


def reconstruct(arrays, symbols, B: int, shape) -> tuple[np.ndarray, np.ndarray]:
    """The dense matrix the blocks hold, and which elements their masks mark."""
    M, K = shape
    dense = np.zeros((symbols["n_brows"] * B, (int(arrays["bsr_col"].max()) + 1) * B + B))
    marked = np.zeros(dense.shape, bool)
    vals = arrays["bsr_vals"].astype(np.float64)
    ptr = arrays["bsr_ptr"]
    for i in range(symbols["n_brows"]):
        for b in range(ptr[i], ptr[i + 1]):
            c0 = int(arrays["bsr_col"][b]) * B
            block = vals[b * B * B:(b + 1) * B * B].reshape(B, B)
            bits = int(arrays["bsr_mask"][b])
            for r in range(B):
                for c in range(B):
                    dense[i * B + r, c0 + c] += block[r, c]
                    marked[i * B + r, c0 + c] = bool(bits >> (r * B + c) & 1)
    return dense[:M, :K], marked[:M, :K]


@pytest.mark.parametrize("case", list(CASES))
def test_every_nonzero_is_in_its_block_with_its_mask_bit_and_nothing_else(case):
    mat, B = CASES[case]
    mat = sp.csr_matrix(mat)
    problem = problem_of(mat)
    problem.inputs["values"][::7] = 0.0  # stored zeros are entries too: their bits are set
    arrays, symbols = bsr_masked(problem, {"B": B})
    assert arrays["bsr_mask"].dtype.itemsize * 8 == mask_bits(B)
    assert symbols["n_brows"] == -(-mat.shape[0] // B)
    assert len(arrays["bsr_vals"]) == max(symbols["n_blocks"], 1) * B * B
    dense, marked = reconstruct(arrays, symbols, B, mat.shape)
    inputs = problem.inputs  # the problem's own values (drawn anew), the matrix's structure
    want = sp.csr_matrix((to_float64(inputs["values"], "fp32"), inputs["colind"], inputs["rowptr"]), shape=mat.shape).toarray()
    np.testing.assert_array_equal(dense, want)
    entries = np.zeros(mat.shape, bool)
    entries[mat.tocoo().row, mat.tocoo().col] = True
    np.testing.assert_array_equal(marked, entries)
    # blocks in block-row order, by block column within one
    for i in range(symbols["n_brows"]):
        cols = arrays["bsr_col"][arrays["bsr_ptr"][i]:arrays["bsr_ptr"][i + 1]]
        assert np.all(np.diff(cols) > 0)


def test_a_repeated_entry_is_refused_and_unsorted_rows_are_not():
    rowptr = np.array([0, 3, 4], np.int32)
    problem = problem_of(sp.csr_matrix((np.ones(4), np.array([2, 0, 1, 1]), rowptr), shape=(2, 3)), sort=False)
    arrays, symbols = bsr_masked(problem, {"B": 2})
    assert int(arrays["bsr_mask"].astype(np.int64).sum()) > 0 and symbols["n_blocks"] == 2
    repeated = sp.csr_matrix((np.ones(4), np.array([1, 0, 1, 1]), rowptr), shape=(2, 3))
    with pytest.raises(ValueError, match="appears twice"):
        bsr_masked(problem_of(repeated, sort=False), {"B": 2})


def emulate(problem, arrays, symbols, params) -> np.ndarray:
    """spmv_bsr's arithmetic as its warps do it: lane l < 32 - 32 % B takes row l % B of blocks lo + l / B,
    lo + l / B + 32 / B, ...; it loads every value and x (the column clamped into [0, K)) and adds a product only
    where the mask bit is set; the row's lanes add up in lane order (fp32 throughout)."""
    B = params["B"]
    M, K = problem.symbols["M"], problem.symbols["K"]
    per, y = 32 // B, np.full(M, np.nan, np.float32)
    x = to_float64(problem.inputs["x"], problem.dtype).astype(np.float32)
    vals = to_float64(arrays["bsr_vals"], problem.dtype).astype(np.float32)
    ptr, cols, masks = arrays["bsr_ptr"], arrays["bsr_col"], arrays["bsr_mask"]
    for brow in range(symbols["n_brows"]):
        parts = np.zeros(32, np.float32)
        for lane in range(per * B):
            r, j = lane % B, lane // B
            for b in range(ptr[brow] + j, ptr[brow + 1], per):
                c0 = int(cols[b]) * B
                for c in range(B):
                    v = vals[(b * B + r) * B + c]
                    xv = x[min(c0 + c, K - 1)]
                    if int(masks[b]) >> (r * B + c) & 1:
                        parts[lane] = np.float32(parts[lane] + v * xv)
        for r in range(B):
            if brow * B + r < M:
                y[brow * B + r] = np.float32(sum(parts[r + k * B] for k in range(per)))
    return y


@pytest.mark.parametrize("case", ["blocks3", "blocks3_grid4", "blocks8", "random_rect", "empty_rows"])
def test_emulated_warps_give_a_times_x_and_write_every_row(case):
    mat, B = CASES[case]
    problem = problem_of(mat)
    params = {"B": B, "UNROLL": 2, "BLOCK": 256}
    y = emulate(problem, *bsr_masked(problem, params), params)
    inputs = problem.inputs
    a = sp.csr_matrix((to_float64(inputs["values"], "fp32"), inputs["colind"], inputs["rowptr"]), shape=mat.shape)
    np.testing.assert_allclose(y, a @ to_float64(inputs["x"], "fp32"), rtol=1e-4, atol=1e-5)


def test_an_inf_in_x_reaches_only_the_rows_that_reference_it():
    """Block (0, 0) of a 3 x 3 grid holds entries (0, 0) and (1, 1) only: an Inf at x[1] must reach row 1, not row 0
    or row 2, whose block elements in column 1 are filled-in zeros."""
    mat = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]), np.array([0, 1, 2, 3])), shape=(3, 3))
    problem = problem_of(mat)
    problem.inputs["x"] = np.array([1.0, np.inf, 1.0], np.float32)
    params = {"B": 3, "UNROLL": 1, "BLOCK": 128}
    y = emulate(problem, *bsr_masked(problem, params), params)
    assert np.isinf(y[1]) and np.isfinite(y[[0, 2]]).all()


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmv_bsr")
    assert kernel.preparation == "bsr_masked" and "bsr_masked" in get_family("csr_spmv").preparations
    spec = parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 8}, "M": 2048, "K": 2048, "dtype": dtype})
    for params in ({"B": 3, "UNROLL": 2, "BLOCK": 256}, {"B": 8, "UNROLL": 4, "BLOCK": 512},
                   {"B": 2, "UNROLL": 1, "BLOCK": 128}):
        verify_compile_only(kernel.instantiate(params), spec, ("spmv_bsr",))



def test_the_planner_offers_it_first_on_dense_blocks_and_not_on_scattered_nonzeros(tmp_path):
    family = get_family("csr_spmv")
    blocks = matrix_spec(tmp_path, dense_blocks(8_000, 4, 10, 7), "blocks")
    ranked = family.strategies(blocks, family.features(blocks))
    assert ranked[0].kernel == "spmv_bsr" and ranked[0].start["B"] in (2, 4)
    rng, n = np.random.default_rng(8), 50_000
    rows, cols = rng.integers(0, n, 10 * n), rng.integers(0, n, 10 * n)
    scattered = matrix_spec(tmp_path, sp.csr_matrix((np.ones(10 * n), (rows, cols)), shape=(n, n)), "scattered")
    assert "spmv_bsr" not in {s.kernel for s in family.strategies(scattered, family.features(scattered))}


@pytest.mark.gpu
@pytest.mark.parametrize(("block", "params"), [(3, {"B": 3, "UNROLL": 2, "BLOCK": 256}),
                                               (8, {"B": 8, "UNROLL": 4, "BLOCK": 128}),
                                               (4, {"B": 2, "UNROLL": 1, "BLOCK": 512})])
def test_it_is_correct_and_clean_on_dense_blocks_on_the_gpu(tmp_path, block, params):
    """Correct on fresh inputs (IEEE specials in x and the values), at held-out shapes and in every timed run, and
    clean under compute-sanitizer's tools, on an FEM-like matrix whose last block row is cut short."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    spec = matrix_spec(tmp_path, dense_blocks(30_000 // block, block, 9, 11), f"blocks{block}")
    candidate = get_kernel("spmv_bsr").instantiate(params)
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=10, profile=False).verify(candidate, spec)
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message

"""SpMM with long rows cut into chunks (spmm_csr_split): a NumPy emulation of its lane groups (chunks shared out by a
warp's groups, batches of LANES nonzeros with UNROLL gathers, the groups' sums, partial rows summed in chunk order)
gives C = A B, writes every element once and keeps an Inf of B out of the rows that do not reference it (the gathers
past a batch read a stand-in row of B); it compiles without spills in every dtype; the planner offers it only where
some row is long and ranks it before row split where one row would keep a warp busy; on the GPU it is correct and
clean under compute-sanitizer. The tensor-core row groups are not offered where a group's tile would not fit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families.csr_spmm.cost import predicted_us
from sparseditto.tools.families.csr_spmv.preparations import long_row_chunk_ptr

from compile_checks import verify_compile_only
from spmm_problems import spmm_problem


def with_long_rows(M: int, K: int, lengths: dict[int, int], seed: int) -> sp.csr_matrix:
    """A sparse M x K matrix (about 3 nonzeros a row, some rows empty) whose rows in `lengths` hold that many."""
    rng = np.random.default_rng(seed)
    base = sp.random(M, K, density=3 / K, random_state=seed, format="lil")
    for row, n in lengths.items():
        base[row, :] = 0
        base[row, np.sort(rng.choice(K, size=n, replace=False))] = 1.0
    return sp.csr_matrix(base)


CASES = {
    # a row of exactly LONG_ROW (short), one just over (one chunk), one of exactly 2 chunks, one of 2 chunks and a bit
    "edges": with_long_rows(70, 900, {3: 64, 10: 65, 20: 256, 41: 300}, 1),
    "one_long_row_and_empty_rows": with_long_rows(33, 2000, {32: 1500}, 2),
    "no_long_row": with_long_rows(40, 300, {}, 3),
}
LONG_ROW, CHUNK = 64, 128


def emulate(problem, lanes: int, vw: int, unroll: int) -> np.ndarray:
    """The kernel's arithmetic group by group: each batch's products in the kernel's order (a product past the
    batch skipped, though its B row is loaded), the groups of a chunk's warp added in xor-tree order, partial rows
    summed in chunk order by the second launch."""
    arrays, symbols = long_row_chunk_ptr(problem, {"LONG_ROW": LONG_ROW, "CHUNK": CHUNK})
    rowptr, colind, values = (problem.inputs[k] for k in ("rowptr", "colind", "values"))
    B = problem.inputs["B"]
    M, N = problem.symbols["M"], problem.symbols["N"]
    groups = 32 // lanes
    C = np.full((M, N), np.nan, dtype=np.float32)  # every element must be written, once
    writes = np.zeros((M, N), dtype=np.int64)
    partial = np.full((max(symbols["n_long_chunks"], 1), N), np.nan, dtype=np.float32)

    def walk(first: int, hi: int, step: int) -> np.ndarray:
        acc = np.zeros(N, dtype=np.float32)
        for base in range(first, hi, step):
            count = min(lanes, hi - base)
            cols = [colind[base + i] if base + i < hi else 0 for i in range(lanes)]
            vals = [values[base + i] if base + i < hi else 0.0 for i in range(lanes)]
            for t in range(0, count, unroll):
                for u in range(unroll):
                    src = min(t + u, lanes - 1)
                    b = B[cols[src]]  # loaded whether or not the product is taken
                    if t + u < count:
                        acc += np.float32(vals[src]) * b
        return acc

    for c in range(symbols["n_long_chunks"]):
        i = arrays["chunk_long_index"][c]
        row = arrays["long_rows"][i]
        begin = arrays["chunk_start"][c]
        end = min(begin + CHUNK, rowptr[row + 1])
        sums = [walk(begin + g * lanes, end, 32) for g in range(groups)]
        offset = 1
        while offset < groups:  # xor shuffles at LANES, 2 LANES, ...: group g adds group g ^ offset
            sums = [sums[g] + sums[g ^ offset] for g in range(groups)]
            offset *= 2
        if arrays["long_chunk_ptr"][i + 1] - arrays["long_chunk_ptr"][i] == 1:
            C[row] = sums[0]
            writes[row] += 1
        else:
            partial[c] = sums[0]
    for row in range(M):
        if rowptr[row + 1] - rowptr[row] <= LONG_ROW:
            C[row] = walk(rowptr[row], rowptr[row + 1], lanes)
            writes[row] += 1
    for i in arrays["multi_rows"][: symbols["n_multi_rows"]]:
        total = np.zeros(N, dtype=np.float32)
        for k in range(arrays["long_chunk_ptr"][i], arrays["long_chunk_ptr"][i + 1]):
            total += partial[k]
        C[arrays["long_rows"][i]] = total
        writes[arrays["long_rows"][i]] += 1
    assert (writes == 1).all()
    return C


@pytest.mark.parametrize(("lanes", "unroll"), [(8, 8), (4, 2), (32, 4), (16, 8)])
@pytest.mark.parametrize("case", list(CASES))
def test_emulated_groups_give_a_times_b_and_write_every_element_once(case, lanes, unroll):
    problem = spmm_problem(CASES[case], 24, seed=lanes)
    A = sp.csr_matrix((problem.inputs["values"].astype(np.float64), problem.inputs["colind"],
                       problem.inputs["rowptr"]), shape=CASES[case].shape)
    np.testing.assert_allclose(emulate(problem, lanes, 4, unroll), A @ problem.inputs["B"].astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def test_an_inf_in_b_reaches_only_the_rows_that_reference_it():
    """The gathers past a batch load B's row 0 (a stand-in): an Inf there must not reach the rows without column 0."""
    problem = spmm_problem(CASES["edges"], 8)
    problem.inputs["B"][0, 5] = np.inf
    C = emulate(problem, 8, 4, 8)
    rowptr, colind = problem.inputs["rowptr"], problem.inputs["colind"]
    with_col_0 = {r for r in range(len(rowptr) - 1) if 0 in colind[rowptr[r]:rowptr[r + 1]]}
    assert set(np.flatnonzero(~np.isfinite(C[:, 5]))) == with_col_0
    assert np.isfinite(np.delete(C, 5, axis=1)).all()


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmm_csr_split")
    assert kernel.preparation == "long_row_chunk_ptr"
    spec = parse_spec({"operation": "spmm", "pattern": {"distribution": "power_law", "nnz_per_row": 12},
                       "M": 3001, "K": 3001, "N": 128, "dtype": dtype})
    vw = 4 if dtype == "fp32" else 8
    for lanes, unroll in ((32, 8), (8, 4), (4, 2)):
        verify_compile_only(kernel.instantiate({"VW": vw, "LANES": lanes, "WARPS": 4, "UNROLL": unroll,
                                                "LONG_ROW": 128, "CHUNK": 512}), spec,
                            ("spmm_split_main", "spmm_split_finish"))


def test_the_longest_row_bounds_row_split_and_not_the_split_kernel():
    """A 1M-row graph of 10M nonzeros with one row of 100,000: row split's group walks it alone."""
    skewed = {"nnz": 10e6, "rows": 1e6, "cols": 1e6, "row_max": 100_000.0, "dense_row_share": 0.02}
    even = {**skewed, "row_max": 40.0, "dense_row_share": 0.0}
    start = {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8, "LONG_ROW": 256, "CHUNK": 1024}
    rowsplit_skewed = predicted_us("spmm_csr_rowsplit", start, skewed, 32, 4)
    assert rowsplit_skewed > 4 * predicted_us("spmm_csr_rowsplit", start, even, 32, 4)
    assert predicted_us("spmm_csr_split", start, skewed, 32, 4) < rowsplit_skewed / 4


def test_uneven_rows_in_a_warp_cost_what_its_longest_row_walks_at_several_rows_a_warp_only():
    """Groups of a warp that each walk a row of their own wait for its longest (warp_imbalance); a warp per row
    does not; the split kernel's price reads the imbalance of the rows it walks by groups (`_short`)."""
    even = {"nnz": 10e6, "rows": 1e6, "cols": 1e6, "row_max": 40.0, "dense_row_share": 0.0}
    uneven = {**even, "warp_imbalance_4": 2.5, "warp_imbalance_short_4": 2.0}
    eight, thirty_two = {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8}, {"VW": 4, "LANES": 32, "WARPS": 4, "UNROLL": 8}
    assert predicted_us("spmm_csr_rowsplit", eight, uneven, 32, 4) > 1.5 * predicted_us("spmm_csr_rowsplit", eight, even, 32, 4)
    assert predicted_us("spmm_csr_rowsplit", thirty_two, uneven, 128, 4) == predicted_us("spmm_csr_rowsplit", thirty_two, even, 128, 4)
    split = {**eight, "LONG_ROW": 128, "CHUNK": 512}
    assert (predicted_us("spmm_csr_rowsplit", eight, uneven, 32, 4) > predicted_us("spmm_csr_split", split, uneven, 32, 4)
            > predicted_us("spmm_csr_split", split, even, 32, 4))


def test_the_planner_offers_it_only_where_some_row_is_long():
    from sparseditto.agents.planner import offline_plan

    def kernels(distribution: str, **pattern) -> list[str]:
        spec = parse_spec({"operation": "spmm", "pattern": {"distribution": distribution, **pattern},
                           "M": 200_000, "K": 200_000, "N": 32, "dtype": "fp32"})
        return [s.kernel for s in offline_plan(spec).strategies]

    skewed = kernels("power_law", nnz_per_row=16)
    assert "spmm_csr_split" in skewed
    assert skewed.index("spmm_csr_split") < skewed.index("spmm_csr_rowsplit")
    assert "spmm_csr_split" not in kernels("banded", density=0.0001)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_on_an_arrow_head_matrix_the_kernels_that_walk_the_dense_row_serially_are_priced_by_that_walk(tmp_path, dtype):
    """A diagonal with one dense row and column of 40,000: every kernel but the split one has a warp (or a lane
    group) take the dense row or its block row alone. BSR was priced first at a few microseconds in fp16 (its
    5,000-block chain unpriced); the split kernel leads, the others are priced at least at their chain."""
    from sparseditto.agents.planner import offline_plan
    from sparseditto.tools.families.csr_spmm.cost import ROUND_US

    n = 40_000
    arrow = sp.lil_matrix((n, n), dtype=np.float32)
    arrow.setdiag(1.0)
    arrow[0, :] = 1.0
    arrow[:, 0] = 1.0
    sp.save_npz(tmp_path / "arrow.npz", arrow.tocsr())
    plan = offline_plan(parse_spec({"operation": "spmm", "N": 32, "dtype": dtype,
                                    "pattern": {"kind": "matrix_file", "path": str(tmp_path / "arrow.npz")}}))
    assert plan.strategies[0].kernel == "spmm_csr_split"
    for s in plan.strategies[1:]:
        assert s.predicted_us > 1000 * ROUND_US / 8, (s.kernel, s.predicted_us)


def test_tensor_core_row_groups_are_not_offered_where_a_groups_tile_outgrows_shared_memory():
    """A group holding a row of thousands of nonzeros needs a tile of tens of thousands of columns."""
    from sparseditto.agents.planner import offline_plan
    from sparseditto.tools.families.csr_spmm import ROWGROUP_TILE_LIMIT, start_shared_bytes

    def plan(distribution: str, **pattern):
        return offline_plan(parse_spec({"operation": "spmm", "pattern": {"distribution": distribution, **pattern},
                                        "M": 200_000, "K": 200_000, "N": 32, "dtype": "fp16"}))

    skewed, banded = plan("power_law", nnz_per_row=16), plan("banded", density=0.0001)
    tensor_start = {"MT": 4, "WN": 1, "WK": 1, "KB": 2}
    assert start_shared_bytes("spmm_csr_tc_rowgroup", tensor_start, skewed.features) > ROWGROUP_TILE_LIMIT
    assert "spmm_csr_tc_rowgroup" not in [s.kernel for s in skewed.strategies]
    assert "spmm_csr_tc_rowgroup" in [s.kernel for s in banded.strategies]


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "n", "params"), [
    ("fp32", 32, {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8, "LONG_ROW": 128, "CHUNK": 256}),
    ("fp32", 77, {"VW": 1, "LANES": 32, "WARPS": 2, "UNROLL": 4, "LONG_ROW": 128, "CHUNK": 512}),
    ("fp16", 40, {"VW": 8, "LANES": 4, "WARPS": 8, "UNROLL": 2, "LONG_ROW": 256, "CHUNK": 256}),
    ("bf16", 128, {"VW": 8, "LANES": 16, "WARPS": 4, "UNROLL": 4, "LONG_ROW": 128, "CHUNK": 1024})])
def test_it_is_correct_and_clean_on_the_gpu(dtype, n, params):
    """Power-law rows (some of several chunks, some of one, most short), N no multiple of a group's columns at 40 and
    77; correct on fresh inputs, held-out shapes and in every timed run, clean under compute-sanitizer."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    spec = parse_spec({"operation": "spmm", "pattern": {"distribution": "power_law", "nnz_per_row": 24},
                       "M": 6001, "K": 5003, "N": n, "dtype": dtype})
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=5, profile=False).verify(
        get_kernel("spmm_csr_split").instantiate(params), spec)
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message

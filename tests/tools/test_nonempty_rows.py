"""The nonempty-rows SpMV (spmv_csr_nonempty): its preparation lists exactly the nonempty rows with their extents
and partitions them among the zero-filling blocks, a NumPy emulation of its launch (walk and fill, as the kernel
indexes them) stores every y once and gives y = A x, the kernel compiles in every dtype, the planner offers it first
on a mostly empty matrix and not on a full one, and the timing floor lets such a kernel move fewer bytes than CSR."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.csr_spmv.nonempty import FILL_ROWS_PER_THREAD, nonempty_rows
from sparseditto.tools.generators import generate

from compile_checks import verify_compile_only
from spmv_problems import matrix_spec, problem_of


def runs_of_empty_rows(M: int, K: int, empty: float, seed: int) -> sp.csr_matrix:
    """Rows empty in runs of random length, the others of 1-12 nonzeros; the first and last rows kept empty so
    that a fill block's range starts and ends on an empty row."""
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(M) < empty, 0, rng.integers(1, 13, M))
    lengths[:3] = 0
    lengths[-2:] = 0
    rowptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = np.concatenate([np.sort(rng.choice(K, size=n, replace=False)) for n in lengths] + [np.zeros(0, np.int64)])
    return sp.csr_matrix((np.ones(len(cols), np.float32), cols, rowptr), shape=(M, K))


def with_long_rows(mat: sp.csr_matrix, rows: list[int], length: int, seed: int) -> sp.csr_matrix:
    """`mat` with `rows` replaced by rows of `length` nonzeros (a warp each at LONG_ROW below `length`)."""
    rng = np.random.default_rng(seed)
    lil = sp.lil_matrix(mat)
    for r in rows:
        lil.rows[r] = sorted(rng.choice(mat.shape[1], size=length, replace=False).tolist())
        lil.data[r] = [1.0] * length
    return sp.csr_matrix(lil)


CASES = {
    "mostly_empty": with_long_rows(runs_of_empty_rows(5000, 3000, 0.9, 1), [17, 2100, 4990], 700, 1),
    "half_empty_wide": runs_of_empty_rows(700, 9000, 0.5, 2),
    "no_empty_row": runs_of_empty_rows(900, 400, 0.0, 3)[3:-2],
    "all_empty": sp.csr_matrix((3000, 50)),
    "one_nonempty_row": sp.csr_matrix((np.ones(3), ([2047, 2047, 2047], [0, 5, 9])), shape=(4100, 10)),
    "only_long_rows": with_long_rows(sp.csr_matrix((9000, 800)), [0, 4095, 4096, 8999], 300, 2),
    "empty_rows_mix": generate("empty_rows_mix", 6000, seed=3),
}
PARAMS = [{"BLOCK": 128, "GROUP": 1, "UNROLL": 2, "LONG_ROW": 64, "HINT": 1},
          {"BLOCK": 256, "GROUP": 4, "UNROLL": 1, "LONG_ROW": 32, "HINT": 0},
          {"BLOCK": 128, "GROUP": 16, "UNROLL": 4, "LONG_ROW": 512, "HINT": 1}]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"{p['BLOCK']}x{p['GROUP']}")
@pytest.mark.parametrize("case", list(CASES))
def test_the_lists_hold_exactly_the_nonempty_rows_and_each_fill_range_its_own(case, params):
    mat = CASES[case]
    rowptr = mat.indptr.astype(np.int64)
    M = mat.shape[0]
    arrays, symbols = nonempty_rows(problem_of(mat), params)
    assert all(a.dtype == np.int32 and len(a) >= 1 for a in arrays.values())
    lengths = np.diff(rowptr)
    long = [r for r in range(M) if lengths[r] > params["LONG_ROW"]]
    short = [r for r in range(M) if 0 < lengths[r] <= params["LONG_ROW"]]
    n_long, n_short = symbols["n_long"], symbols["n_short"]
    assert (n_long, n_short) == (len(long), len(short))
    n = n_long + n_short
    assert arrays["walk_row"][:n].tolist() == long + short
    assert arrays["fill_rows"][:n].tolist() == sorted(long + short)
    for i, r in enumerate(long + short):
        assert (arrays["walk_start"][i], arrays["walk_end"][i]) == (rowptr[r], rowptr[r + 1])
    fill = FILL_ROWS_PER_THREAD * params["BLOCK"]
    assert symbols["n_fill_blocks"] == -(-M // fill) and len(arrays["fill_first"]) == symbols["n_fill_blocks"] + 1
    for f in range(symbols["n_fill_blocks"]):
        lo, hi = arrays["fill_first"][f], arrays["fill_first"][f + 1]
        assert sorted(r for r in long + short if f * fill <= r < (f + 1) * fill) == arrays["fill_rows"][lo:hi].tolist()
    if case == "mostly_empty" and params["LONG_ROW"] < 700:
        assert n_long == 3


def emulate(problem, arrays, symbols, params):
    """The launch block by block as the kernel indexes it (the long rows' warps, the short rows' groups, then the
    fill); y starts as NaN (the harness poisons outputs) and every store is counted."""
    BLOCK, GROUP = params["BLOCK"], params["GROUP"]
    colind = problem.inputs["colind"]
    vals = to_float64(problem.inputs["values"], problem.dtype).astype(np.float32)
    x = to_float64(problem.inputs["x"], problem.dtype).astype(np.float32)
    M = len(problem.inputs["rowptr"]) - 1
    n_long, n_short = symbols["n_long"], symbols["n_short"]
    y = np.full(M, np.nan, np.float32)
    stores = np.zeros(M, np.int64)

    def group_sum(lo: int, hi: int) -> np.float32:
        """GROUP lanes over [lo, hi): aligned quads lane, lane + GROUP, ..., masked; the lanes' sums added."""
        lanes = np.zeros(GROUP, np.float32)
        for lane in range(GROUP):
            for a in range((lo & ~3) + 4 * lane, hi, 4 * GROUP):
                for k in range(max(a, lo), min(a + 4, hi)):
                    lanes[lane] = np.float32(lanes[lane] + vals[k] * x[colind[k]])
        return lanes.sum(dtype=np.float32)

    def store(i: int, value: np.float32) -> None:
        row = int(arrays["walk_row"][i])
        y[row] = value
        stores[row] += 1

    covered = np.zeros(len(colind), np.int64)
    for w in range(-(-n_long * 32 // BLOCK) * BLOCK // 32):  # long rows: 32 / GROUP slices of quad-aligned bounds
        if w >= n_long:
            continue
        start, end = int(arrays["walk_start"][w]), int(arrays["walk_end"][w])
        slices = 32 // GROUP
        base = start & ~3
        step = (-(-(end - base) // slices) + 3) & ~3
        bounds = [(max(start, base + s * step), min(end, base + (s + 1) * step)) for s in range(slices)]
        for lo, hi in bounds:
            covered[lo:hi] += 1
        store(w, np.sum([group_sum(lo, hi) for lo, hi in bounds], dtype=np.float32))
        assert (covered[start:end] == 1).all()  # the slices cover the row once
    for g in range(-(-n_short * GROUP // BLOCK) * BLOCK // GROUP):
        if g < n_short:
            i = n_long + g
            store(i, group_sum(int(arrays["walk_start"][i]), int(arrays["walk_end"][i])))
    fill = FILL_ROWS_PER_THREAD * BLOCK
    for f in range(symbols["n_fill_blocks"]):
        marked = np.zeros(fill, bool)
        for i in range(arrays["fill_first"][f], arrays["fill_first"][f + 1]):
            marked[arrays["fill_rows"][i] - f * fill] = True
        for r in range(fill):
            if f * fill + r < M and not marked[r]:
                y[f * fill + r] = 0.0
                stores[f * fill + r] += 1
    return y, stores


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"{p['BLOCK']}x{p['GROUP']}")
@pytest.mark.parametrize("case", ["mostly_empty", "half_empty_wide", "no_empty_row", "all_empty", "one_nonempty_row",
                                  "only_long_rows"])
def test_emulated_launch_stores_every_row_once_and_gives_a_times_x(case, params):
    problem = problem_of(CASES[case], seed=5)
    arrays, symbols = nonempty_rows(problem, params)
    y, stores = emulate(problem, arrays, symbols, params)
    assert (stores == 1).all()
    np.testing.assert_allclose(y, get_family("csr_spmv").reference(problem)["y"], rtol=1e-5, atol=1e-5)


def test_the_kernel_and_the_preparation_agree_on_the_rows_a_fill_block_owns():
    """The preparation's fill_first partitions by FILL_ROWS_PER_THREAD * BLOCK rows; the kernel's bitmap and loop by
    SD_FILL_ROWS. Were they to differ, rows would go unwritten or the bitmap overflow."""
    source = get_kernel("spmv_csr_nonempty").instantiate(PARAMS[0]).source
    assert f"#define SD_FILL_ROWS ({FILL_ROWS_PER_THREAD} * BLOCK)" in source


def _spec(dtype: str):
    return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 3000, "K": 2000, "dtype": dtype, "arch": "sm_90"})


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmv_csr_nonempty")
    assert kernel.preparation == "nonempty_rows" and "nonempty_rows" in get_family("csr_spmv").preparations
    for params in PARAMS:
        assert kernel.violated(params, {}, dtype) is None
        verify_compile_only(kernel.instantiate(params), _spec(dtype), ("spmv_nonempty",))



def test_the_planner_offers_it_first_on_a_mostly_empty_matrix_and_not_on_a_full_one(tmp_path):
    """On a matrix of 200,000 rows of which 95% are empty, every row-per-group walk is priced at its warps over all
    rows (the session-16 measurements), which the nonempty-rows walk does not start."""
    family = get_family("csr_spmv")
    empty = matrix_spec(tmp_path, runs_of_empty_rows(200_000, 50_000, 0.95, 4), "empty")
    ranked = family.strategies(empty, family.features(empty))
    assert ranked[0].kernel == "spmv_csr_nonempty"
    vec4 = next(s for s in ranked if s.kernel == "spmv_csr_vec4")
    assert vec4.predicted_us > 1.5 * ranked[0].predicted_us
    full = matrix_spec(tmp_path, runs_of_empty_rows(20_000, 5_000, 0.0, 5)[3:-2], "full")
    assert "spmv_csr_nonempty" not in {s.kernel for s in family.strategies(full, family.features(full))}


def test_the_timing_floor_counts_what_no_layout_avoids():
    """Values, the x entries the nonzeros can touch and y: a kernel that lists only the nonempty rows (or stores
    diagonals without column indices) honestly moves less than the CSR arrays, so the floor must not count them."""
    family = get_family("csr_spmv")
    s = {"M": 12_500_000, "K": 12_500_000, "N": 1, "nnz": 1_000_000}
    assert family.floor_bytes(s, "fp32") == 4 * (1_000_000 + 1_000_000 + 12_500_000)
    assert family.min_bytes(s, "fp32") > 2.5 * family.floor_bytes(s, "fp32")
    spmm = get_family("csr_spmm")
    s = {"M": 100, "K": 50, "N": 8, "nnz": 400}
    assert spmm.floor_bytes(s, "fp16") == 2 * (400 + (50 + 100) * 8)


@pytest.mark.gpu
def test_it_is_correct_and_clean_on_a_mostly_empty_matrix_on_the_gpu(tmp_path):
    """Correct on fresh inputs and held-out shapes, every timed run checked (the outputs poisoned before each, so a
    fill that missed a row shows), and clean under compute-sanitizer's tools, on 200,000 rows of which 95% are
    empty in runs."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    spec = matrix_spec(tmp_path, with_long_rows(runs_of_empty_rows(200_000, 50_000, 0.95, 6), [5, 70_000, 199_000],
                                                 3000, 7), "mostly_empty")
    candidate = get_kernel("spmv_csr_nonempty").instantiate({"BLOCK": 256, "GROUP": 2, "UNROLL": 2, "LONG_ROW": 64,
                                                             "HINT": 1})
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=10, profile=False).verify(candidate, spec)
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message

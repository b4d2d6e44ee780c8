"""CSR with 16-bit column offsets (spmv_csr_u16) on the CPU: the preparation `csr_u16` keeps every column exactly
(base + offset for the rows that fit, base -1 and the int32 columns for the wide rows it counts), a NumPy emulation
of the kernel's indexing (aligned quads, 8-byte offset loads inside the padded array, vector loads only inside the
values and columns, masks, wide rows through colind) writes every y once and gives y = A x, and the kernel compiles
and passes the compile-only verifier in every dtype."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Problem
from sparseditto.tools.families.csr_spmv.u16 import csr_u16
from sparseditto.tools.generators import generate

from compile_checks import verify_compile_only
from spmv_problems import problem_of


def rows_of(columns: list, K: int) -> sp.csr_matrix:
    """A CSR matrix with the given columns in each row (kept in the order given)."""
    rowptr = np.concatenate([[0], np.cumsum([len(c) for c in columns])])
    colind = np.concatenate([np.asarray(c, np.int64) for c in columns] + [np.zeros(0, np.int64)])
    return sp.csr_matrix((np.ones(len(colind), np.float32), colind, rowptr), shape=(len(columns), K))


def windows(M: int, K: int, width: int, per_row: int, seed: int) -> sp.csr_matrix:
    """Row r's columns drawn from a window of `width` columns that moves across K (a band in a wide matrix)."""
    rng = np.random.default_rng(seed)
    starts = np.linspace(0, K - width, M).astype(np.int64)
    return rows_of([np.sort(s + rng.choice(width, size=min(per_row, width), replace=False)) for s in starts], K)


def no_fitting_rows(M: int, K: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return rows_of([np.unique(np.concatenate([[0, K - 1], rng.integers(0, K, 5)])) for _ in range(M)], K)


def mixed(seed: int = 7) -> sp.csr_matrix:
    """Narrow rows, empty rows, the span boundary (65535 fits, 65536 does not), one huge wide row and one huge
    narrow row, in a matrix far wider than 65536."""
    rng = np.random.default_rng(seed)
    K = 1_000_000
    columns = []
    for r in range(300):
        kind = r % 6
        if kind == 0:
            columns.append([])
        elif kind == 1:
            columns.append([r, r + 65535])  # span 65535: fits
        elif kind == 2:
            columns.append([r, r + 65536])  # span 65536: falls back
        else:
            base = int(rng.integers(0, K - 60000))
            columns.append(np.sort(base + rng.choice(60000, size=int(rng.integers(1, 30)), replace=False)))
    columns[100] = np.sort(rng.choice(K, size=5000, replace=False))  # huge and wide
    columns[201] = np.sort(400_000 + rng.choice(65536, size=5001, replace=False))  # huge, inside one window
    return rows_of(columns, K)


CASES = {
    "k_below_65536": sp.random(300, 60000, density=0.0005, format="csr", random_state=1),
    "band_in_wide_matrix": windows(250, 3_000_000, 50_000, 37, seed=2),
    "no_fitting_rows": no_fitting_rows(120, 200_000, seed=3),
    "mixed": mixed(),
    "unsorted_columns": rows_of([[70000, 5, 65000, 9], [3], [], [200000, 1, 150000], [8, 7, 6, 5, 4]], 300_000),
    "all_empty": sp.csr_matrix((33, 100_000)),
    "stencil_2d": generate("stencil_2d", 20000, seed=1),
    "power_law_graph": generate("power_law_graph", 20000, seed=1),
    "lp_rectangular": generate("lp_rectangular", 20000, seed=4),
}


def spans(mat: sp.csr_matrix) -> np.ndarray:
    return np.array([np.ptp(mat.indices[a:b]) if b > a else 0 for a, b in zip(mat.indptr[:-1], mat.indptr[1:])])


@pytest.mark.parametrize("case", list(CASES))
def test_the_preparation_keeps_every_column_and_marks_exactly_the_wide_rows(case):
    mat = CASES[case]
    problem = problem_of(mat, sort=case != "unsorted_columns")
    rowptr, colind = problem.inputs["rowptr"], problem.inputs["colind"]
    M, nnz = mat.shape[0], mat.nnz
    arrays, symbols = csr_u16(problem, {})
    col16, base = arrays["col16"], arrays["row_base"]
    assert set(arrays) == {"col16", "row_base"} and col16.dtype == np.uint16 and base.dtype == np.int32
    assert len(col16) % 4 == 0 and len(col16) >= max(nnz, 1) and len(base) == max(M, 1)
    expected_wide = np.flatnonzero(spans(mat) >= 65536)
    assert symbols["n_wide_rows"] == len(expected_wide)
    assert symbols["wide_nnz"] == int(np.diff(rowptr)[expected_wide].sum())
    for r in range(M):
        lo, hi = rowptr[r], rowptr[r + 1]
        if r in set(expected_wide.tolist()):
            assert base[r] == -1
        else:
            assert base[r] == (colind[lo:hi].min() if hi > lo else 0)
            assert (base[r] + col16[lo:hi].astype(np.int64) == colind[lo:hi]).all(), r
    assert (col16[nnz:] == 0).all()


def test_the_span_boundary_and_what_fell_back():
    arrays, symbols = csr_u16(problem_of(CASES["mixed"]), {})
    base = arrays["row_base"]
    assert (base[1::6] >= 0).all() and (base[2::6] == -1).all()  # 65535 fits, 65536 does not
    assert base[201] == CASES["mixed"].indices[CASES["mixed"].indptr[201]]  # the huge narrow row: its first column
    assert base[100] == -1  # the huge wide row
    assert symbols["wide_nnz"] == 5000 + 2 * 50  # the huge wide row and 50 rows of span 65536
    arrays, symbols = csr_u16(problem_of(CASES["no_fitting_rows"]), {})
    assert symbols["n_wide_rows"] == 120 and symbols["wide_nnz"] == CASES["no_fitting_rows"].nnz
    arrays, symbols = csr_u16(problem_of(CASES["k_below_65536"]), {})
    assert symbols == {"n_wide_rows": 0, "wide_nnz": 0}


@pytest.mark.parametrize(("cls", "scale", "fits"), [("stencil_2d", 400_000, True), ("random_band", 2_600_000, True),
                                                     ("power_law_graph", 1_200_000, False)])
def test_generated_matrices_wider_than_65536(cls, scale, fits):
    """Banded and stencil matrices keep all their rows at 16 bits whatever K; a power-law graph over more than
    65536 columns sends its long rows back to int32."""
    mat = generate(cls, scale, seed=5)
    assert mat.shape[1] > 65536
    problem = problem_of(mat)
    arrays, symbols = csr_u16(problem, {})
    if fits:
        assert symbols == {"n_wide_rows": 0, "wide_nnz": 0}
    else:
        assert symbols["wide_nnz"] > mat.nnz // 2
    narrow = np.repeat(arrays["row_base"] >= 0, np.diff(mat.indptr))
    rows = np.repeat(np.arange(mat.shape[0]), np.diff(mat.indptr))
    rebuilt = arrays["row_base"][rows].astype(np.int64) + arrays["col16"][:mat.nnz]
    assert (rebuilt[narrow] == mat.indices[narrow]).all()


def emulate(problem: Problem, arrays, symbols, params):
    """The launch as the kernel indexes it: one group of GROUP lanes per row over the offsets, or over the int32
    columns for a wide row (fp32 products and sums in each lane's order, the shuffle tree). Returns y and how many
    times each row was stored."""
    GROUP, UNROLL, BLOCK = params["GROUP"], params["UNROLL"], params["BLOCK"]
    rowptr, colind = problem.inputs["rowptr"].astype(np.int64), problem.inputs["colind"]
    vals = to_float64(problem.inputs["values"], problem.dtype).astype(np.float32)
    x = to_float64(problem.inputs["x"], problem.dtype).astype(np.float32)
    M, nnz = len(rowptr) - 1, int(rowptr[-1])
    words = arrays["col16"].view(np.uint32)
    y = np.full(M, np.nan, np.float32)
    stores = np.zeros(M, np.int64)

    def walk(lo, hi, lane, columns):
        acc = np.float32(0)
        for a in range((lo & ~3) + 4 * lane, hi, 4 * GROUP * UNROLL):
            for u in range(UNROLL):
                aa = a + u * 4 * GROUP
                if aa >= hi:
                    continue
                assert aa % 4 == 0 and aa >= 0
                cols = columns(aa)
                for e in range(4):
                    if lo <= aa + e < hi:
                        assert aa + e < nnz
                        acc = np.float32(acc + vals[aa + e] * x[cols[e]])
        return acc

    def reduce(lanes):
        lanes = np.array(lanes, np.float32)
        offset = len(lanes) // 2
        while offset:
            lanes[:offset] = lanes[:offset] + lanes[offset:2 * offset]
            offset //= 2
        return lanes[0]

    def offsets_at(base):
        def columns(aa):
            assert aa + 4 <= len(arrays["col16"])  # one 8-byte load, inside the padded array
            lo_word, hi_word = int(words[aa // 2]), int(words[aa // 2 + 1])
            return [base + (w & 0xFFFF) for w in (lo_word, lo_word >> 16, hi_word, hi_word >> 16)]
        return columns

    def int32_columns(aa):
        return colind[aa:min(aa + 4, nnz)]  # one 16-byte load when aa + 4 <= nnz, else element by element

    threads = -(-M * GROUP // BLOCK) * BLOCK
    for row in range(threads // GROUP):
        if row >= M:
            continue
        base = int(arrays["row_base"][row])
        lo, hi = rowptr[row], rowptr[row + 1]
        columns = int32_columns if base < 0 else offsets_at(base)
        y[row] = reduce([walk(lo, hi, lane, columns) for lane in range(GROUP)])
        stores[row] += 1
    return y, stores


PARAMS = [{"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1}, {"GROUP": 1, "UNROLL": 1, "BLOCK": 128, "HINT": 0},
          {"GROUP": 32, "UNROLL": 4, "BLOCK": 512, "HINT": 1}]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"g{p['GROUP']}u{p['UNROLL']}")
@pytest.mark.parametrize("case", list(CASES))
def test_emulated_kernel_stores_every_row_once_and_gives_a_times_x(case, params):
    problem = problem_of(CASES[case], seed=13, sort=case != "unsorted_columns")
    arrays, symbols = csr_u16(problem, params)
    y, stores = emulate(problem, arrays, symbols, params)
    assert (stores == 1).all()
    np.testing.assert_allclose(y, get_family("csr_spmv").reference(problem)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_emulation_in_16_bit_types_on_the_family_problem(dtype):
    family = get_family("csr_spmv")
    spec = parse_spec({"operation": "spmv", "pattern": {"distribution": "banded", "nnz_per_row": 7},
                       "M": 900, "K": 200_000, "dtype": dtype})
    problem = family.make_problem(spec, seed=2)
    params = PARAMS[0]
    arrays, symbols = family.preparations["csr_u16"](problem, params)
    y, stores = emulate(problem, arrays, symbols, params)
    assert (stores == 1).all()
    np.testing.assert_allclose(y, family.reference(problem)["y"], rtol=1e-4, atol=1e-4)


def _spec(dtype: str):
    return parse_spec({"operation": "spmv", "pattern": {"distribution": "banded", "nnz_per_row": 16},
                       "M": 4000, "K": 4000, "dtype": dtype, "arch": "sm_90"})


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmv_csr_u16")
    assert kernel.preparation == "csr_u16" and "csr_u16" in get_family("csr_spmv").preparations
    for params in PARAMS:
        report = verify_compile_only(kernel.instantiate(params), _spec(dtype), ("spmv_csr_u16",))
        if report.sass:  # the quads are vector loads: 128-bit for fp32 values and for the int32 columns of wide rows
            assert report.sass["spmv_csr_u16"].global_loads_128 > 0

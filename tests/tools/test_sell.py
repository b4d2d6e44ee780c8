"""SELL-C-sigma (spmv_sell_c_sigma): the preparation holds the CSR matrix exactly (every row once, its entries in
order, padding consistent), a NumPy emulation of the kernel's loop over the prepared arrays gives y = A x, and
the kernel compiles and passes the compile-only verifier in every dtype."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Output, Problem
from sparseditto.tools.families.csr_spmv.sell import sell_c_sigma

from compile_checks import verify_compile_only


def csr_problem(lengths, dtype="fp32", seed=0, K=None):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    K = int(K or max(lengths.max(initial=0), 1))
    rowptr = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=rowptr[1:])
    nnz = int(rowptr[-1])
    cols = [np.sort(rng.choice(K, size=n, replace=False)) for n in lengths]
    colind = np.concatenate([*cols, np.zeros(0, np.int64)]).astype(np.int32)
    values = to_storage(rng.uniform(-1, 1, size=nnz).astype(np.float32), dtype)
    x = to_storage(rng.uniform(-1, 1, size=K).astype(np.float32), dtype)
    return Problem(dtype=dtype, symbols={"M": len(lengths), "K": K, "N": 1, "nnz": nnz},
                   inputs={"rowptr": rowptr, "colind": colind, "values": values, "x": x},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": dtype, "x": dtype},
                   outputs={"y": Output((len(lengths),), dtype, 1e-5)})


def _random_lengths(seed, M, long_row=None):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, size=M)
    lengths[rng.random(M) < 0.2] = 0  # empty rows
    if long_row is not None:
        lengths[long_row] = 300
    return lengths.tolist()


CASES = [
    ([3, 100, 0, 1000, 65, 64, 129, 7], 8, 256),
    (_random_lengths(1, 37), 8, 256),          # M not a multiple of C
    (_random_lengths(2, 300, long_row=123), 16, 256),  # M not a multiple of SIGMA, one long row
    (_random_lengths(3, 1000, long_row=0), 32, 1024),
    (_random_lengths(4, 5), 32, 1024),          # fewer rows than one slice
    ([0, 0, 0], 8, 256),                        # no nonzeros at all
    ([0] * 40 + [1], 8, 256),
]


@pytest.mark.parametrize(("lengths", "C", "sigma"), CASES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_sell_preparation_reconstructs_the_csr_matrix_exactly(lengths, C, sigma, dtype):
    problem = csr_problem(lengths, dtype=dtype, K=max(max(lengths, default=0), 1) + 5)
    rowptr, colind, values = (problem.inputs[k] for k in ("rowptr", "colind", "values"))
    arrays, symbols = sell_c_sigma(problem, {"C": C, "SIGMA": sigma, "BLOCK": 128})
    M = len(lengths)
    n_slices = symbols["n_slices"]
    perm, row_len = arrays["row_perm"][:M], arrays["row_len"][:M]
    slice_ptr, slice_len = arrays["slice_ptr"][:n_slices], arrays["slice_len"][:n_slices]
    cols, vals = arrays["sell_cols"], arrays["sell_vals"]

    for arr in ("sell_cols", "slice_ptr", "slice_len", "row_perm", "row_len"):
        assert arrays[arr].dtype == np.int32, arr
    assert vals.dtype == values.dtype
    assert n_slices == -(-M // C)
    assert sorted(perm.tolist()) == list(range(M))  # every row exactly once
    for w in range(0, M, sigma):  # rows move only within their window, sorted longest first
        assert set(perm[w:w + sigma].tolist()) == set(range(w, min(w + sigma, M)))
        assert (np.diff(row_len[w:w + sigma]) <= 0).all()
    assert (row_len == np.diff(rowptr)[perm]).all()
    # slices are contiguous, each padded to its longest row, C lanes wide
    ends = np.concatenate([slice_ptr[1:], [symbols["sell_nnz"]]]) if n_slices else np.zeros(0)
    assert (ends - slice_ptr == slice_len * C).all()
    assert symbols["sell_nnz"] == int((slice_len * C).sum())
    assert len(cols) == len(vals) == max(symbols["sell_nnz"], 1)
    for s in range(n_slices):
        assert slice_len[s] == row_len[s * C:(s + 1) * C].max()

    for r in range(n_slices * C):
        s, lane = divmod(r, C)
        slots = slice_ptr[s] + np.arange(slice_len[s]) * C + lane
        n = int(row_len[r]) if r < M else 0
        if r < M:
            orig = perm[r]
            lo, hi = rowptr[orig], rowptr[orig + 1]
            assert (cols[slots[:n]] == colind[lo:hi]).all(), r
            assert (vals[slots[:n]].view(np.uint8) == values[lo:hi].view(np.uint8)).all(), r
        pad_col = cols[slots[n - 1]] if n else 0
        assert (cols[slots[n:]] == pad_col).all(), r  # padding repeats the last column, or 0
        assert (to_float64(vals[slots[n:]], dtype) == 0).all(), r  # and carries value 0


def emulate_kernel(arrays, symbols, x, M, K, C, dtype):
    """The kernel's loop, thread by thread: two fp32 chains over the row's true length, then y[row_perm[r]]."""
    cols, vals = arrays["sell_cols"], to_float64(arrays["sell_vals"], dtype).astype(np.float32)
    xf = to_float64(x, dtype).astype(np.float32)
    y = np.full(M, np.nan, dtype=np.float32)
    for r in range(M):
        s, lane = divmod(r, C)
        base = int(arrays["slice_ptr"][s]) + lane
        n = min(int(arrays["row_len"][r]), int(arrays["slice_len"][s]))
        n = 0 if base >= symbols["sell_nnz"] else min(n, -(-(symbols["sell_nnz"] - base) // C))
        acc = [np.float32(0), np.float32(0)]
        for j in range(n):
            c = cols[base + j * C]
            if 0 <= c < K:
                acc[j % 2] = np.float32(acc[j % 2] + vals[base + j * C] * xf[c])
        y[arrays["row_perm"][r]] = acc[0] + acc[1]
    return y


@pytest.mark.parametrize(("lengths", "C", "sigma"), CASES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_emulation_over_the_prepared_arrays_gives_a_times_x(lengths, C, sigma, dtype):
    problem = csr_problem(lengths, dtype=dtype, seed=7, K=max(max(lengths, default=0), 1) + 3)
    arrays, symbols = sell_c_sigma(problem, {"C": C, "SIGMA": sigma, "BLOCK": 256})
    M, K = problem.symbols["M"], problem.symbols["K"]
    y = emulate_kernel(arrays, symbols, problem.inputs["x"], M, K, C, dtype)
    rowptr = problem.inputs["rowptr"]
    a = to_float64(problem.inputs["values"], dtype)
    xf = to_float64(problem.inputs["x"], dtype)
    expected = np.array([a[rowptr[i]:rowptr[i + 1]] @ xf[problem.inputs["colind"][rowptr[i]:rowptr[i + 1]]]
                         for i in range(M)])
    assert not np.isnan(y).any()  # every row written, empty ones with 0
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_sell_preparation_on_the_family_problem_and_bad_sigma():
    family = get_family("csr_spmv")
    spec = parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 333, "K": 200, "dtype": "fp16"})
    problem = family.make_problem(spec, seed=1)
    assert "sell_c_sigma" in family.preparations
    arrays, symbols = family.preparations["sell_c_sigma"](problem, {"C": 16, "SIGMA": 256, "BLOCK": 128})
    y = emulate_kernel(arrays, symbols, problem.inputs["x"], 333, problem.symbols["K"], 16, "fp16")
    assert not np.isnan(y).any()
    with pytest.raises(ValueError, match="multiple of C"):
        sell_c_sigma(problem, {"C": 32, "SIGMA": 48, "BLOCK": 128})


def _kernel():
    return next(k for k in reference_kernels() if k.name == "spmv_sell_c_sigma")


def _spec(dtype):
    return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 1000, "K": 700, "dtype": dtype, "arch": "sm_90"})


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_sell_kernel_compiles_and_passes_the_compile_only_verifier(dtype):
    kernel = _kernel()
    assert kernel.preparation == "sell_c_sigma"
    for params in ({"C": 32, "SIGMA": 1024, "BLOCK": 256}, {"C": 8, "SIGMA": 256, "BLOCK": 128}):
        verify_compile_only(kernel.instantiate(params), _spec(dtype), ("spmv_sell_c_sigma",))

"""Preparations cached by structure (tools/families/structure_cache.py): the same arrays as a preparation made from
scratch whatever the values, no hit across structures, and the reused structure's time kept in the one-time cost."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.tools.families import structure_cache
from sparseditto.tools.families.base import Problem
from sparseditto.tools.families.csr_spmv.diagonal import diagonals
from sparseditto.tools.families.csr_spmv.sell import sell_c_sigma
from sparseditto.tools.families.csr_spmv.u16 import csr_u16

from test_dia import problem_of

PREPARATIONS = [(diagonals, {"MAX_DIAGS": 8, "BLOCK": 256}), (sell_c_sigma, {"C": 32, "SIGMA": 128, "BLOCK": 256}),
                (csr_u16, {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1})]
GATHERED = {"dia_vals", "values_rest", "sell_vals"}  # the value arrays; csr_u16 has none (it reads `values` itself)


def with_values(problem: Problem, seed: int) -> Problem:
    values = np.random.default_rng(seed).uniform(-1, 1, problem.inputs["values"].size).astype(np.float32)
    return Problem(dtype=problem.dtype, symbols=problem.symbols, inputs={**problem.inputs, "values": values},
                   input_dtypes=problem.input_dtypes, outputs=problem.outputs)


@pytest.fixture(autouse=True)
def empty_cache():
    structure_cache._cache.clear()
    structure_cache.reused_ms()
    yield
    structure_cache._cache.clear()


def a_matrix(seed: int) -> sp.csr_matrix:
    mat = sp.random(300, 280, density=0.03, format="csr", random_state=seed)
    mat = (mat + sp.diags(np.ones(280), 0, shape=(300, 280)) + sp.diags(np.ones(279), 1, shape=(300, 280))).tocsr()
    mat.sort_indices()
    return mat


@pytest.mark.parametrize("prepare, params", PREPARATIONS)
def test_a_cached_structure_gathers_each_call_s_own_values(prepare, params):
    first = problem_of(a_matrix(1))
    again = with_values(first, 7)
    prepare(first, params)
    cached_arrays, cached_symbols = prepare(again, params)
    structure_cache._cache.clear()
    fresh_arrays, fresh_symbols = prepare(again, params)
    assert cached_symbols == fresh_symbols
    assert cached_arrays.keys() == fresh_arrays.keys()
    for name in fresh_arrays:
        np.testing.assert_array_equal(cached_arrays[name], fresh_arrays[name], err_msg=name)
    for name in GATHERED & cached_arrays.keys():
        assert not np.array_equal(prepare(first, params)[0][name], cached_arrays[name]), name
    # the structure every call shares cannot be written through one call's arrays
    assert all(not a.flags.writeable for name, a in cached_arrays.items() if name not in GATHERED)


@pytest.mark.parametrize(("prepare", "params", "read"), [(*p, r) for p, r in zip(PREPARATIONS, ({"MAX_DIAGS": 4}, {"C": 16}, {}))])
def test_another_structure_or_a_parameter_it_reads_make_their_own_and_other_parameters_share(prepare, params, read):
    prepare(problem_of(a_matrix(1)), params)
    prepare(problem_of(a_matrix(2)), params)
    assert len(structure_cache._cache) == 2
    prepare(problem_of(a_matrix(2)), {**params, "BLOCK": 128, "UNROLL": 4})  # read by the kernel, not the preparation
    assert len(structure_cache._cache) == 2
    prepare(problem_of(a_matrix(2)), {**params, **read})
    assert len(structure_cache._cache) == 2 + bool(read)


def test_a_reused_structure_counts_its_making_time_once_per_call():
    problem = problem_of(a_matrix(3))
    diagonals(problem, PREPARATIONS[0][1])
    assert structure_cache.reused_ms() == 0.0
    made = next(iter(structure_cache._cache.values())).ms
    diagonals(with_values(problem, 5), PREPARATIONS[0][1])
    assert structure_cache.reused_ms() == pytest.approx(made) and made > 0
    assert structure_cache.reused_ms() == 0.0

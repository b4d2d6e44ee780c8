"""The offline planner: strategies from the matrix's features, starts inside valid search spaces."""

from __future__ import annotations

import pytest

from sparseditto.agents.planner import is_valid_choice, offline_plan
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec


def spmv(distribution, dtype="fp32"):
    return parse_spec({"operation": "spmv", "pattern": {"distribution": distribution, "nnz_per_row": 16},
                       "M": 20000, "K": 20000, "dtype": dtype})


def spmm(dtype="fp32", distribution="uniform", n=64):
    return parse_spec({"operation": "spmm", "pattern": {"distribution": distribution, "density": 0.02},
                       "M": 1024, "K": 1024, "N": n, "dtype": dtype})


@pytest.mark.parametrize("spec", [spmv("uniform"), spmv("power_law", "bf16"), spmm("fp32"), spmm("fp16")],
                         ids=["spmv-uniform", "spmv-powerlaw-bf16", "spmm-fp32", "spmm-fp16"])
def test_strategies_start_inside_valid_spaces(spec):
    plan = offline_plan(spec)
    assert plan.family == spec.family
    assert len(plan.strategies) >= 2
    assert plan.acceptance.target_speedup > plan.acceptance.min_speedup >= 1.0
    for s in plan.strategies:
        kernel = get_kernel(s.kernel)
        assert kernel.family == spec.family and spec.dtype in kernel.dtypes
        assert set(s.start) == set(kernel.parameters)
        for name, value in s.start.items():
            assert value in s.space[name], (s.kernel, name)
            assert set(s.space[name]) <= set(kernel.parameters[name])
        assert is_valid_choice(s.kernel, s.start, spec.dtype, plan.symbols)
        kernel.instantiate(s.start)


def test_features_describe_the_matrix():
    feats = offline_plan(spmm()).features
    assert (feats["rows"], feats["cols"]) == (1024, 1024)
    assert feats["nnz"] == pytest.approx(0.02 * 1024 * 1024, rel=0.01)
    assert feats["row_mean"] == pytest.approx(20.48, rel=0.05)


def test_skewed_rows_lead_with_a_kernel_that_balances_them():
    skewed = offline_plan(spmv("power_law"))
    assert skewed.features["row_cv"] > 1.0 or skewed.features["row_max"] > 16 * 16
    assert get_kernel(skewed.strategies[0].kernel).strategy in {"skewed", "merge_path"}
    even = offline_plan(spmv("uniform"))
    assert even.features["row_cv"] == 0.0
    assert get_kernel(even.strategies[0].kernel).strategy not in {"skewed", "merge_path"}


def test_sixteen_bit_spaces_drop_vector_widths_over_16_bytes():
    for s in offline_plan(spmm("fp32")).strategies:
        if "VW" in s.space:
            assert max(s.space["VW"]) * 4 <= 16
    for s in offline_plan(spmm("bf16")).strategies:
        if "VW" in s.space:
            assert max(s.space["VW"]) * 2 <= 16


def test_rows_sharing_columns_lead_with_tensor_cores_for_16_bit_values():
    uniform, banded = offline_plan(spmm("fp16")), offline_plan(spmm("fp16", "banded"))
    assert uniform.features["group_overlap"] < 1.5 < 2.0 <= banded.features["group_overlap"]
    assert uniform.strategies[0].kernel == "spmm_csr_rowsplit"
    assert "spmm_csr_tc_rowgroup" in [s.kernel for s in uniform.strategies]
    assert banded.strategies[0].kernel == "spmm_csr_tc_rowgroup"
    # fp32 has no tensor-core strategy whatever the pattern
    assert "spmm_csr_tc_rowgroup" not in [s.kernel for s in offline_plan(spmm("fp32", "banded")).strategies]


def test_tensor_core_column_tiles_past_n_are_not_valid_choices():
    assert is_valid_choice("spmm_csr_tc_rowgroup", {"MT": 4, "WN": 4, "WK": 1, "KB": 2}, "fp16", {"N": 256})
    assert not is_valid_choice("spmm_csr_tc_rowgroup", {"MT": 8, "WN": 4, "WK": 1, "KB": 2}, "fp16", {"N": 256})
    assert not is_valid_choice("spmm_csr_tc_rowgroup", {"MT": 4, "WN": 8, "WK": 1, "KB": 2}, "fp16", {"N": 256})
    assert is_valid_choice("spmm_csr_tc_rowgroup", {"MT": 16, "WN": 1, "WK": 1, "KB": 2}, "fp16", {"N": 8})
    plan = offline_plan(spmm("fp16", "banded"))
    assert plan.features["N"] == 64
    tc = next(s for s in plan.strategies if s.kernel == "spmm_csr_tc_rowgroup")
    assert is_valid_choice(tc.kernel, tc.start, "fp16", plan.symbols)


def test_vector_widths_past_16_bytes_break_the_declared_constraint():
    symbols = {"M": 8, "K": 8, "N": 64, "nnz": 8}
    assert is_valid_choice("spmm_csr_rowsplit", {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "fp32", symbols)
    assert not is_valid_choice("spmm_csr_rowsplit", {"VW": 8, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "fp32", symbols)
    assert is_valid_choice("spmm_csr_rowsplit", {"VW": 8, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "fp16", symbols)
    assert not is_valid_choice("spmm_csr_rowsplit", {"VW": 1, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "bf16", symbols)



def test_row_split_groups_cover_n_with_16_byte_loads_and_never_idle_most_lanes():
    from sparseditto.tools.families.csr_spmm import rowsplit_lanes

    assert [rowsplit_lanes(n, 4) for n in (1, 16, 32, 64, 128, 512)] == [4, 4, 8, 16, 32, 32]
    assert [rowsplit_lanes(n, 8) for n in (32, 128)] == [4, 16]
    symbols = {"M": 8, "K": 8, "N": 32, "nnz": 8}
    assert is_valid_choice("spmm_csr_rowsplit", {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "fp32", symbols)
    assert not is_valid_choice("spmm_csr_rowsplit", {"VW": 4, "LANES": 32, "WARPS": 4, "UNROLL": 8}, "fp32", symbols)
    for dtype, n, lanes in (("fp32", 32, 8), ("fp32", 128, 32), ("fp16", 32, 4)):
        start = next(s for s in offline_plan(spmm(dtype, n=n)).strategies if s.kernel == "spmm_csr_rowsplit").start
        assert start["LANES"] == lanes and start["VW"] * {"fp32": 4, "fp16": 2}[dtype] == 16
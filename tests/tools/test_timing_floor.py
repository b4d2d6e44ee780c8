"""The timing floor a measurement must not beat: a 2:4 product counted dense-equivalent may run at twice the dense
tensor-core rate, so the floor must allow it (else a fast, honest kernel would be rejected as a suspect timing)."""

from __future__ import annotations

import pytest

from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.runner import timing_floor

H200 = {"cc": 90, "sms": 132, "clock_khz": 1_980_000}
COPY = 4.25e12


def floor_of(spec_fields):
    spec = parse_spec(spec_fields)
    family = get_family(spec.family)
    return family, timing_floor(family, family.make_problem(spec, 1), H200, COPY)


def test_a_sparse_tensor_core_product_may_run_at_twice_the_dense_rate():
    family, floor = floor_of({"operation": "spmm", "pattern": {"kind": "n_m"},
                              "M": 1024, "K": 1024, "N": 1024, "dtype": "fp16"})
    bytes_us, peak, floor_us = floor.bytes_us, floor.peak, floor.floor_us
    assert family.flop_rate_factor == 2.0
    dense_fp16 = 4096 * 132 * 1.98e9
    assert peak == pytest.approx(2 * dense_fp16)
    # 2 * 1024^3 dense-equivalent FLOPs at twice the dense rate: half the dense-rate floor
    assert floor_us == pytest.approx(max(bytes_us, 2 * 1024**3 / (2 * dense_fp16) * 1e6))


def test_csr_families_keep_the_dense_rate():
    family, floor = floor_of({"operation": "spmv", "pattern": {"nnz_per_row": 8}, "M": 4096, "K": 4096})
    assert family.flop_rate_factor == 1.0 and floor.peak == pytest.approx(2048 * 132 * 1.98e9)  # fp32 counts as tf32

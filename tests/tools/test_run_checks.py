"""The benchmark's device checks: the kernels compile without a GPU; on the GPU they read subnormal outputs as they
are and count exactly the elements outside their bounds and the changed input bytes."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.run_checks import CHECK_SOURCE, RunChecker
from sparseditto.tools.values import element_ok, numerics


def test_the_check_kernels_compile_and_pass_the_harness_own_static_check():
    from sparseditto.tools.source_check import check_compiled

    result = compile_source(CHECK_SOURCE, "sm_90", [])
    assert result.ok, result.log
    found = check_compiled(result)
    assert found == [] or isinstance(found, str), found  # a string: the disassembler is missing here


def sample(dtype: str, rng: np.random.Generator):
    """Outputs of a type with subnormal, huge, NaN and infinite references, some elements wrong."""
    tiny = numerics(dtype).smallest_normal
    ref = np.concatenate([rng.normal(size=500), rng.normal(size=100) * tiny / 8, [np.nan, np.inf, -np.inf, 0.0]])
    stored = to_storage(ref, dtype)
    out = to_float64(stored, dtype)
    bound = np.abs(ref - out) + numerics(dtype).smallest_subnormal
    bound[~np.isfinite(bound)] = 0.0
    wrong = rng.choice(500, 7, replace=False)
    stored[wrong] = to_storage(out[wrong] + 1.0, dtype)
    stored[500:510] = to_storage(np.zeros(10), dtype)  # subnormal results flushed
    return stored, ref, bound


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_the_device_count_equals_the_host_rule(dtype):
    import cupy as cp

    stored, ref, bound = sample(dtype, np.random.default_rng(3))
    expected = int((~element_ok(to_float64(stored, dtype), ref, bound, numerics(dtype).largest)).sum())
    assert expected >= 7
    checker = RunChecker(2)
    checker.prepare({dtype})
    checker.outside(1, cp.asarray(stored), dtype, cp.asarray(ref), cp.asarray(bound), numerics(dtype).largest)
    a, b = cp.arange(1000, dtype=cp.int32), cp.arange(1000, dtype=cp.int32)
    b[[3, 999]] = -1
    checker.differ(0, a, b)
    assert checker.counts.get()[1, 0] == expected and checker.counts.get()[0, 1] == 8
    assert checker.failing_runs() == ([1], [0])

"""Every baseline configuration that works on this GPU computes the family's product, for each value type; each
library offers at least one working configuration, and what a call writes is its own output array."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.spec import parse_spec
from sparseditto.tools.baselines import baseline_calls
from sparseditto.tools.baselines.common import torch_module
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family

TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("operation", ["spmv", "spmm"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_every_working_configuration_computes_the_product(operation, dtype):
    import cupy

    family = get_family(f"csr_{operation}")
    spec = parse_spec({"operation": operation, "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 1003, "K": 997, "dtype": dtype, **({"N": 67} if operation == "spmm" else {})})
    problem = family.make_problem(spec, seed=11)
    device = {name: cupy.asarray(array) for name, array in problem.inputs.items()}
    (output,) = problem.outputs
    reference = family.reference(problem)[output]

    calls = baseline_calls(family.name, (), problem, device)
    cupy.cuda.get_current_stream().synchronize()
    expected = {"cusparse", "cublas"} | ({"torch_sparse"} if torch_module() is not None else set())
    assert {call.library for call in calls} == expected
    for call in calls:
        call.output.fill(0)
        call.run()
        cupy.cuda.get_current_stream().synchronize()
        result = to_float64(call.output.get(), dtype)
        error = np.linalg.norm(result - reference) / np.linalg.norm(reference)
        assert result.shape == problem.outputs[output].shape and error <= TOLERANCE[dtype], (call.name, call.config, error)
    for name, array in problem.inputs.items():
        assert np.array_equal(device[name].get(), array), f"a baseline changed input {name}"

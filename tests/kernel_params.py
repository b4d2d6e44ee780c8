"""Parameters to instantiate each reference kernel with: its planner starting point, or else the middle
of each declared range, stepped down where the combination is not valid for the dtype."""

from __future__ import annotations

import functools

from sparseditto.agents.planner import is_valid_choice, offline_plan
from sparseditto.tools.families import get_family
from sparseditto.knowledge_base.library import ReferenceKernel
from sparseditto.spec import Spec, parse_spec

def family_spec(family: str, dtype: str) -> Spec:
    if family == "csr_spmv":
        return parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 16}, "M": 4096, "K": 4096, "dtype": dtype})
    if family == "csr_spmm":
        return parse_spec({"operation": "spmm", "pattern": {"density": 0.02}, "M": 1024, "K": 1024, "N": 64, "dtype": dtype})
    return parse_spec({**get_family(family).example_spec, "dtype": dtype})


@functools.cache
def planner_starts(family: str, dtype: str) -> dict[str, dict[str, int]]:
    return {s.kernel: dict(s.start) for s in offline_plan(family_spec(family, dtype)).strategies}


def middle_params(kernel: ReferenceKernel, dtype: str) -> dict[str, int]:
    params = {name: values[len(values) // 2] for name, values in kernel.parameters.items()}
    symbols = get_family(kernel.family).symbols(family_spec(kernel.family, dtype))
    for name in kernel.parameters:
        values = list(kernel.parameters.get(name, ()))
        while name in params and not is_valid_choice(kernel.name, params, dtype, symbols) and values.index(params[name]) > 0:
            params[name] = values[values.index(params[name]) - 1]
    assert is_valid_choice(kernel.name, params, dtype, symbols), (kernel.name, params)
    return params


def starting_params(kernel: ReferenceKernel, dtype: str) -> dict[str, int]:
    return planner_starts(kernel.family, dtype).get(kernel.name) or middle_params(kernel, dtype)

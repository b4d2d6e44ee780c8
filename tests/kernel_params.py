"""Parameters to instantiate each reference kernel with: its planner starting point, or else the middle
of each declared range, stepped down where the combination is not valid for the dtype."""

from __future__ import annotations

import functools

from sparseditto.agents.planner import offline_plan
from sparseditto.knowledge_base.library import ReferenceKernel
from sparseditto.spec import Spec, parse_spec

VALUE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
SMEM_LIMIT = 200 * 1024


def family_spec(family: str, dtype: str) -> Spec:
    if family == "csr_spmv":
        return parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 16}, "M": 4096, "K": 4096, "dtype": dtype})
    return parse_spec({"operation": "spmm", "pattern": {"density": 0.02}, "M": 1024, "K": 1024, "N": 64, "dtype": dtype})


@functools.cache
def planner_starts(family: str, dtype: str) -> dict[str, dict[str, int]]:
    return {s.kernel: dict(s.start) for s in offline_plan(family_spec(family, dtype)).strategies}


def valid(params: dict[str, int], dtype: str) -> bool:
    """16-byte vector loads at most, 32 bytes per lane in a tile row, 200 KB of shared memory, CVT for fp16 only."""
    vb = VALUE_BYTES[dtype]
    if params.get("VW", 1) * vb > 16 or params.get("CPL", 1) * vb > 32:
        return False
    if params.get("CVT", 0) and dtype != "fp16":
        return False
    return params.get("KC", 0) * 32 * params.get("CPL", 1) * vb <= SMEM_LIMIT


def middle_params(kernel: ReferenceKernel, dtype: str) -> dict[str, int]:
    params = {name: values[len(values) // 2] for name, values in kernel.parameters.items()}
    for name in ("VW", "CPL", "KC", "CVT"):
        values = list(kernel.parameters.get(name, ()))
        while name in params and not valid(params, dtype) and values.index(params[name]) > 0:
            params[name] = values[values.index(params[name]) - 1]
    assert valid(params, dtype), (kernel.name, params)
    return params


def starting_params(kernel: ReferenceKernel, dtype: str) -> dict[str, int]:
    return planner_starts(kernel.family, dtype).get(kernel.name) or middle_params(kernel, dtype)

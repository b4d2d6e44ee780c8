"""One-time preparations of the 2:4 GEMM kernels; their cost is reported apart from the per-call time."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.families.base import Prepared, Problem


def epilogue_operands(problem: Problem, params: dict[str, int]) -> Prepared:
    """A stand-in `bias` (one int32 zero, never read: `has_bias` is 0) when the epilogue has none, so that one
    argument list serves every epilogue; nothing when the problem has its own bias."""
    return ({} if "bias" in problem.inputs else {"bias": np.zeros(1, dtype=np.int32)}), {}

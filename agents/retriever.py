"""Retriever: plan -> the reference kernels it names, with what each is good at."""

from __future__ import annotations

from sparseditto.agents.schemas import Plan, Reference, References
from sparseditto.knowledge_base.library import get_kernel


def retrieve(plan: Plan) -> References:
    return References(
        kernels=[
            Reference(kernel=s.kernel, strategy=get_kernel(s.kernel).strategy, summary=get_kernel(s.kernel).summary.strip())
            for s in plan.strategies
        ]
    )

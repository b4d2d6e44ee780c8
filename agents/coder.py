"""Coder: plan + references + the reviewer's last direction -> a kernel candidate.

The offline coder instantiates a reference kernel with the chosen parameters; the candidate is data
(device source, parameters, declarative launch), checked against the kernel's declared ranges.
"""

from __future__ import annotations

from sparseditto.agents.schemas import Choice, Plan
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.tools.contract import KernelCandidate


def first_choice(plan: Plan) -> Choice:
    """A kernel stored for this very problem comes first; otherwise the first strategy's start."""
    if plan.reuse is not None:
        return plan.reuse
    s = plan.strategies[0]
    return Choice(kernel=s.kernel, params=s.start)


def write_candidate(choice: Choice) -> KernelCandidate:
    return get_kernel(choice.kernel).instantiate(choice.params, origin="offline")

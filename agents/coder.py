"""Coder: plan + references + the reviewer's last direction -> a kernel candidate.

The offline coder instantiates a reference kernel with the chosen parameters; the candidate is data
(device source, parameters, declarative launch), checked against the kernel's declared ranges.
"""

from __future__ import annotations

from sparseditto.agents.schemas import Choice, Plan
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.tools.contract import KernelCandidate


def first_choice(plan: Plan, tried: set[tuple[str, tuple[tuple[str, int], ...]]] = frozenset()) -> Choice:
    """Without a reviewer's direction: a kernel stored for this very problem, else the first strategy start not
    tried yet, else the first strategy's start."""
    starts = [Choice(kernel=s.kernel, params=s.start) for s in plan.strategies]
    options = [plan.reuse, *starts] if plan.reuse is not None else starts
    return next((c for c in options if c.key() not in tried), starts[0])


def write_candidate(choice: Choice) -> KernelCandidate:
    return get_kernel(choice.kernel).instantiate(choice.params, origin="offline")

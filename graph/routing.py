"""Where to go after the reviewer and after the human gate. The budget is enforced here."""

from __future__ import annotations

import time
from typing import Literal

from sparseditto.graph.state import PipelineState


def budget_spent(state: PipelineState) -> str | None:
    """Why the budget is spent (iterations or wall-clock), or None while some is left."""
    done = len(state.get("iterations", []))
    if done >= state["iteration_limit"]:
        return f"iteration budget spent ({done} of {state['iteration_limit']})"
    elapsed = time.time() - state["started_at"]
    limit = state["spec"]["budget"]["wall_seconds"]
    if elapsed >= limit:
        return f"wall-clock budget spent ({elapsed:.0f} s of {limit:.0f} s)"
    return None


def after_review(state: PipelineState) -> Literal["coder", "human_gate", "finalize"]:
    verdict = state["verdicts"][-1]
    if verdict["decision"] != "revise":
        return "finalize"
    if budget_spent(state) is None:
        return "coder"
    return "human_gate" if state.get("on_budget", "ask") == "ask" else "finalize"


def after_human(state: PipelineState) -> Literal["coder", "finalize"]:
    return "coder" if state.get("human", {}).get("action") == "extend" else "finalize"

"""Where to go after the reviewer and after the human gate. The budget is enforced here."""

from __future__ import annotations

import time
from typing import Any, Literal

from sparseditto.graph.state import PipelineState


def llm_budget_spent(state: PipelineState) -> str | None:
    """Why the LLM budget (tokens or cost) is spent, or None while some is left or there is none."""
    limits = state.get("llm_limits") or {}
    spent = state.get("tokens", {}).get("total", 0)
    if limits.get("tokens") and spent >= limits["tokens"]:
        return f"token budget spent ({spent} of {limits['tokens']})"
    cost = state.get("cost_usd", 0.0)
    if limits.get("cost_usd") and cost >= limits["cost_usd"]:
        return f"cost budget spent (${cost:.4f} of ${limits['cost_usd']:.4f})"
    return None


def budget_spent(state: PipelineState, now: float | None = None) -> str | None:
    """Why the budget is spent (iterations, wall-clock, LLM tokens or cost), or None while some is left.

    `now`: the wall-clock reading to judge by; the reviewer and the router share the reviewer's reading,
    so that the budget cannot run out between the verdict and the route taken after it.
    """
    done = len(state.get("iterations", []))
    if done >= state["iteration_limit"]:
        return f"iteration budget spent ({done} of {state['iteration_limit']})"
    elapsed = (now if now is not None else time.time()) - state["started_at"]
    limit = state["spec"]["budget"]["wall_seconds"]
    if elapsed >= limit:
        return f"wall-clock budget spent ({elapsed:.0f} s of {limit:.0f} s)"
    return llm_budget_spent(state)


def extended_limits(state: PipelineState, more_iterations: int) -> dict[str, Any]:
    """LLM limits after extending the search by N iterations: what the budget allowed per iteration, N times more."""
    limits = dict(state.get("llm_limits") or {})
    share = more_iterations / max(1, state["iteration_limit"])
    if limits.get("tokens"):
        limits["tokens"] = state.get("tokens", {}).get("total", 0) + round(limits["tokens"] * share)
    if limits.get("cost_usd"):
        limits["cost_usd"] = state.get("cost_usd", 0.0) + limits["cost_usd"] * share
    return limits


def after_review(state: PipelineState) -> Literal["coder", "human_gate", "finalize"]:
    verdict = state["verdicts"][-1]
    if verdict["decision"] != "revise":
        return "finalize"
    if budget_spent(state, state.get("reviewed_at")) is None:
        return "coder"
    return "human_gate" if state.get("on_budget", "ask") == "ask" else "finalize"


def after_human(state: PipelineState) -> Literal["coder", "finalize"]:
    return "coder" if state.get("human", {}).get("action") == "extend" else "finalize"

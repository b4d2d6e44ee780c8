"""Graph state: plain JSON-able dicts and lists so that the SQLite checkpointer saves every step."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from sparseditto.settings import OnBudget


def add_counts(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Counters summed key by key (tokens of each node's calls add up to the run's)."""
    return {**old, **{k: old.get(k, 0) + v for k, v in new.items()}}


def add_per_node(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {**old, **{node: add_counts(old.get(node, {}), counts) for node, counts in new.items()}}


class PipelineState(TypedDict, total=False):
    run_id: str
    spec: dict[str, Any]
    on_budget: OnBudget
    started_at: float
    iteration_limit: int
    # offline | llm | hybrid, fixed when the run starts
    policy: str
    plan: dict[str, Any]
    references: dict[str, Any]
    choice: dict[str, Any]
    candidate: dict[str, Any]
    # one record per tool run: iteration, choice, candidate label, the candidate itself, report, seconds
    iterations: Annotated[list[dict[str, Any]], operator.add]
    verdicts: Annotated[list[dict[str, Any]], operator.add]
    # the wall-clock reading the last verdict was made at; the router judges the budget by it
    reviewed_at: float
    human: dict[str, Any]
    status: str
    best_iteration: int | None
    artifacts_dir: str
    # LLM tokens spent so far, per kind (prompt, completion, total)
    tokens: Annotated[dict[str, int], add_counts]
    cost_usd: Annotated[float, operator.add]
    # per node: prompt, completion, total, cost_usd, calls
    node_tokens: Annotated[dict[str, dict[str, Any]], add_per_node]
    # the LLM budget of the run: {"tokens": int | None, "cost_usd": float | None}
    llm_limits: dict[str, Any]
    # one entry per agent step under the llm or hybrid policy (sparseditto.agents.llm_trace.Step)
    llm_trace: Annotated[list[dict[str, Any]], operator.add]

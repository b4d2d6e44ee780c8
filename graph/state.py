"""Graph state: plain JSON-able dicts and lists so that the SQLite checkpointer saves every step."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

OnBudget = Literal["ask", "approve", "abort"]


class PipelineState(TypedDict, total=False):
    run_id: str
    spec: dict[str, Any]
    on_budget: OnBudget
    started_at: float
    iteration_limit: int
    plan: dict[str, Any]
    references: dict[str, Any]
    choice: dict[str, Any]
    candidate: dict[str, Any]
    # one record per tool run: iteration, choice, candidate label, report, seconds
    iterations: Annotated[list[dict[str, Any]], operator.add]
    verdicts: Annotated[list[dict[str, Any]], operator.add]
    budget_reason: str
    human: dict[str, Any]
    status: str
    best_iteration: int | None
    artifacts_dir: str
    # LLM tokens spent so far, per kind (prompt, completion, total)
    tokens: dict[str, int]

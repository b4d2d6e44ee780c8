"""The approval gate: when the budget is spent, a person approves the best kernel, extends the search or aborts.

The node calls `interrupt(payload)` and nothing before it (a node re-runs from its top on resume). An
answer it cannot read does not end the run: it interrupts again with the same payload and a `retry` field
saying why the answer was refused and what is accepted, until a valid answer comes. LangGraph matches the
answers to the node's interrupt calls by order, so on each resume the node replays the refused answers
(without side effects) and stops at the first interrupt that has no answer yet.

Accepted answers (`read_answer`), the same for the CLI, the Python API and LangGraph Studio:
`{"action": "approve"}`, `{"action": "abort"}`, `{"action": "extend", "iterations": N}` with
1 <= N <= MAX_EXTEND, or the text forms "approve", "abort", "extend N" (case-insensitive, trimmed).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.config import get_stream_writer
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparseditto.agents.reviewer import best_iteration, describe
from sparseditto.graph.routing import budget_spent, extended_limits
from sparseditto.graph.state import PipelineState
from sparseditto.tools.results import VerificationReport

# the most iterations one answer may add; the CLI's --extend has the same bounds
MAX_EXTEND = 1000

ALLOWED = (f'allowed: approve, abort, extend N (N from 1 to {MAX_EXTEND}), as text or as '
           f'{{"action": "approve"}}, {{"action": "abort"}}, {{"action": "extend", "iterations": N}}')

# shown in the payload, so that a person answering in LangGraph Studio sees what to type
ANSWERS = {
    "approve": 'accept the best kernel so far: "approve" or {"action": "approve"}',
    "extend N": f'search N more iterations, 1 <= N <= {MAX_EXTEND}: "extend 5" or {{"action": "extend", "iterations": 5}}',
    "abort": 'stop without accepting: "abort" or {"action": "abort"}',
}

# what a client may render as the answer's input form (LangGraph does not validate by it; read_answer does)
RESPONSE_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": r"^\s*([Aa][Pp][Pp][Rr][Oo][Vv][Ee]|[Aa][Bb][Oo][Rr][Tt]|[Ee][Xx][Tt][Ee][Nn][Dd]\s+[0-9]+)\s*$"},
        {"type": "object", "properties": {"action": {"enum": ["approve", "abort"]}}, "required": ["action"]},
        {"type": "object", "properties": {"action": {"const": "extend"},
                                          "iterations": {"type": "integer", "minimum": 1, "maximum": MAX_EXTEND}},
         "required": ["action", "iterations"]},
    ],
}


class HumanAnswer(BaseModel):
    """A valid answer at the approval gate (`iterations` is set for extend only)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["approve", "extend", "abort"]
    iterations: int = Field(default=0, ge=0, le=MAX_EXTEND)


def read_answer(answer: Any) -> tuple[HumanAnswer | None, str]:
    """The answer as a HumanAnswer, or None with why it was refused and what is accepted."""
    if isinstance(answer, HumanAnswer):
        answer = answer.model_dump()
    if isinstance(answer, str):
        words = answer.split()
        action = words[0].lower() if words else ""
        if action in ("approve", "abort") and len(words) == 1:
            return HumanAnswer(action=action), ""
        if action == "extend" and len(words) == 2:
            n = words[1]
            if not n.isascii() or not n.isdigit():
                return None, f"{answer!r}: N in extend N must be a whole number; {ALLOWED}"
            return _extend(int(n), answer)
        return None, f"{answer!r} is not an answer the gate reads; {ALLOWED}"
    if isinstance(answer, dict):
        action = answer.get("action")
        action = action.strip().lower() if isinstance(action, str) else action
        extra = sorted(set(answer) - {"action", "iterations"})
        if extra:
            return None, f"{answer!r}: unknown field(s) {', '.join(map(str, extra))}; {ALLOWED}"
        if action in ("approve", "abort"):
            if answer.get("iterations") not in (None, 0):
                return None, f"{answer!r}: iterations goes with extend only; {ALLOWED}"
            return HumanAnswer(action=action), ""
        if action == "extend":
            n = answer.get("iterations")
            if isinstance(n, bool) or not isinstance(n, int):
                return None, f"{answer!r}: extend needs \"iterations\": a whole number; {ALLOWED}"
            return _extend(n, answer)
        return None, f"{answer!r}: action must be approve, abort or extend; {ALLOWED}"
    return None, f"{answer!r} is not an answer the gate reads; {ALLOWED}"


def _extend(n: int, answer: Any) -> tuple[HumanAnswer | None, str]:
    if not 1 <= n <= MAX_EXTEND:
        return None, f"{answer!r}: extend N needs 1 <= N <= {MAX_EXTEND}; {ALLOWED}"
    try:
        return HumanAnswer(action="extend", iterations=n), ""
    except ValidationError as exc:  # pragma: no cover - the bounds are checked above
        return None, f"{answer!r}: {exc.errors()[0]['msg']}; {ALLOWED}"


def gate_payload(state: PipelineState) -> dict[str, Any]:
    """What the gate shows: why it stopped, the best kernel so far, why it was not accepted, the answers."""
    best = best_iteration(state["iterations"])
    return {
        "question": "The budget is spent. Approve the best kernel so far, extend the search, or abort?",
        "reason": budget_spent(state, state.get("reviewed_at")) or "budget spent",
        "best": {"iteration": best["iteration"], "candidate": best["candidate"],
                 "outcome": describe(VerificationReport.model_validate(best["report"]))} if best else None,
        "why_not_accepted": state["verdicts"][-1]["diagnosis"],
        "answers": dict(ANSWERS),
    }


async def human_gate(state: PipelineState) -> dict[str, Any]:
    payload = gate_payload(state)
    decision, why = read_answer(interrupt(payload, response_schema=RESPONSE_SCHEMA))
    while decision is None:
        # the same question again, with why the last answer was refused; the run is not lost
        decision, why = read_answer(interrupt({**payload, "retry": why}, response_schema=RESPONSE_SCHEMA))
    update: dict[str, Any] = {"human": decision.model_dump()}
    if decision.action == "extend":
        update["iteration_limit"] = len(state["iterations"]) + decision.iterations
        update["llm_limits"] = extended_limits(state, decision.iterations)
        update["started_at"] = time.time()
    _emit("human", **decision.model_dump())
    return update


def _emit(event: str, **data: Any) -> None:
    try:
        get_stream_writer()({"event": event, **data})
    except RuntimeError:  # not running inside a graph stream (direct node calls in tests)
        pass

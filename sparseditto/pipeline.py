"""`run_pipeline(spec)` and `resume(run_id, answer)`: the graph with a SQLite checkpointer, one thread per run."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from pydantic import BaseModel, ValidationError

from sparseditto.agents.llm_models import check_usable
from sparseditto.errors import PolicyError, ResumeError, RunNotFoundError
from sparseditto.graph.builder import builder
from sparseditto.graph.context import LLM_OPTIONS, PipelineContext
from sparseditto.settings import POLICIES, OnBudget, Policy
from sparseditto.spec import Spec, load_spec, parse_spec
from sparseditto.tools.verifier import Verifier

EventHandler = Callable[[dict[str, Any]], None]


class PipelineResult(BaseModel):
    run_id: str
    status: str
    best: dict[str, Any] | None = None
    artifacts_dir: str | None = None
    iterations: int = 0
    gate: dict[str, Any] | None = None
    policy: Policy = "offline"
    # LLM tokens spent by the run, per kind (prompt, completion, total); empty for the offline policy
    tokens: dict[str, int] = {}
    # their cost from the configured prices (0 when the prices are unknown)
    cost_usd: float = 0.0


def _coerce_spec(spec: Spec | dict[str, Any] | str | Path) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, (str, Path)):
        return load_spec(spec)
    return parse_spec(spec)


def _checkpoint_db(runs_dir: str) -> str:
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    return str(Path(runs_dir) / "checkpoints.sqlite")


async def _drive(graph_input: Any, run_id: str, runs_dir: str, context: PipelineContext, on_event: EventHandler | None) -> PipelineResult:
    config = {"configurable": {"thread_id": run_id}}
    async with AsyncSqliteSaver.from_conn_string(_checkpoint_db(runs_dir)) as saver:
        graph = builder.compile(checkpointer=saver)
        if isinstance(graph_input, Command):
            snapshot = await graph.aget_state(config)
            if not snapshot.values:
                raise RunNotFoundError(f"run {run_id}: no such run in {runs_dir}")
            if not snapshot.next:
                raise ResumeError(f"run {run_id} has already finished with status {snapshot.values.get('status')}")
        async for mode, chunk in graph.astream(graph_input, config, context=context, stream_mode=["custom", "updates"]):
            if mode == "custom" and on_event:
                on_event(chunk)
        snapshot = await graph.aget_state(config)
    values = snapshot.values
    gate = None
    if snapshot.next:
        gate = next((i.value for t in snapshot.tasks for i in t.interrupts), None)
    best_no = values.get("best_iteration")
    best = next((it for it in values.get("iterations", []) if it["iteration"] == best_no), None) if best_no else None
    return PipelineResult(
        run_id=run_id,
        status=values.get("status") or ("awaiting_approval" if gate else "incomplete"),
        best={"iteration": best["iteration"], "candidate": best["candidate"], "choice": best["choice"],
              "measurement": best["report"].get("measurement")} if best else None,
        artifacts_dir=values.get("artifacts_dir"),
        iterations=len(values.get("iterations", [])),
        gate=gate,
        policy=context.run_policy(values),
        tokens=values.get("tokens", {}),
        cost_usd=values.get("cost_usd", 0.0),
    )


def _context(runs_dir: str, compile_only: bool, verifier: Verifier | None, policy: Policy | None,
             llm: dict[str, Any] | None) -> PipelineContext:
    """The run's context; an unknown policy or LLM option, or an LLM policy without a model, is refused here."""
    if policy is not None and policy not in POLICIES:
        raise PolicyError(f"policy {policy!r}: allowed: {', '.join(POLICIES)}")
    unknown = set(llm or {}) - LLM_OPTIONS
    if unknown:
        raise PolicyError(f"unknown LLM options {sorted(unknown)}; allowed: {', '.join(sorted(LLM_OPTIONS))}")
    context = PipelineContext(runs_dir=runs_dir, force_compile_only=compile_only, verifier=verifier, policy=policy,
                              **(llm or {}))
    try:
        settings = context.llm_settings()
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PolicyError(f"setting {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    if policy in ("llm", "hybrid") and context.chat_models is None:
        check_usable(settings)
    return context


def run_pipeline(
    spec: Spec | dict[str, Any] | str | Path,
    *,
    on_budget: OnBudget = "ask",
    budget: int | None = None,
    runs_dir: str = "runs",
    compile_only: bool = False,
    verifier: Verifier | None = None,
    on_event: EventHandler | None = None,
    run_id: str | None = None,
    policy: Policy = "offline",
    llm: dict[str, Any] | None = None,
) -> PipelineResult:
    """Plan, write, verify and revise kernels for `spec` until accepted, given up or the budget is spent.

    With on_budget="ask" a spent budget pauses the run at the approval gate (status "awaiting_approval");
    answer it with `resume(run_id, "approve" | "extend N" | "abort")`. `llm` overrides the LLM settings
    for this run (the `llm_*` fields of PipelineContext, or `chat_models` to bring your own chat models).
    """
    spec = _coerce_spec(spec)
    if budget is not None:
        spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"iterations": budget})})
    run_id = run_id or uuid.uuid4().hex[:12]
    context = _context(runs_dir, compile_only, verifier, policy, llm)
    state = {"run_id": run_id, "spec": spec.model_dump(mode="json"), "on_budget": on_budget,
             "started_at": time.time(), "iteration_limit": spec.budget.iterations, "policy": policy}
    return asyncio.run(_drive(state, run_id, runs_dir, context, on_event))


def resume(
    run_id: str,
    answer: str | dict[str, Any],
    *,
    runs_dir: str = "runs",
    compile_only: bool = False,
    verifier: Verifier | None = None,
    on_event: EventHandler | None = None,
    policy: Policy | None = None,
    llm: dict[str, Any] | None = None,
) -> PipelineResult:
    """Answer a run waiting at the approval gate: "approve", "abort" or "extend N".

    The run keeps the policy it started with unless `policy` is given.
    """
    if isinstance(answer, str):
        action, _, n = answer.strip().partition(" ")
        valid = (action in {"approve", "abort"} and not n.strip()) or (action == "extend" and n.strip().isdigit() and int(n) > 0)
        if not valid:
            raise ResumeError(f"answer {answer!r}: allowed: approve, abort, extend N (N a positive integer)")
        answer = {"action": action, "iterations": int(n) if n.strip() else 0}
    if not Path(runs_dir, "checkpoints.sqlite").exists():
        raise RunNotFoundError(f"run {run_id}: no runs in {runs_dir}")
    context = _context(runs_dir, compile_only, verifier, policy, llm)
    return asyncio.run(_drive(Command(resume=answer), run_id, runs_dir, context, on_event))

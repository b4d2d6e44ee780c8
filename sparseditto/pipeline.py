"""`run_pipeline(spec)` and `resume(run_id, answer)`: the graph with a SQLite checkpointer, one thread per run.

A run's id is chosen, its folder `<runs dir>/<id>/` created and its status file written before planning
starts (an `on_event` handler gets a `started` event with both); the status file follows the run through
every node, the approval gate and its end (sparseditto.artifacts). A run stopped by a crash or a kill
resumes where its last checkpoint left it (`resume(run_id)`), or is ended as it is (`resume(run_id, "abort")`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from pydantic import BaseModel, ValidationError

from sparseditto.agents.llm_models import check_usable
from sparseditto.agents.reviewer import best_iteration
from sparseditto.artifacts import (check_run_id, check_runs_dir, read_status, run_folder, run_state,
                                   write_artifacts, write_status)
from sparseditto.errors import PolicyError, ResumeError, RunNotFoundError, RunOptionError
from sparseditto.graph.builder import builder
from sparseditto.graph.context import LLM_OPTIONS, PipelineContext
from sparseditto.graph.gate import HumanAnswer, read_answer
from sparseditto.settings import ON_BUDGET, POLICIES, OnBudget, Policy
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
    return str(check_runs_dir(runs_dir) / "checkpoints.sqlite")


def _gate_of(snapshot: Any) -> dict[str, Any] | None:
    """The approval gate's payload when the run waits there (the latest interrupt), else None."""
    return next((i.value for t in snapshot.tasks for i in t.interrupts), None) if snapshot.next else None


def _ended(exc: BaseException) -> str:
    return "interrupted" if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)) else "failed"


async def _drive(graph_input: Any, run_id: str, runs_dir: str, context: PipelineContext, on_event: EventHandler | None,
                 *, resuming: bool = False, answer: HumanAnswer | None = None) -> PipelineResult:
    """Start a run, or resume one: answer its gate, continue it after a crash (no answer) or end it (abort)."""
    config = {"configurable": {"thread_id": run_id}}
    async with AsyncSqliteSaver.from_conn_string(_checkpoint_db(runs_dir)) as saver:
        graph = builder.compile(checkpointer=saver)
        snapshot = await graph.aget_state(config)
        if not resuming:
            if snapshot.values:
                raise RunOptionError(f"run_id {run_id!r}: a run with this id already exists in {runs_dir}")
        else:
            if not snapshot.values:
                raise RunNotFoundError(f"run {run_id}: no such run in {runs_dir}")
            if not snapshot.next:
                raise ResumeError(f"run {run_id} has already finished with status {snapshot.values.get('status')}")
            if _gate_of(snapshot) is not None:
                if answer is None:
                    raise ResumeError(f"run {run_id} is waiting at the approval gate; answer approve, abort or "
                                      f"extend N (sparseditto resume {run_id} --approve | --extend N | --abort)")
                graph_input = Command(resume=answer.model_dump())
            elif answer is None:
                graph_input = None  # a run stopped by a crash or a kill: on from its last checkpoint
            elif answer.action == "abort":
                return await _end_stopped(graph, config, snapshot, run_id, runs_dir, context, on_event)
            else:
                raise ResumeError(f"run {run_id} is not at the approval gate (it stopped before {', '.join(snapshot.next)}): "
                                  f"`sparseditto resume {run_id}` continues it, `sparseditto resume {run_id} --abort` ends it")
        write_status(runs_dir, run_id, "running", gate=None, retry=None)
        try:
            # durability "sync": each step's checkpoint is saved before the next step starts, so that a run killed at
            # any moment resumes from where it stood (with "async" a kill could land after a node's writes were saved
            # but before the next checkpoint, and the thread then looked finished)
            async for mode, chunk in graph.astream(graph_input, config, context=context, stream_mode=["custom", "updates"],
                                                   durability="sync"):
                if mode == "custom" and on_event:
                    on_event(chunk)
                elif mode == "updates":
                    done = [node for node in chunk if not node.startswith("__")]
                    if done and "finalize" not in done:
                        write_status(runs_dir, run_id, "running", node=done[-1])
        except BaseException as exc:
            write_status(runs_dir, run_id, _ended(exc), error=f"{type(exc).__name__}: {exc}"[:500])
            raise
        snapshot = await graph.aget_state(config)
    result = _result(snapshot, run_id, context)
    if result.gate is not None:
        write_status(runs_dir, run_id, "waiting_for_approval", gate=result.gate.get("reason"),
                     retry=result.gate.get("retry"))
    elif snapshot.next:  # stopped without a gate or an error: nothing should do this
        write_status(runs_dir, run_id, "interrupted", node=None)
    else:
        write_status(runs_dir, run_id, "aborted" if result.status == "aborted" else "done", result=result.status,
                     artifacts_dir=result.artifacts_dir, gate=None, retry=None)
    return result


async def _end_stopped(graph: Any, config: dict[str, Any], snapshot: Any, run_id: str, runs_dir: str,
                       context: PipelineContext, on_event: EventHandler | None) -> PipelineResult:
    """End a run stopped by a crash or a kill without running anything: aborted, with the artifacts it has."""
    values = {**snapshot.values, "human": {"action": "abort", "iterations": 0}}
    note = (f"Ended by `sparseditto resume {run_id} --abort` after the run had stopped before "
            f"{', '.join(snapshot.next)} ({len(values.get('iterations', []))} iterations done); nothing more was run.")
    folder = await asyncio.to_thread(write_artifacts, values, "aborted", runs_dir, note)
    best = best_iteration(values.get("iterations", []))
    # the thread ends as if finalize had run: a later resume says it has finished
    await graph.aupdate_state(config, {"status": "aborted", "human": values["human"], "artifacts_dir": str(folder),
                                       "best_iteration": best["iteration"] if best else None}, as_node="finalize")
    if on_event:
        on_event({"event": "finished", "status": "aborted", "artifacts": str(folder)})
    return _result(await graph.aget_state(config), run_id, context)


def _result(snapshot: Any, run_id: str, context: PipelineContext) -> PipelineResult:
    values = snapshot.values
    gate = _gate_of(snapshot)
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
    `run_id`: 1 to 64 letters, digits, '_' or '-' (default: a random one), not used by another run.
    """
    if on_budget not in ON_BUDGET:
        raise RunOptionError(f"on_budget {on_budget!r}: allowed: {', '.join(ON_BUDGET)}")
    run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex[:12]
    runs_dir = str(runs_dir)
    spec = _coerce_spec(spec)
    if budget is not None:
        spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"iterations": budget})})
    context = _context(runs_dir, compile_only, verifier, policy, llm)
    check_runs_dir(runs_dir)
    folder = run_folder(runs_dir, run_id)
    if folder.exists():
        raise RunOptionError(f"run_id {run_id!r}: a run with this id already exists in {runs_dir}")
    started = time.time()
    write_status(runs_dir, run_id, "running", spec=spec.name)
    if on_event:
        on_event({"event": "started", "run_id": run_id, "folder": str(folder)})
    state = {"run_id": run_id, "spec": spec.model_dump(mode="json"), "on_budget": on_budget,
             "started_at": started, "iteration_limit": spec.budget.iterations, "policy": policy}
    try:
        return asyncio.run(_drive(state, run_id, runs_dir, context, on_event))
    except BaseException as exc:
        if (read_status(runs_dir, run_id) or {}).get("state") == "running":
            write_status(runs_dir, run_id, _ended(exc), error=f"{type(exc).__name__}: {exc}"[:500])
        raise


def resume(
    run_id: str,
    answer: str | dict[str, Any] | None = None,
    *,
    runs_dir: str = "runs",
    compile_only: bool = False,
    verifier: Verifier | None = None,
    on_event: EventHandler | None = None,
    policy: Policy | None = None,
    llm: dict[str, Any] | None = None,
) -> PipelineResult:
    """Answer a run waiting at the approval gate ("approve", "abort", "extend N" or their dict forms), or take
    up a run stopped by a crash or a kill: no answer continues it from its last checkpoint, "abort" ends it
    as it is (aborted, with the artifacts it has) without running anything.

    The run keeps the policy it started with unless `policy` is given.
    """
    run_id = check_run_id(run_id)
    runs_dir = str(runs_dir)
    decision = None
    if answer is not None:
        decision, why = read_answer(answer)
        if decision is None:
            raise ResumeError(why)
    if not Path(runs_dir).exists():
        raise RunNotFoundError(f"run {run_id}: no runs in {runs_dir}")
    check_runs_dir(runs_dir)
    status = read_status(runs_dir, run_id)
    if status and run_state(status) == "running" and status.get("pid") != os.getpid():
        raise ResumeError(f"run {run_id} is still running (pid {status.get('pid')}); wait for it, or stop that process first")
    if not Path(runs_dir, "checkpoints.sqlite").exists() and status is None:
        raise RunNotFoundError(f"run {run_id}: no runs in {runs_dir}")
    context = _context(runs_dir, compile_only, verifier, policy, llm)
    try:
        return asyncio.run(_drive(None, run_id, runs_dir, context, on_event, resuming=True, answer=decision))
    except RunNotFoundError:
        if status is None:
            raise
        # killed after its folder was made, before its first checkpoint: nothing to continue
        if decision is not None and decision.action == "abort":
            write_status(runs_dir, run_id, "aborted", result="aborted", error=None)
            return PipelineResult(run_id=run_id, status="aborted", policy=context.run_policy({}))
        raise RunNotFoundError(f"run {run_id} stopped before its first checkpoint: nothing to resume; "
                               f"end it with `sparseditto resume {run_id} --abort` and start the spec again") from None

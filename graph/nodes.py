"""The graph's nodes. Each reads what it needs and returns a partial update; routing lives in routing.py.

Blocking work (matrix statistics, compilation, GPU runs, artifact writing) runs in a worker thread so
the same graph serves run_pipeline, the CLI and `langgraph dev`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import structlog
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from pydantic import BaseModel, Field, ValidationError

from sparseditto.agents.policies import accounting, code_step, plan_step, review_step
from sparseditto.agents.retriever import gpu_identity, retrieve
from sparseditto.agents.reviewer import best_iteration, describe
from sparseditto.graph.context import PipelineContext, context_of
from sparseditto.graph.routing import budget_spent, extended_limits, llm_budget_spent
from sparseditto.graph.state import PipelineState, RunView
from sparseditto.knowledge_base.experience import ExperienceStore, experience_path, record_accepted
from sparseditto.settings import Settings
from sparseditto.spec import parse_spec
from sparseditto.tools.results import VerificationReport
from sparseditto.tools.verifier import make_verifier

log = structlog.get_logger(__name__)


def _emit(event: str, **data: Any) -> None:
    try:
        get_stream_writer()({"event": event, **data})
    except RuntimeError:  # not running inside a graph stream (direct node calls in tests)
        pass


async def planner(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    """Also completes the run's bookkeeping when a run starts from a bare spec (LangGraph Studio)."""
    ctx = context_of(runtime)
    spec = parse_spec(state["spec"])
    policy, llm = ctx.run_policy(state), ctx.llm()
    _emit("planning", spec=spec.name, policy=policy)
    plan, step = await asyncio.to_thread(plan_step, spec, policy, llm)
    _emit("planned", strategies=[s.kernel for s in plan.strategies], features=plan.features)
    return {
        "spec": spec.model_dump(mode="json"),
        "plan": plan.model_dump(),
        "run_id": state.get("run_id") or uuid.uuid4().hex[:12],
        "started_at": state.get("started_at") or time.time(),
        "iteration_limit": state.get("iteration_limit") or spec.budget.iterations,
        "on_budget": state.get("on_budget", "ask"),
        "policy": policy,
        "llm_limits": state.get("llm_limits") or {"tokens": llm.settings.llm_token_budget,
                                                  "cost_usd": llm.settings.llm_cost_budget_usd},
        **accounting(step),
    }


async def retriever(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    """Also refines the plan with experience: a stored kernel to re-validate, or a better start."""
    ctx = context_of(runtime)
    compile_only = ctx.force_compile_only or getattr(ctx.verifier, "backend", None) == "compile_only"
    gpu = await asyncio.to_thread(gpu_identity, compile_only)
    store = ExperienceStore(experience_path(ctx.runs_dir))
    run = RunView.of(state)
    plan, refs = await asyncio.to_thread(retrieve, run.plan, run.spec, gpu, store, Settings().context_chars)
    _emit("retrieved", kernels=[r.kernel for r in refs.kernels], passages=[p.id for p in refs.passages],
          reuse=plan.reuse.model_dump() if plan.reuse else None)
    return {"plan": plan.model_dump(), "references": refs.model_dump()}


async def coder(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    ctx = context_of(runtime)
    run = RunView.of(state)
    (choice, candidate), step = await asyncio.to_thread(
        code_step, run.spec, run.plan, run.references, state.get("candidate"), state.get("iterations", []),
        state.get("verdicts", []), ctx.run_policy(state), ctx.llm(), llm_budget_spent(state))
    _emit("candidate", iteration=len(state.get("iterations", [])) + 1, label=candidate.label(), origin=candidate.origin)
    return {"choice": choice.model_dump(), "candidate": candidate.model_dump(), **accounting(step)}


async def tool(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    ctx = context_of(runtime)
    run = RunView.of(state)
    spec, candidate = run.spec, run.candidate
    verifier = ctx.verifier or make_verifier(ctx.arch or spec.arch, ctx.force_compile_only)
    iteration = len(state.get("iterations", [])) + 1
    _emit("verifying", iteration=iteration, label=candidate.label(), backend=verifier.backend)
    start = time.perf_counter()
    best_us = run.best_median_us
    reuse = run.plan.reuse
    checked = run.plan.reuse_checked if reuse and reuse.model_dump() == state["choice"] else None
    report: VerificationReport = await asyncio.to_thread(verifier.verify, candidate, spec, best_us, checked)
    seconds = time.perf_counter() - start
    _emit("verified", iteration=iteration, label=candidate.label(), outcome=describe(report), seconds=round(seconds, 2))
    record = {"iteration": iteration, "choice": state["choice"], "candidate": candidate.label(), "kernel": state["candidate"],
              "backend": verifier.backend, "seconds": seconds, "report": report.model_dump(mode="json")}
    return {"iterations": [record]}


async def reviewer(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    ctx = context_of(runtime)
    now = time.time()
    reason = budget_spent(state, now)
    run = RunView.of(state)
    verdict, step = await asyncio.to_thread(
        review_step, run.spec, run.plan, state["iterations"],
        state.get("verdicts", []), reason is None, ctx.run_policy(state), ctx.llm(), llm_budget_spent(state))
    update: dict[str, Any] = {"verdicts": [verdict.model_dump()], "reviewed_at": now, **accounting(step)}
    _emit("reviewed", decision=verdict.decision, diagnosis=verdict.diagnosis, direction=verdict.direction)
    return update


class HumanAnswer(BaseModel):
    """What a person answers at the approval gate."""

    action: str = Field(pattern="^(approve|extend|abort)$")
    iterations: int = Field(default=0, ge=0, le=1000)


def gate_payload(state: PipelineState) -> dict[str, Any]:
    best = best_iteration(state["iterations"])
    return {
        "question": "The budget is spent. Approve the best kernel so far, extend the search, or abort?",
        "reason": budget_spent(state, state.get("reviewed_at")) or "budget spent",
        "best": {"iteration": best["iteration"], "candidate": best["candidate"],
                 "outcome": describe(VerificationReport.model_validate(best["report"]))} if best else None,
        "why_not_accepted": state["verdicts"][-1]["diagnosis"],
        "answers": ["approve", "extend N", "abort"],
    }


async def human_gate(state: PipelineState) -> dict[str, Any]:
    answer = interrupt(gate_payload(state))
    if isinstance(answer, str):
        action, _, n = answer.partition(" ")
        answer = {"action": action, "iterations": int(n) if n.strip().isdigit() else 0}
    try:
        decision = HumanAnswer.model_validate(answer)
    except ValidationError:
        decision = HumanAnswer(action="abort")
        log.warning("unreadable_gate_answer", answer=answer)
    update: dict[str, Any] = {"human": decision.model_dump()}
    if decision.action == "extend":
        update["iteration_limit"] = len(state["iterations"]) + max(1, decision.iterations)
        update["llm_limits"] = extended_limits(state, max(1, decision.iterations))
        update["started_at"] = time.time()
    _emit("human", **decision.model_dump())
    return update


def final_status(state: PipelineState) -> str:
    verdict = state["verdicts"][-1]["decision"]
    best = best_iteration(state["iterations"])
    has_correct = best is not None and best["report"].get("measurement") is not None
    if verdict == "accept":
        return "accepted"
    if verdict == "compiled_only":
        return "compiled_only"
    if verdict == "give_up":
        return "not_faster" if has_correct else "failed"
    action = state.get("human", {}).get("action") or state.get("on_budget", "ask")
    if action == "approve":
        return "approved_best" if has_correct else "failed"
    return "aborted"


async def finalize(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    from sparseditto.artifacts import write_artifacts

    ctx = context_of(runtime)
    status = final_status(state)
    best = best_iteration(state["iterations"])
    if status == "accepted" and best:
        store = ExperienceStore(experience_path(ctx.runs_dir))
        await asyncio.to_thread(record_accepted, store, RunView.of(state).spec, best, state["run_id"])
    folder = await asyncio.to_thread(write_artifacts, state, status, ctx.runs_dir)
    _emit("finished", status=status, artifacts=str(folder))
    return {"status": status, "best_iteration": best["iteration"] if best else None, "artifacts_dir": str(folder)}

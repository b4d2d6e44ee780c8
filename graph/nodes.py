"""The graph's nodes. Each reads what it needs and returns a partial update; routing lives in routing.py.

Every node is async and does nothing blocking on the event loop: validation, the agents' steps, the verifier
(its choice too: that probes the GPU in a subprocess), the knowledge base, the experience store and artifact
writing all run in a worker thread (`asyncio.to_thread`); only the progress events are sent from the loop.
So the same graph serves run_pipeline, the CLI and `langgraph dev`, whose server refuses blocking calls on its
event loop.

A user error (SparseDittoError: a bad spec, an unusable policy, ...) leaves a node as an InputError, a ValueError
with the same one-line message: the LangGraph server passes the message of a ValueError to its client and
replaces that of most other exception types with "An internal error occurred".
"""

from __future__ import annotations

import asyncio
import json
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

from sparseditto.agents.policies import accounting, code_step, plan_step, review_step
from sparseditto.agents.retriever import gpu_identity, retrieve
from sparseditto.agents.coder import write_candidate
from sparseditto.agents.reviewer import best_iteration, contenders_ahead, describe
from sparseditto.agents.schemas import Choice
from sparseditto.errors import SparseDittoError, SpecError
from sparseditto.graph.context import PipelineContext, context_of
from sparseditto.graph.routing import budget_spent, llm_budget_spent
from sparseditto.graph.state import EXAMPLE_INPUT, PipelineState, RunView
from sparseditto.knowledge_base.experience import (ExperienceStore, experience_path, record_accepted, record_measured,
                                                   record_steps)
from sparseditto.settings import ON_BUDGET, Settings
from sparseditto.spec import parse_spec
from sparseditto.tools.results import VerificationReport
from sparseditto.tools.verifier import make_verifier

log = structlog.get_logger(__name__)

NO_SPEC = ("the input needs a spec: {\"spec\": {...}} with the fields of a spec file, for example "
           + json.dumps({"spec": EXAMPLE_INPUT["spec"]}))


class InputError(SparseDittoError, ValueError):
    """A run's input or options that a node cannot work with (a ValueError too, see the module's docstring)."""


class SpecInputError(SpecError, InputError):
    """A spec that does not validate, raised from the graph (still a SpecError for whoever catches those)."""


Node = Callable[[PipelineState, Runtime[PipelineContext]], Awaitable[dict[str, Any]]]


def _user_errors(node: Node) -> Node:
    """The node, with a user error re-raised as an InputError carrying the same message."""

    @functools.wraps(node)
    async def wrapped(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
        try:
            return await node(state, runtime)
        except SparseDittoError as exc:
            if isinstance(exc, ValueError):
                raise
            if isinstance(exc, SpecError):
                raise SpecInputError(str(exc), getattr(exc, "field", None)) from exc
            raise InputError(str(exc)) from exc

    return wrapped


def _emit(event: str, **data: Any) -> None:
    try:
        get_stream_writer()({"event": event, **data})
    except RuntimeError:  # not running inside a graph stream (direct node calls in tests)
        pass


def _start(state: PipelineState, runtime: Runtime[PipelineContext]) -> tuple[Any, str, str]:
    """The run's spec, on_budget and id from its input, validated (a worker thread: a spec may name a matrix file).
    A run started from a bare spec (LangGraph Studio) gets its id, folder and status file here."""
    from sparseditto.artifacts import check_run_id, check_runs_dir, write_status

    if not state.get("spec"):
        raise InputError(NO_SPEC)
    on_budget = state.get("on_budget") or "ask"
    if on_budget not in ON_BUDGET:
        raise InputError(f"on_budget: {on_budget!r} is not one of {', '.join(ON_BUDGET)}")
    spec = parse_spec(state["spec"])
    if state.get("run_id"):
        return spec, on_budget, check_run_id(state["run_id"])
    run_id = uuid.uuid4().hex[:12]
    write_status(check_runs_dir(context_of(runtime).runs_dir), run_id, "running", spec=spec.name)
    return spec, on_budget, run_id


def _policy_and_llm(state: PipelineState, runtime: Runtime[PipelineContext]) -> tuple[str, Any]:
    ctx = context_of(runtime)
    return ctx.run_policy(state), ctx.llm()


@_user_errors
async def planner(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    """Also completes the run's bookkeeping when a run starts from a bare spec (LangGraph Studio)."""
    spec, on_budget, run_id = await asyncio.to_thread(_start, state, runtime)
    policy, llm = await asyncio.to_thread(_policy_and_llm, state, runtime)
    _emit("planning", spec=spec.name, policy=policy)
    plan, step = await asyncio.to_thread(plan_step, spec, policy, llm)
    _emit("planned", strategies=[s.kernel for s in plan.strategies], features=plan.features)
    return {
        "spec": spec.model_dump(mode="json"),
        "plan": plan.model_dump(),
        "run_id": run_id,
        "started_at": state.get("started_at") or time.time(),
        "iteration_limit": state.get("iteration_limit") or spec.budget.iterations,
        "on_budget": on_budget,
        "policy": policy,
        "llm_limits": state.get("llm_limits") or {"tokens": llm.settings.llm_token_budget,
                                                  "cost_usd": llm.settings.llm_cost_budget_usd},
        **accounting(step),
    }


@_user_errors
async def retriever(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    """Also refines the plan with experience: a stored kernel to re-validate, or a better start."""

    def work() -> tuple[Any, Any]:
        ctx = context_of(runtime)
        compile_only = ctx.force_compile_only or getattr(ctx.verifier, "backend", None) == "compile_only"
        gpu = gpu_identity(compile_only)
        store = ExperienceStore(experience_path(ctx.runs_dir))
        run = RunView.of(state)
        return retrieve(run.plan, run.spec, gpu, store, Settings().context_chars)

    plan, refs = await asyncio.to_thread(work)
    _emit("retrieved", kernels=[r.kernel for r in refs.kernels], passages=[p.id for p in refs.passages],
          reuse=plan.reuse.model_dump() if plan.reuse else None)
    return {"plan": plan.model_dump(), "references": refs.model_dump()}


@_user_errors
async def coder(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    def work() -> tuple[Any, Any]:
        ctx = context_of(runtime)
        run = RunView.of(state)
        return code_step(run.spec, run.plan, run.references, state.get("candidate"), state.get("iterations", []),
                         state.get("verdicts", []), ctx.run_policy(state), ctx.llm(), llm_budget_spent(state))

    (choice, candidate), step = await asyncio.to_thread(work)
    _emit("candidate", iteration=len(state.get("iterations", [])) + 1, label=candidate.label(), origin=candidate.origin)
    return {"choice": choice.model_dump(), "candidate": candidate.model_dump(), **accounting(step)}


@_user_errors
async def tool(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    def prepare() -> tuple[Any, ...]:
        ctx = context_of(runtime)
        run = RunView.of(state)
        # make_verifier probes the GPU in a subprocess the first time; the baseline's profile is for the LLM reviewer
        verifier = ctx.verifier or make_verifier(ctx.arch or run.spec.arch, ctx.force_compile_only,
                                                 ExperienceStore(experience_path(ctx.runs_dir)),
                                                 profile_baseline=ctx.run_policy(state) != "offline")
        reuse = run.plan.reuse
        checked = run.plan.reuse_checked if reuse and reuse.model_dump() == state["choice"] else None
        ahead = []
        if verifier.backend == "gpu" and ctx.run_policy(state) == "offline" and Settings().run_ahead and not checked:
            iterations = state.get("iterations", [])
            left = state["iteration_limit"] - len(iterations) - 1
            ahead = [write_candidate(c) for c in contenders_ahead(run.plan, iterations, Choice.model_validate(state["choice"]), left)]
        return verifier, run.spec, run.candidate, run.best_median_us, checked, ahead

    verifier, spec, candidate, best_us, checked, ahead = await asyncio.to_thread(prepare)
    iteration = len(state.get("iterations", [])) + 1
    _emit("verifying", iteration=iteration, label=candidate.label(), backend=verifier.backend,
          ahead=[c.label() for c in ahead])
    start = time.perf_counter()
    report: VerificationReport = await asyncio.to_thread(verifier.verify, candidate, spec, best_us, checked, ahead)
    seconds = time.perf_counter() - start
    _emit("verified", iteration=iteration, label=candidate.label(), outcome=describe(report), seconds=round(seconds, 2))
    record = {"iteration": iteration, "choice": state["choice"], "candidate": candidate.label(), "kernel": state["candidate"],
              "backend": verifier.backend, "seconds": seconds, "report": report.model_dump(mode="json")}
    return {"iterations": [record]}


@_user_errors
async def reviewer(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    now = time.time()
    reason = budget_spent(state, now)

    def work() -> tuple[Any, Any]:
        ctx = context_of(runtime)
        run = RunView.of(state)
        return review_step(run.spec, run.plan, state["iterations"], state.get("verdicts", []), reason is None,
                           ctx.run_policy(state), ctx.llm(), llm_budget_spent(state))

    verdict, step = await asyncio.to_thread(work)
    update: dict[str, Any] = {"verdicts": [verdict.model_dump()], "reviewed_at": now, **accounting(step)}
    _emit("reviewed", decision=verdict.decision, diagnosis=verdict.diagnosis, direction=verdict.direction)
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


@_user_errors
async def finalize(state: PipelineState, runtime: Runtime[PipelineContext]) -> dict[str, Any]:
    from sparseditto.artifacts import write_artifacts

    status = final_status(state)
    best = best_iteration(state["iterations"])

    def work() -> Any:
        ctx = context_of(runtime)
        store = ExperienceStore(experience_path(ctx.runs_dir))
        if status == "accepted" and best:
            record_accepted(store, RunView.of(state).spec, best, state["run_id"])
        record_measured(store, RunView.of(state).spec, state.get("plan") or {}, state["iterations"], state["run_id"])
        record_steps(store, RunView.of(state).spec, state["iterations"], state["run_id"])
        return write_artifacts(state, status, ctx.runs_dir)

    folder = await asyncio.to_thread(work)
    _emit("finished", status=status, artifacts=str(folder))
    return {"status": status, "best_iteration": best["iteration"] if best else None, "artifacts_dir": str(folder)}

"""Which policy does each agent step, and the offline fallback when the LLM gives no valid answer.

offline: every step by the expert rules. llm: every step by the model. hybrid: the offline policy plans
and writes the first candidate, the model reviews and writes from the second iteration on. A step the
model fails (no valid answer after repair, an endpoint error, or the LLM budget spent) is done by the
offline policy, and the trace says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from langchain_core.language_models import BaseChatModel

from sparseditto.agents.coder import first_choice, write_candidate
from sparseditto.agents.llm_coder import Written, llm_code
from sparseditto.agents.llm_models import ModelFactory, chat_model, check_usable
from sparseditto.agents.llm_planner import llm_plan
from sparseditto.agents.llm_reviewer import llm_review
from sparseditto.agents.llm_structured import Answer
from sparseditto.agents.llm_trace import Step
from sparseditto.agents.planner import spec_features, offline_plan
from sparseditto.agents.reviewer import offline_review
from sparseditto.agents.schemas import Choice, Plan, References, Verdict, tried_choices
from sparseditto.settings import Role, Settings
from sparseditto.spec import Spec

log = structlog.get_logger(__name__)
T = TypeVar("T")


@dataclass
class LLM:
    """The LLM side of a run: its settings and where its chat models come from (ChatOpenAI unless injected)."""

    settings: Settings
    factory: ModelFactory | None = None

    def model(self, role: Role) -> BaseChatModel:
        if self.factory is not None:
            return self.factory(role)
        check_usable(self.settings)
        return chat_model(self.settings, role)


def uses_llm(policy: str, role: Role, iteration: int) -> bool:
    """`iteration` is the candidate a coder writes, or the one a reviewer reads; 0 for the planner."""
    if policy == "llm":
        return True
    return policy == "hybrid" and role != "planner" and iteration >= 2


def _step(role: Role, iteration: int, policy: str, llm: LLM, budget_spent: str | None,
          ask: Callable[[Any], Answer[T]], offline: Callable[[], T], summary: Callable[[T], str]) -> tuple[T, Step | None]:
    if policy == "offline":
        return offline(), None
    if not uses_llm(policy, role, iteration):
        value = offline()
        return value, Step(node=role, iteration=iteration, policy="offline", summary=summary(value))
    if budget_spent:
        value = offline()
        return value, Step(node=role, iteration=iteration, policy="llm", fallback=f"{budget_spent}; no model call",
                           summary=summary(value))
    model = llm.model(role)
    answer = ask(model)
    value = answer.value
    if value is None:
        log.warning("llm_fallback", role=role, iteration=iteration, reason=answer.failure)
        value = offline()
    s = llm.settings
    return value, Step(node=role, iteration=iteration, policy="llm",
                       model=getattr(model, "model_name", None) or s.model_for(role), method=s.llm_output_method,
                       attempts=answer.attempts, fallback=answer.failure, summary=summary(value), usage=answer.usage,
                       cost_usd=answer.usage.cost_usd(s.llm_prompt_usd_per_1k, s.llm_completion_usd_per_1k))


def plan_step(spec: Spec, policy: str, llm: LLM, budget_spent: str | None = None) -> tuple[Plan, Step | None]:
    feats = spec_features(spec)
    return _step("planner", 0, policy, llm, budget_spent,
                 lambda m: llm_plan(m, spec, feats, llm.settings), lambda: offline_plan(spec, feats),
                 lambda p: ", ".join(s.kernel for s in p.strategies))


def offline_code(plan: Plan, iterations: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> Written:
    """The reviewer's suggestion, else the coder's first choice among what was not tried yet."""
    if verdicts and verdicts[-1].get("next"):
        choice = Choice.model_validate(verdicts[-1]["next"])
    else:
        choice = first_choice(plan, tried_choices(iterations))
    return choice, write_candidate(choice)


def code_step(spec: Spec, plan: Plan, refs: References, previous: dict[str, Any] | None, iterations: list[dict[str, Any]],
              verdicts: list[dict[str, Any]], policy: str, llm: LLM, budget_spent: str | None = None) -> tuple[Written, Step | None]:
    return _step("coder", len(iterations) + 1, policy, llm, budget_spent,
                 lambda m: llm_code(m, llm.settings, spec, plan, refs, previous, iterations, verdicts),
                 lambda: offline_code(plan, iterations, verdicts), lambda w: w[1].label())


def review_step(spec: Spec, plan: Plan, iterations: list[dict[str, Any]], verdicts: list[dict[str, Any]], budget_left: bool,
                policy: str, llm: LLM, budget_spent: str | None = None) -> tuple[Verdict, Step | None]:
    backend = iterations[-1]["backend"]
    return _step("reviewer", len(iterations), policy, llm, budget_spent,
                 lambda m: llm_review(m, llm.settings, spec, plan, iterations, verdicts, budget_left),
                 lambda: offline_review(plan, iterations, spec.dtype, backend, budget_left=budget_left),
                 lambda v: f"{v.decision}: {v.direction or v.diagnosis}")


def accounting(step: Step | None) -> dict[str, Any]:
    """The state update that records a step: its trace entry and its tokens and cost, per node and per run."""
    if step is None:
        return {}
    u = step.usage
    return {
        "llm_trace": [step.model_dump(mode="json")],
        "tokens": u.model_dump(),
        "cost_usd": step.cost_usd,
        "node_tokens": {step.node: {**u.model_dump(), "cost_usd": step.cost_usd, "calls": len(step.attempts)}},
    }

"""Which policy does each step: offline, llm, and hybrid (offline first candidate, then the model)."""

from __future__ import annotations

import pytest
from llm.scripted import ScriptedChatModel

from sparseditto.agents.planner import offline_plan
from sparseditto.agents.policies import LLM, plan_step, uses_llm
from sparseditto.settings import Settings


@pytest.mark.parametrize(("policy", "role", "iteration", "expected"), [
    ("offline", "coder", 3, False),
    ("llm", "planner", 0, True),
    ("llm", "coder", 1, True),
    ("hybrid", "planner", 0, False),
    ("hybrid", "coder", 1, False),
    ("hybrid", "reviewer", 1, False),
    ("hybrid", "coder", 2, True),
    ("hybrid", "reviewer", 2, True),
])
def test_who_does_each_step(policy, role, iteration, expected):
    assert uses_llm(policy, role, iteration) is expected


def test_offline_steps_leave_no_trace_under_the_offline_policy(tiny_spmm):
    plan, step = plan_step(tiny_spmm, "offline", LLM(Settings()))
    assert step is None and plan == offline_plan(tiny_spmm)


def test_hybrid_records_its_offline_steps(tiny_spmm):
    plan, step = plan_step(tiny_spmm, "hybrid", LLM(Settings()))
    assert step.policy == "offline" and step.attempts == [] and step.summary == ", ".join(s.kernel for s in plan.strategies)


def test_a_spent_llm_budget_makes_no_model_call(tiny_spmm):
    model = ScriptedChatModel(script=[])
    plan, step = plan_step(tiny_spmm, "llm", LLM(Settings(llm_model="m"), lambda role: model),
                           budget_spent="token budget spent (100 of 100)")
    assert model.requests == [] and plan == offline_plan(tiny_spmm)
    assert step.fallback.startswith("token budget spent")

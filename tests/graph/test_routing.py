"""Routing after the reviewer and the approval gate, and the budget (iterations and wall clock)."""

from __future__ import annotations

import time

import pytest

from sparseditto.graph.nodes import final_status
from sparseditto.graph.routing import after_human, after_review, budget_spent


def state(done=1, limit=4, elapsed=0.0, wall=1800.0, decision="revise", on_budget="ask", human=None):
    s = {
        "spec": {"budget": {"iterations": limit, "wall_seconds": wall}},
        "iteration_limit": limit,
        "started_at": time.time() - elapsed,
        "iterations": [{"iteration": i + 1} for i in range(done)],
        "verdicts": [{"decision": decision}],
        "on_budget": on_budget,
    }
    if human is not None:
        s["human"] = {"action": human, "iterations": 0}
    return s


def test_budget_left():
    assert budget_spent(state(done=3, limit=4)) is None


def test_iteration_budget_spent():
    reason = budget_spent(state(done=4, limit=4))
    assert reason is not None
    assert "iteration budget spent" in reason and "4 of 4" in reason


def test_wall_clock_budget_spent():
    reason = budget_spent(state(done=1, limit=10, elapsed=120.0, wall=60.0))
    assert reason is not None and "wall-clock" in reason


def test_revise_with_budget_left_goes_back_to_the_coder():
    assert after_review(state(done=1, limit=4)) == "coder"


@pytest.mark.parametrize("decision", ["accept", "give_up", "compiled_only"])
@pytest.mark.parametrize("done", [1, 4])
def test_final_decisions_go_to_finalize(decision, done):
    assert after_review(state(done=done, limit=4, decision=decision)) == "finalize"


@pytest.mark.parametrize(("budget", "kwargs"), [("iterations", dict(done=2, limit=2)),
                                                ("wall clock", dict(done=1, limit=8, elapsed=100.0, wall=10.0))])
def test_spent_budget_with_ask_goes_to_the_gate(budget, kwargs):
    assert after_review(state(on_budget="ask", **kwargs)) == "human_gate"


def test_ask_is_the_default_policy():
    s = state(done=2, limit=2)
    del s["on_budget"]
    assert after_review(s) == "human_gate"


@pytest.mark.parametrize("policy", ["approve", "abort"])
def test_spent_budget_with_approve_or_abort_finalizes_without_asking(policy):
    assert after_review(state(done=2, limit=2, on_budget=policy)) == "finalize"


def test_after_human_extend_goes_to_the_coder():
    assert after_human(state(human="extend")) == "coder"


@pytest.mark.parametrize("answer", ["approve", "abort", None])
def test_after_human_otherwise_finalizes(answer):
    assert after_human(state(human=answer)) == "finalize"


# final status from the last verdict, the best iteration and the gate answer


@pytest.mark.parametrize(
    ("decision", "outcome", "human", "on_budget", "expected"),
    [
        ("accept", "correct", None, "ask", "accepted"),
        ("compiled_only", None, None, "ask", "compiled_only"),
        ("give_up", "correct", None, "ask", "not_faster"),
        ("give_up", "wrong", None, "ask", "failed"),
        ("revise", "correct", "approve", "ask", "approved_best"),
        ("revise", "wrong", "approve", "ask", "failed"),
        ("revise", "correct", "abort", "ask", "aborted"),
        ("revise", "correct", None, "approve", "approved_best"),
        ("revise", "correct", None, "abort", "aborted"),
    ],
)
def test_final_status(decision, outcome, human, on_budget, expected, measured_report, wrong_report):
    s = state(decision=decision, on_budget=on_budget, human=human)
    report = {"correct": measured_report("k()"), "wrong": wrong_report("k()"), None: None}[outcome]
    s["iterations"] = [{"iteration": 1, "report": report.model_dump(mode="json")}] if report else []
    assert final_status(s) == expected


def test_the_router_judges_the_wall_clock_at_the_reviewers_reading():
    s = state(done=1, limit=8, elapsed=100.0, wall=10.0)
    assert after_review(s) == "human_gate"
    s["reviewed_at"] = s["started_at"] + 5.0  # the reviewer saw 5 s of 10 spent: its "revise" stands
    assert after_review(s) == "coder"

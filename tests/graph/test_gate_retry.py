"""The approval gate re-asks on an answer it cannot read, with the reason, until a valid one; driven through
the compiled graph with an in-memory checkpointer and Command(resume=...), and the CLI's bounds are the gate's."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import typer
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from sparseditto.graph.builder import builder
from sparseditto.graph.context import PipelineContext
from sparseditto.graph.gate import ANSWERS, MAX_EXTEND, HumanAnswer, read_answer
from sparseditto.spec import parse_spec

BAD = ["yes", {"action": "nuke"}, "extend 0", f"extend {MAX_EXTEND + 1}", {"action": "extend", "iterations": 0},
       {"action": "extend", "iterations": MAX_EXTEND + 1}, "approve now", "", 42, [], False]


class GraphRun:
    """One run of the compiled graph on an in-memory checkpointer, stopped at the gate by a 1-iteration budget."""

    def __init__(self, spec_dict, verifier, tmp_path, budget=1):
        self.graph = builder.compile(checkpointer=InMemorySaver())
        self.config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        self.context = PipelineContext(runs_dir=str(tmp_path), verifier=verifier)
        spec = parse_spec({**spec_dict, "budget": {"iterations": budget}})
        self.input = {"run_id": "gate-test", "spec": spec.model_dump(mode="json"), "on_budget": "ask",
                      "started_at": time.time(), "iteration_limit": budget, "policy": "offline"}

    def drive(self, graph_input):
        async def go():
            await self.graph.ainvoke(graph_input, self.config, context=self.context)
            return await self.graph.aget_state(self.config)

        return asyncio.run(go())

    def start(self):
        return self.drive(self.input)

    def answer(self, value):
        return self.drive(Command(resume=value))


def payload(snapshot):
    assert snapshot.next == ("human_gate",)
    values = [i.value for t in snapshot.tasks for i in t.interrupts]
    assert len(values) == 1
    return values[0]


@pytest.fixture
def at_gate(tiny_spmm_dict, scripted_verifier, tmp_path):
    verifier = scripted_verifier(speedup=0.8)
    run = GraphRun(tiny_spmm_dict, verifier, tmp_path)
    first = payload(run.start())
    return run, first, verifier


def test_the_payload_says_what_to_answer(at_gate):
    _, first, _ = at_gate
    assert "retry" not in first
    assert set(first["answers"]) == {"approve", "extend N", "abort"}
    assert first["answers"] == ANSWERS
    assert f"1 <= N <= {MAX_EXTEND}" in first["answers"]["extend N"]
    assert '{"action": "extend", "iterations": 5}' in first["answers"]["extend N"]


def test_unreadable_answers_are_asked_again_then_a_valid_one_is_taken(at_gate):
    run, first, verifier = at_gate
    calls = len(verifier.calls)
    for bad in BAD:
        again = payload(run.answer(bad))
        assert again["retry"].startswith(repr(bad)), again["retry"]
        assert "allowed: approve, abort, extend N" in again["retry"]
        assert {k: v for k, v in again.items() if k != "retry"} == first
    assert "1 <= N <= 1000" in payload(run.drive(Command(resume="extend 0")))["retry"]
    done = run.answer("Approve")  # case-insensitive
    assert not done.next
    assert done.values["status"] == "approved_best"
    assert done.values["human"] == {"action": "approve", "iterations": 0}
    assert len(verifier.calls) == calls, "nothing ran while the gate was asking"


def test_extend_after_refused_answers_then_the_next_gate_starts_afresh(at_gate):
    run, _, verifier = at_gate
    assert "retry" in payload(run.answer({"action": "nuke"}))
    second = payload(run.answer({"action": "EXTEND", "iterations": 2}))
    assert "retry" not in second, "a new visit to the gate has no refusal to report"
    assert "iteration budget spent (3 of 3)" in second["reason"]
    assert len(verifier.calls) == 3
    assert "retry" in payload(run.answer("yes"))
    done = run.answer("  abort ")
    assert done.values["status"] == "aborted" and not done.next


@pytest.mark.parametrize(("answer", "expected"), [
    ("approve", HumanAnswer(action="approve")),
    (" APPROVE\n", HumanAnswer(action="approve")),
    ("Abort", HumanAnswer(action="abort")),
    ("extend 3", HumanAnswer(action="extend", iterations=3)),
    ("Extend   7 ", HumanAnswer(action="extend", iterations=7)),
    (f"extend {MAX_EXTEND}", HumanAnswer(action="extend", iterations=MAX_EXTEND)),
    ({"action": "approve"}, HumanAnswer(action="approve")),
    ({"action": "abort", "iterations": 0}, HumanAnswer(action="abort")),
    ({"action": "extend", "iterations": 1}, HumanAnswer(action="extend", iterations=1)),
    ({"action": " Extend", "iterations": MAX_EXTEND}, HumanAnswer(action="extend", iterations=MAX_EXTEND)),
])
def test_accepted_answers(answer, expected):
    assert read_answer(answer) == (expected, "")


@pytest.mark.parametrize("answer", BAD + [None, 
    "extend", "extend -1", "extend two", "extend 1.5", "extend ５", "approve 3", "yes please",
    {"action": "extend"}, {"action": "extend", "iterations": "3"}, {"action": "extend", "iterations": True},
    {"action": "approve", "iterations": 3}, {"action": "approve", "why": "fast"}, {}, ["approve"],
])
def test_refused_answers_say_why_and_what_is_accepted(answer):
    decision, why = read_answer(answer)
    assert decision is None
    assert repr(answer) in why and "allowed: approve, abort, extend N" in why


def test_the_cli_extend_bounds_are_the_gates(cli, tmp_path):
    from sparseditto.cli import app

    command = typer.main.get_command(app).commands["resume"]
    extend = next(p for p in command.params if p.name == "extend")
    assert (extend.min, extend.max) == (1, MAX_EXTEND)
    for n, said in ((0, "greater than or equal to 1"), (MAX_EXTEND + 1, f"less than or equal to {MAX_EXTEND}")):
        out = cli("resume", "somerun", "--extend", n, "--runs-dir", tmp_path)
        assert out.exit_code == 2
        assert said in " ".join(out.output.split())
        assert "Traceback" not in out.output

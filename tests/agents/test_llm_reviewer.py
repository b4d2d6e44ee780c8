"""The LLM reviewer: it sees stages, timings, sanitizer findings and metrics; it cannot accept what was not measured."""

from __future__ import annotations

import httpx
import openai
import pytest
from llm.scripted import ScriptedChatModel, answer

from sparseditto.agents.llm_reviewer import llm_review
from sparseditto.agents.planner import offline_plan
from sparseditto.agents.policies import LLM, review_step
from sparseditto.settings import Settings
from sparseditto.tools.results import Feedback

SETTINGS = Settings(llm_model="scripted", llm_repair_attempts=1)


def record(n, report, backend="gpu"):
    return {"iteration": n, "choice": {"kernel": "spmm_csr_rowsplit", "params": {"VW": 4, "LANES": 32, "WARPS": 4, "UNROLL": 8}},
            "candidate": report.candidate, "backend": backend, "seconds": 1.0, "report": report.model_dump(mode="json")}


@pytest.fixture
def plan(tiny_spmm):
    return offline_plan(tiny_spmm)


def review(model, spec, plan, iterations, budget_left=True):
    return llm_review(model, SETTINGS, spec, plan, iterations, [], budget_left)


def test_the_prompt_shows_timings_sanitizer_findings_and_metrics(tiny_spmm, plan, measured_report):
    report = measured_report("k(VW=4)", median_us=90.0, speedup=0.8)
    report.feedback += [
        Feedback(stage="sanitizer", status="failed", error_type="shared_memory_race", message="racecheck: 2 hazards",
                 evidence={"findings": [{"tool": "racecheck", "message": "shared write-after-read at smem[12]"}], "total": 1}),
        Feedback(stage="profile", status="passed", message="selected metrics",
                 evidence={"bottleneck": "memory", "key_metrics": {"dram__throughput": 31.5},
                           "kernels": [{"kernel": "k", "metrics": {"stall_barrier_full_dump": 1.0}}]}),
    ]
    model = ScriptedChatModel(script=[answer({"decision": "revise", "bottleneck": "race in shared memory",
                                              "direction": "add a __syncthreads() before reusing the tile"})])
    verdict = review(model, tiny_spmm, plan, [record(1, report)]).value
    assert verdict.decision == "revise" and verdict.direction.startswith("add a __syncthreads")
    assert verdict.best_iteration is None  # the sanitizer failure makes it incorrect
    sent = model.text_of(0)
    for expected in ("90.0 us", "0.80x", "cusparse_csr_alg2", "racecheck: 2 hazards", "write-after-read",
                     "dram__throughput", "31.5", "target_speedup"):
        assert expected in sent
    assert "stall_barrier_full_dump" not in sent  # the few selected metrics, not the profile's dump


def test_accept_without_a_measured_faster_kernel_is_repaired(tiny_spmm, plan, wrong_report):
    model = ScriptedChatModel(script=[
        answer({"decision": "accept", "bottleneck": "looks fine"}),
        answer({"decision": "revise", "bottleneck": "wrong result: relative error 0.5", "direction": "guard the tail"}),
    ])
    result = review(model, tiny_spmm, plan, [record(1, wrong_report("k"))])
    assert "accept needs a correct, measured candidate" in result.attempts[0].error
    assert result.value.decision == "revise"
    assert "accept needs a correct" in model.text_of(1)


def test_accept_of_a_faster_kernel_and_stop_without_a_gpu(tiny_spmm, plan, measured_report, wrong_report):
    fast = ScriptedChatModel(script=[answer({"decision": "accept", "bottleneck": "1.3x, 70% of the floor"})])
    verdict = review(fast, tiny_spmm, plan, [record(1, measured_report("k", speedup=1.3))], budget_left=False).value
    assert verdict.decision == "accept" and verdict.best_iteration == 1
    assert "last verdict the budget allows" in fast.text_of(0)

    compiled = wrong_report("k").model_copy(update={"backend": "compile_only", "feedback": [
        Feedback(stage="compile", status="passed"), Feedback(stage="benchmark", status="not_executed", message="no GPU")]})
    stop = ScriptedChatModel(script=[answer({"decision": "stop", "bottleneck": "nothing measurable"})])
    verdict = review(stop, tiny_spmm, plan, [record(1, compiled, backend="compile_only")]).value
    assert verdict.decision == "compiled_only"


def test_a_suggested_next_kernel_is_checked_against_the_vocabulary(tiny_spmm, plan, measured_report):
    model = ScriptedChatModel(script=[
        answer({"decision": "revise", "bottleneck": "b", "direction": "wider", "next": {"kernel": "spmm_csr_rowsplit",
                                                                                       "params": {"VW": 16}}}),
        answer({"decision": "revise", "bottleneck": "b", "direction": "wider", "next": {"kernel": "spmm_csr_rowsplit",
                                                                                       "params": {"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4}}}),
    ])
    result = review(model, tiny_spmm, plan, [record(1, measured_report("k"))])
    assert "takes exactly the parameters" in result.attempts[0].error
    assert result.value.next.params == {"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4}


def test_an_endpoint_error_falls_back_to_the_offline_reviewer_without_repair(tiny_spmm, plan, measured_report):
    down = openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    model = ScriptedChatModel(script=[down])
    verdict, step = review_step(tiny_spmm, plan, [record(1, measured_report("k"))], [], True, "llm",
                                LLM(SETTINGS, lambda role: model))
    assert len(model.requests) == 1
    assert step.fallback.startswith("endpoint error: APIConnectionError")
    assert verdict.decision == "revise" and verdict.next is not None  # the offline coordinate search

"""The pipeline under the llm and hybrid policies.

End to end, the real ChatOpenAI client talks HTTP to a local server replaying scripted completions
(one answer behind a 500 that the client's retry absorbs, tool-call answers, one answer repaired); the
tool node is a scripted verifier, so the test needs no GPU and no model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm.answers import new_kernel, reference
from llm.replay_server import ReplayServer, completion, error
from llm.scripted import ScriptedChatModel, answer

from sparseditto.agents.planner import offline_plan
from sparseditto.cli import _endpoint
from sparseditto.errors import PolicyError
from sparseditto.graph.routing import budget_spent, extended_limits
from sparseditto.pipeline import resume, run_pipeline
from sparseditto.settings import Settings
from sparseditto.spec import parse_spec

PLAN = {"strategies": [{"kernel": "spmm_csr_rowsplit", "start": {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "why": "robust"}],
        "target_speedup": 2.0}
FIRST_FAILURE = "relative error 0.5 exceeds the tolerance 1e-05"
DIRECTION = "write one thread per output element with a row guard"


@pytest.fixture
def first_wrong_then_fast(measured_report, wrong_report):
    return lambda candidate, n: (wrong_report(candidate.label()) if n == 1
                                 else measured_report(candidate.label(), median_us=60.0, speedup=1.3))


def test_llm_run_over_http_acts_on_feedback_and_writes_its_trace(tmp_path, tiny_spmm_dict, scripted_verifier, monkeypatch,
                                                                 first_wrong_then_fast):
    monkeypatch.setenv("SPARSEDITTO_LLM_PROMPT_USD_PER_1K", "1.0")
    monkeypatch.setenv("SPARSEDITTO_LLM_COMPLETION_USD_PER_1K", "2.0")
    replies = [
        error(500),
        completion(tool="PlanAnswer", args=PLAN),
        completion(tool="CoderAnswer", args=reference()),
        completion(tool="ReviewAnswer", args={"decision": "accept", "bottleneck": "done"}),
        completion(tool="ReviewAnswer", args={"decision": "revise", "bottleneck": f"wrong result: {FIRST_FAILURE}",
                                              "direction": DIRECTION}),
        completion(tool="CoderAnswer", args=new_kernel()),
        completion(tool="ReviewAnswer", args={"decision": "accept", "bottleneck": "1.3x the best baseline"}),
    ]
    verifier = scripted_verifier(outcome=first_wrong_then_fast)
    with ReplayServer(replies) as server:
        result = run_pipeline(tiny_spmm_dict, budget=2, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier,
                              policy="llm", llm={"llm_base_url": server.url, "llm_model": "replay-model",
                                                 "llm_output_method": "function_calling"})

    assert result.status == "accepted" and result.policy == "llm"
    # the client retried the 500: the first two requests are the planner's, identical
    assert server.requests[0] == server.requests[1]
    assert len(server.requests) == len(replies)
    assert [r["tools"][0]["function"]["name"] for r in server.requests[1:]] == [
        "PlanAnswer", "CoderAnswer", "ReviewAnswer", "ReviewAnswer", "CoderAnswer", "ReviewAnswer"]
    # the reviewer's accept of a wrong kernel went back with the reason
    assert "accept needs a correct, measured candidate" in server.texts(4)
    # the second coder request carries the first candidate's feedback, and its answer changed the kernel
    second_coder = server.texts(5)
    assert FIRST_FAILURE in second_coder and DIRECTION in second_coder
    assert "spmm_csr_rowsplit(LANES=8, UNROLL=8, VW=4, WARPS=4)" in second_coder
    assert verifier.calls == ["spmm_csr_rowsplit(LANES=8, UNROLL=8, VW=4, WARPS=4)", "spmm_thread_per_output(COLS=32)"]
    assert result.best["candidate"] == "spmm_thread_per_output(COLS=32)"

    # six answers of 120 + 30 tokens; the failed request counts nothing
    assert result.tokens == {"prompt": 720, "completion": 180, "total": 900}
    assert result.cost_usd == pytest.approx(0.72 + 0.36)
    folder = Path(result.artifacts_dir)
    saved = json.loads((folder / "result.json").read_text())
    assert saved["node_tokens"]["reviewer"] == {"prompt": 360, "completion": 90, "total": 450,
                                                "cost_usd": pytest.approx(0.54), "calls": 3}
    assert "#define COLS 32" in (folder / "kernel.cu").read_text()
    assert "spmm_thread_per_output" in (folder / "launch.py").read_text()
    report = (folder / "report.md").read_text()
    assert "## LLM (llm policy)" in report and "= 900" in report

    steps = [json.loads(line) for line in (folder / "trace.jsonl").read_text().splitlines()]
    assert [(s["node"], s["iteration"]) for s in steps] == [("planner", 0), ("coder", 1), ("reviewer", 1),
                                                           ("coder", 2), ("reviewer", 2)]
    assert [len(s["attempts"]) for s in steps] == [1, 1, 2, 1, 1] and not any(s["fallback"] for s in steps)
    trace = (folder / "trace.md").read_text()
    assert "You are the kernel engineer of SparseDitto" in trace and DIRECTION in trace
    assert "Rejected: decision: accept needs" in trace and "900 total" in trace


def test_hybrid_writes_the_first_candidate_offline_then_asks_the_model(tmp_path, tiny_spmm_dict, scripted_verifier):
    model = ScriptedChatModel(script=[
        answer(new_kernel(cols=64)),
        answer({"decision": "revise", "bottleneck": "0.8x", "direction": "try 128 columns per block"}),
    ])
    verifier = scripted_verifier(speedup=0.8)
    result = run_pipeline(tiny_spmm_dict, budget=2, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier,
                          policy="hybrid", llm={"chat_models": lambda role: model})
    first = offline_plan(parse_spec(tiny_spmm_dict)).strategies[0].kernel
    assert verifier.calls[0].startswith(first) and verifier.calls[1] == "spmm_thread_per_output(COLS=64)"
    assert len(model.requests) == 2 and model.script == []
    steps = [json.loads(line) for line in (Path(result.artifacts_dir) / "trace.jsonl").read_text().splitlines()]
    assert [(s["node"], s["policy"]) for s in steps] == [
        ("planner", "offline"), ("coder", "offline"), ("reviewer", "offline"), ("coder", "llm"), ("reviewer", "llm")]
    assert result.tokens["total"] == 280


def test_the_token_budget_stops_the_run_at_the_gate_and_extending_grants_more(tmp_path, tiny_spmm_dict, scripted_verifier):
    revise = {"decision": "revise", "bottleneck": "slow", "direction": "more warps"}
    script = [answer(PLAN), answer(reference()), answer(revise), answer(reference(warps=8))]
    model = ScriptedChatModel(script=script)
    llm = {"chat_models": lambda role: model, "llm_token_budget": 400}
    first = run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path), verifier=scripted_verifier(speedup=0.8),
                         policy="llm", llm=llm)
    assert first.status == "awaiting_approval" and first.iterations == 1
    assert first.gate["reason"] == "token budget spent (420 of 400)"
    # extend by one of the spec's 8 iterations: 50 more tokens; the coder spends 140, so the reviewer may not call
    more = resume(first.run_id, "extend 1", runs_dir=str(tmp_path), verifier=scripted_verifier(speedup=0.8), llm=llm)
    assert more.iterations == 2 and more.tokens["total"] == 560 and model.script == []
    assert more.policy == "llm" and more.status == "awaiting_approval"
    saved = (Path(tmp_path) / first.run_id)
    # still at the gate: the run's folder holds its status only, no artifacts yet
    assert sorted(p.name for p in saved.iterdir()) == ["status.json"]
    done = resume(first.run_id, "approve", runs_dir=str(tmp_path))
    steps = [json.loads(line) for line in (Path(done.artifacts_dir) / "trace.jsonl").read_text().splitlines()]
    assert steps[-1]["node"] == "reviewer" and steps[-1]["fallback"].startswith("token budget spent (560 of 470)")


def test_llm_policy_without_a_model_is_refused_in_one_line(tmp_path, tiny_spmm_dict, monkeypatch, examples_dir, cli):
    monkeypatch.delenv("SPARSEDITTO_LLM_MODEL", raising=False)
    with pytest.raises(PolicyError, match="needs a model"):
        run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path), policy="llm")
    with pytest.raises(PolicyError, match="llm_output_method"):
        run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path), policy="llm", llm={"llm_model": "m", "llm_output_method": "xml"})
    out = cli("run", examples_dir / "small_spmm.yaml", "--policy", "llm", "--runs-dir", tmp_path)
    assert out.exit_code == 2 and "needs a model" in out.output and "Traceback" not in out.output


def test_doctor_reports_whether_the_endpoint_answers():
    with ReplayServer([completion(content="ready")]) as server:
        line = _endpoint(Settings(llm_base_url=server.url, llm_model="replay-model"))
        assert server.requests[0]["model"] == "replay-model" and server.requests[0]["max_completion_tokens"] == 1
    assert line.startswith(f"{server.url} (replay-model): answers")
    dead = _endpoint(Settings(llm_base_url=server.url, llm_model="replay-model", llm_coder_model="coder-model"))
    assert "coder coder-model" in dead and "no answer" in dead


def budget_state(tokens=0, cost=0.0, limits=None, iteration_limit=8):
    return {"iterations": [{}], "iteration_limit": iteration_limit, "started_at": 1e12, "spec": {"budget": {"wall_seconds": 1e9}},
            "tokens": {"total": tokens}, "cost_usd": cost, "llm_limits": limits or {}}


def test_token_and_cost_budgets_are_spent_like_the_iteration_budget():
    assert budget_spent(budget_state(tokens=10**6)) is None  # no LLM budget set: unlimited
    assert budget_spent(budget_state(tokens=999, limits={"tokens": 1000})) is None
    assert budget_spent(budget_state(tokens=1000, limits={"tokens": 1000})) == "token budget spent (1000 of 1000)"
    assert budget_spent(budget_state(cost=0.5, limits={"tokens": None, "cost_usd": 0.5})).startswith("cost budget spent ($0.5000")
    state = budget_state(tokens=900, cost=0.25, limits={"tokens": 800, "cost_usd": 0.2}, iteration_limit=4)
    assert extended_limits(state, 2) == {"tokens": 1300, "cost_usd": pytest.approx(0.35)}


def test_cli_llm_run_compiles_the_model_kernels_without_a_gpu(tmp_path, examples_dir, cli):
    """`sparseditto run --policy llm --compile-only` with the default json_schema output, one 429 retried."""
    as_json = json.dumps
    replies = [completion(content=as_json(PLAN)), error(429), completion(content=as_json(reference())),
               completion(content=as_json({"decision": "revise", "bottleneck": "nothing measured", "direction": DIRECTION})),
               completion(content=as_json(new_kernel())),
               completion(content=as_json({"decision": "stop", "bottleneck": "no GPU: nothing can be measured"}))]
    with ReplayServer(replies) as server:
        out = cli("run", examples_dir / "small_spmm.yaml", "--policy", "llm", "--compile-only", "--model", "replay-model",
                  "--base-url", server.url, "--runs-dir", tmp_path, "--on-budget", "abort")
    assert out.exit_code == 0, out.output
    assert "spmm_thread_per_output(COLS=32): compiled; GPU stages not executed" in out.output
    assert "compiled_only" in out.output and "750 (600 prompt, 150 completion)" in out.output
    assert all(r["response_format"]["type"] == "json_schema" for r in server.requests)

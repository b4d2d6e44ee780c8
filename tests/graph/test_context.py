"""A graph run without a context (LangGraph Studio) takes its defaults from the SPARSEDITTO_* settings."""

from __future__ import annotations

from types import SimpleNamespace

from sparseditto.graph.context import PipelineContext, context_of


def test_a_run_without_context_uses_the_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSEDITTO_RUNS_DIR", str(tmp_path / "studio-runs"))
    monkeypatch.setenv("SPARSEDITTO_COMPILE_ONLY", "1")
    monkeypatch.setenv("SPARSEDITTO_POLICY", "hybrid")
    ctx = context_of(SimpleNamespace(context=None))
    assert ctx.runs_dir == str(tmp_path / "studio-runs")
    assert ctx.force_compile_only is True
    assert ctx.run_policy({}) == "hybrid"
    assert ctx.run_policy({"policy": "offline"}) == "offline"  # a resumed run keeps the policy it started with


def test_a_given_context_wins():
    given = PipelineContext(runs_dir="mine", force_compile_only=False, policy="llm")
    assert context_of(SimpleNamespace(context=given)) is given
    assert given.run_policy({"policy": "offline"}) == "llm"

"""Every example spec runs end to end in compile-only mode, and run_pipeline's inputs and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparseditto.errors import NotImplementedFamilyError, SpecError
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.pipeline import run_pipeline

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_compiles_every_planned_strategy(path, tmp_path):
    result = run_pipeline(str(path), runs_dir=str(tmp_path), compile_only=True, on_budget="abort")
    assert result.status == "compiled_only"
    folder = Path(result.artifacts_dir)
    saved = json.loads((folder / "result.json").read_text())
    planned = [s["kernel"] for s in saved["plan"]["strategies"]]
    assert [it["choice"]["kernel"] for it in saved["iterations"]] == planned
    for it in saved["iterations"]:
        refused = [f for f in it["report"]["feedback"] if f["status"] in {"failed", "error"}]
        assert not refused, f"{it['candidate']}: {refused[0]['stage']} {refused[0]['error_type']}: {refused[0]['message']}"
    assert (folder / "kernel.cu").is_file() and (folder / "launch.py").is_file()


def test_budget_argument_overrides_the_spec(tmp_path, tiny_spmm_dict, scripted_verifier):
    verifier = scripted_verifier(speedup=0.5)
    result = run_pipeline({**tiny_spmm_dict, "budget": {"iterations": 7}}, budget=3, on_budget="abort",
                          runs_dir=str(tmp_path), verifier=verifier)
    assert result.iterations == 3 == len(verifier.calls)


def test_bad_spec_is_refused_before_anything_runs(tmp_path, tiny_spmm_dict, scripted_verifier):
    verifier = scripted_verifier()
    with pytest.raises(SpecError, match="dtype"):
        run_pipeline({**tiny_spmm_dict, "dtype": "int8"}, runs_dir=str(tmp_path), verifier=verifier)
    with pytest.raises(NotImplementedFamilyError):
        run_pipeline({**tiny_spmm_dict, "operation": "sddmm"}, runs_dir=str(tmp_path), verifier=verifier)
    with pytest.raises(SpecError, match="no such spec file"):
        run_pipeline(str(tmp_path / "missing.yaml"), runs_dir=str(tmp_path), verifier=verifier)
    assert verifier.calls == []


def test_the_offline_run_offers_its_next_contenders_to_run_ahead(tmp_path, scripted_verifier):
    """The tool node passes the contenders the offline review will ask for next (never the current one, never more
    than the budget leaves), so that a GPU backend can run them in the current candidate's runner process."""
    from sparseditto.agents.planner import offline_plan
    from sparseditto.agents.reviewer import contenders
    from sparseditto.spec import parse_spec

    spec = {"operation": "spmv", "pattern": {"distribution": "uniform", "nnz_per_row": 16}, "M": 200000, "K": 200000}
    labels = [get_kernel(c.kernel).instantiate(c.params).label() for c in contenders(offline_plan(parse_spec(spec)))]
    assert len(labels) >= 2
    verifier = scripted_verifier(speedup=0.5)
    run_pipeline({**spec, "budget": {"iterations": 2}}, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier)
    assert verifier.calls[:2] == labels[:2]
    assert verifier.ahead == [labels[1:2], []]  # the budget leaves one more iteration after the first, none after


def test_runs_ahead_can_be_switched_off(tmp_path, scripted_verifier, monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_RUN_AHEAD", "0")
    spec = {"operation": "spmv", "pattern": {"distribution": "uniform", "nnz_per_row": 16}, "M": 200000, "K": 200000}
    verifier = scripted_verifier(speedup=0.5)
    run_pipeline({**spec, "budget": {"iterations": 3}}, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier)
    assert verifier.ahead == [[], [], []]


@pytest.mark.parametrize("policy, wanted", [("offline", False), ("hybrid", True)])
def test_the_baseline_is_profiled_only_for_a_policy_whose_reviewer_reads_it(tmp_path, tiny_spmm_dict, scripted_verifier,
                                                                           monkeypatch, policy, wanted):
    """The tool node's verifier profiles the best baseline beside the candidate only when an LLM reviewer may read
    it: the offline policy never does, and the stage is about three times as long with it."""
    from sparseditto.graph import nodes

    asked = []
    monkeypatch.setattr(nodes, "make_verifier", lambda *a, **k: asked.append(k) or scripted_verifier(speedup=0.5))
    run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path), policy=policy,
                 llm={"chat_models": lambda role: pytest.fail(f"no model call expected ({role})")})
    assert asked and all(k["profile_baseline"] is wanted for k in asked)

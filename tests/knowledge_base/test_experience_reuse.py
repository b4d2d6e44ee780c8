"""Runs through the graph that store an accepted kernel and later runs that reuse it (scripted verifier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparseditto.agents import retriever
from sparseditto.knowledge_base.experience import ExperienceStore
from sparseditto.pipeline import run_pipeline
from sparseditto.tools.device import DeviceFacts


def on_gpu(monkeypatch, name):
    """The retriever sees this GPU (the scripted verifier's reports name "Test GPU", sm_90)."""
    monkeypatch.setattr(retriever, "detect", lambda: DeviceFacts(gpu={"name": name, "arch": "sm_90", "count": 1, "sms": 132}))


def verdicts(result):
    return json.loads((Path(result.artifacts_dir) / "result.json").read_text())["verdicts"]


@pytest.fixture
def solved(tmp_path, tiny_spmm_dict, scripted_verifier, measured_report):
    """A first run that is accepted at its 4th candidate (speedup rises with each call), so the
    accepted kernel is not the plan's starting point."""
    verifier = scripted_verifier(outcome=lambda c, n: measured_report(c.label(), median_us=100.0 - n, speedup=0.9 + 0.6 * n))
    result = run_pipeline(tiny_spmm_dict, budget=6, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier)
    assert result.status == "accepted" and result.iterations == 4
    return result, verifier.calls[-1]


def test_accepted_gpu_run_is_stored(solved, tmp_path, tiny_spmm):
    result, label = solved
    store = ExperienceStore(tmp_path / "experience.sqlite")
    assert store.count() == 1
    entry = store.exact(tiny_spmm, {"name": "Test GPU", "arch": "sm_90"})
    assert entry.run_id == result.run_id and entry.choice.model_dump() == result.best["choice"]


def test_same_spec_same_gpu_revalidates_the_stored_kernel(solved, tmp_path, tiny_spmm_dict, scripted_verifier, monkeypatch):
    _, label = solved
    on_gpu(monkeypatch, "Test GPU")
    verifier = scripted_verifier(speedup=1.2)  # faster than the baselines, short of the 3x target
    again = run_pipeline({**tiny_spmm_dict, "name": "same problem"}, budget=6, on_budget="abort",
                         runs_dir=str(tmp_path), verifier=verifier)
    assert again.status == "accepted"
    assert verifier.calls == [label]
    assert verdicts(again)[-1]["diagnosis"].startswith("stored kernel re-validated")
    report = (Path(again.artifacts_dir) / "report.md").read_text()
    assert "## Retrieved" in report and "| experience |" in report


def test_another_gpu_gets_no_reuse_but_a_start_point(solved, tmp_path, tiny_spmm_dict, scripted_verifier, monkeypatch):
    _, label = solved
    on_gpu(monkeypatch, "Other GPU")
    verifier = scripted_verifier(speedup=1.2)
    other = run_pipeline(tiny_spmm_dict, budget=3, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier)
    assert len(verifier.calls) == 3, "no re-validation shortcut on another GPU: the search runs"
    assert verifier.calls[0] == label, "the kernel accepted for the same problem elsewhere is the start point"
    assert not any(v["diagnosis"].startswith("stored kernel") for v in verdicts(other))


def test_failed_revalidation_continues_the_search(solved, tmp_path, tiny_spmm_dict, scripted_verifier, monkeypatch,
                                                  measured_report, wrong_report):
    _, label = solved
    on_gpu(monkeypatch, "Test GPU")
    verifier = scripted_verifier(outcome=lambda c, n: wrong_report(c.label()) if n == 1 else measured_report(c.label(), speedup=3.5))
    result = run_pipeline(tiny_spmm_dict, budget=6, on_budget="abort", runs_dir=str(tmp_path), verifier=verifier)
    assert verifier.calls[0] == label
    assert len(verifier.calls) == 2 and verifier.calls[1] != label
    assert result.status == "accepted" and result.best["iteration"] == 2


def test_compile_only_runs_never_look_up_or_store(solved, tmp_path, tiny_spmm_dict, monkeypatch):
    on_gpu(monkeypatch, "Test GPU")
    result = run_pipeline(tiny_spmm_dict, budget=2, on_budget="abort", runs_dir=str(tmp_path), compile_only=True)
    assert result.status == "compiled_only"
    saved = json.loads((Path(result.artifacts_dir) / "result.json").read_text())
    assert saved["plan"]["reuse"] is None
    assert ExperienceStore(tmp_path / "experience.sqlite").count() == 1

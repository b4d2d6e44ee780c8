"""A run records the one-parameter steps it measured, and the next run's plan carries them (scripted verifier)."""

from __future__ import annotations

import json
from pathlib import Path

from sparseditto.graph import nodes
from sparseditto.knowledge_base.experience import ExperienceStore
from sparseditto.pipeline import run_pipeline


def test_a_later_run_plans_with_the_steps_an_earlier_one_measured(tmp_path, tiny_spmm_dict, scripted_verifier,
                                                                   monkeypatch):
    # the GPU the retriever sees (this machine has none): the one the scripted reports name
    monkeypatch.setattr(nodes, "gpu_identity", lambda compile_only: {"name": "Test GPU", "arch": "sm_90"})
    first = run_pipeline(tiny_spmm_dict, budget=5, on_budget="approve", runs_dir=str(tmp_path),
                         verifier=scripted_verifier(speedup=0.8))
    plan = json.loads((Path(first.artifacts_dir) / "result.json").read_text())["plan"]
    assert plan["step_ratios"] == {}
    measured = ExperienceStore(tmp_path / "experience.sqlite").step_ratios("csr_spmm", "fp32", "Test GPU")
    # the scripted times fall with every call, so each later neighbour of a centre was faster than it
    assert measured and min(measured.values()) < 1.0
    second = run_pipeline(tiny_spmm_dict, budget=1, on_budget="approve", runs_dir=str(tmp_path),
                          verifier=scripted_verifier(speedup=0.8))
    assert json.loads((Path(second.artifacts_dir) / "result.json").read_text())["plan"]["step_ratios"] == measured

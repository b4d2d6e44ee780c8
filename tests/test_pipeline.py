"""Every example spec runs end to end in compile-only mode, and run_pipeline's inputs and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparseditto.errors import NotImplementedFamilyError, SpecError
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

"""The sanitizer stage's orchestration, with the tool processes replaced by doubles (the tools themselves are judged
on the GPU by the adversarial suite): the tools run at the same time, each on its own job and instances, and the
verdict is read in the tools' order whatever order they finish in."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import gpu_stages
from sparseditto.tools.runner import RunJob
from sparseditto.tools.sanitizer import TOOLS, Finding


def job(tmp_path: Path) -> RunJob:
    spec = parse_spec({"operation": "spmv", "M": 1000, "K": 1000, "pattern": {"distribution": "uniform", "nnz_per_row": 8}})
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    return RunJob(candidate=candidate, spec=spec, cubin_path=str(tmp_path / "k.cubin"), seeds=[1], held_out_shapes=[],
                  timing_seed=2, instances_path=str(tmp_path / "instances.pkl"))


@pytest.fixture
def tools(monkeypatch):
    """Each double records when it ran and which instances its job file names; findings per tool as configured."""
    seen: dict = {"running": 0, "most": 0, "instances": {}, "findings": {}, "delay": {}}
    lock = threading.Lock()

    def run_tool(tool, program, timeout_s):
        with lock:
            seen["running"] += 1
            seen["most"] = max(seen["most"], seen["running"])
        seen["instances"][tool] = json.loads(Path(program[-2]).read_text())["sanitize_instances"]
        time.sleep(seen["delay"].get(tool, 0.2))
        with lock:
            seen["running"] -= 1
        found = [Finding(tool=tool, kind=kind, message=f"{tool} saw it") for kind in seen["findings"].get(tool, ())]
        return found, "", 99 if found else 0

    monkeypatch.setattr(gpu_stages, "run_tool", run_tool)
    return seen


def test_the_tools_run_at_the_same_time_each_on_its_instances(tools, tmp_path):
    fb = gpu_stages.sanitizer_stage(job(tmp_path), tmp_path, 60, ["tails", "longest_rows", "main"])
    assert fb.status == "passed"
    assert tools["most"] == len(TOOLS)
    assert tools["instances"] == {"memcheck": ["tails", "longest_rows", "main"], "racecheck": ["tails", "longest_rows"],
                                  "initcheck": ["tails", "longest_rows", "main"], "synccheck": ["tails", "longest_rows"]}


def test_the_verdict_follows_the_tools_order_not_the_finishing_order(tools, tmp_path):
    tools["findings"] = {"memcheck": ["out_of_bounds"], "synccheck": ["sync_error"]}
    tools["delay"] = {"memcheck": 0.5, "synccheck": 0.0}  # synccheck finishes first
    fb = gpu_stages.sanitizer_stage(job(tmp_path), tmp_path, 60, ["tails"])
    assert (fb.status, fb.error_type) == ("failed", "out_of_bounds")
    assert fb.evidence["total"] == 2


def test_one_after_another_when_switched_off(tools, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_SANITIZER_PARALLEL", "0")
    assert gpu_stages.sanitizer_stage(job(tmp_path), tmp_path, 60, ["tails"]).status == "passed"
    assert tools["most"] == 1

"""The approval gate end to end: run_pipeline / resume with a SQLite checkpoint and a scripted Verifier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparseditto.errors import ResumeError, RunNotFoundError
from sparseditto.pipeline import resume, run_pipeline

ARTIFACTS = ("kernel.cu", "launch.py", "build.sh", "report.md", "result.json")


def result_json(result) -> dict:
    return json.loads((Path(result.artifacts_dir) / "result.json").read_text())


@pytest.fixture
def paused(tmp_path, tiny_spmm_dict, scripted_verifier):
    """A run whose 2-iteration budget is spent with a correct kernel slower than the best baseline."""
    verifier = scripted_verifier(speedup=0.8)
    result = run_pipeline(tiny_spmm_dict, budget=2, on_budget="ask", runs_dir=str(tmp_path), verifier=verifier)
    return result, verifier


def test_spent_budget_pauses_at_the_gate(paused, tmp_path):
    result, verifier = paused
    assert result.status == "awaiting_approval"
    assert result.iterations == 2
    assert len(verifier.calls) == 2 and verifier.calls[0] != verifier.calls[1]
    gate = result.gate
    assert gate is not None
    assert "iteration budget spent (2 of 2)" in gate["reason"]
    # the scripted verifier times each call a little faster: the best is the second candidate
    assert gate["best"]["iteration"] == 2
    assert gate["best"]["candidate"] == verifier.calls[1]
    assert "0.80x" in gate["best"]["outcome"]
    assert set(gate["answers"]) == {"approve", "extend N", "abort"}
    assert gate["why_not_accepted"]
    assert result.artifacts_dir is None
    assert not (tmp_path / result.run_id / "report.md").exists()


def test_extend_runs_more_iterations_then_approve_writes_artifacts(paused, tmp_path, scripted_verifier):
    first, _ = paused
    runs = str(tmp_path)

    more = scripted_verifier(speedup=0.8)
    extended = resume(first.run_id, "extend 2", runs_dir=runs, verifier=more)
    assert extended.run_id == first.run_id
    assert extended.status == "awaiting_approval"
    assert extended.iterations == 4
    assert len(more.calls) == 2
    assert "iteration budget spent (4 of 4)" in extended.gate["reason"]

    approved = resume(first.run_id, "approve", runs_dir=runs)
    assert approved.status == "approved_best"
    assert approved.gate is None
    assert approved.iterations == 4
    folder = Path(approved.artifacts_dir)
    assert folder == tmp_path / first.run_id
    for name in ARTIFACTS:
        assert (folder / name).is_file(), name

    saved = result_json(approved)
    assert saved["status"] == "approved_best"
    assert saved["human"]["action"] == "approve"
    labels = [it["candidate"] for it in saved["iterations"]]
    assert len(set(labels)) == 4, "a candidate was verified twice"
    fastest = min(saved["iterations"], key=lambda it: it["report"]["measurement"]["median_us"])
    assert approved.best["iteration"] == saved["best_iteration"] == fastest["iteration"]
    assert approved.best["measurement"]["speedup_vs_best"] == pytest.approx(0.8)

    kernel_cu = (folder / "kernel.cu").read_text()
    for name, value in fastest["choice"]["params"].items():
        assert f"#define {name} {value}" in kernel_cu
    compile((folder / "launch.py").read_text(), "launch.py", "exec")
    assert "nvcc" in (folder / "build.sh").read_text()
    report = (folder / "report.md").read_text()
    assert "approved_best" in report
    assert fastest["candidate"] in report


def test_resume_in_a_fresh_process_reads_the_checkpoint(paused, tmp_path):
    result, _ = paused
    code = ("import sys; from sparseditto import resume; "
            "r = resume(sys.argv[1], 'approve', runs_dir=sys.argv[2]); print(r.status, r.iterations)")
    proc = subprocess.run([sys.executable, "-c", code, result.run_id, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["approved_best", "2"]
    assert (tmp_path / result.run_id / "kernel.cu").is_file()


def test_abort_at_the_gate(paused, tmp_path):
    result, _ = paused
    aborted = resume(result.run_id, "abort", runs_dir=str(tmp_path))
    assert aborted.status == "aborted"
    assert aborted.iterations == 2
    assert "aborted" in (Path(aborted.artifacts_dir) / "report.md").read_text()


def test_a_finished_run_cannot_be_resumed(paused, tmp_path):
    result, _ = paused
    resume(result.run_id, "approve", runs_dir=str(tmp_path))
    with pytest.raises(ResumeError, match="already finished"):
        resume(result.run_id, "approve", runs_dir=str(tmp_path))


@pytest.mark.parametrize("answer", ["maybe", "yes", "extend", "extend two", "extend -1", "extend 0", ""])
def test_bad_resume_answer(paused, tmp_path, answer):
    result, _ = paused
    with pytest.raises(ResumeError, match="allowed: approve, abort, extend N"):
        resume(result.run_id, answer, runs_dir=str(tmp_path))
    # the run is still waiting at the gate
    assert resume(result.run_id, "abort", runs_dir=str(tmp_path)).status == "aborted"


@pytest.mark.parametrize("answer", ["approve now", "abort it"])
def test_trailing_words_after_approve_or_abort_are_a_resume_error(paused, tmp_path, answer):
    # what a person may type at the CLI's interactive gate prompt
    result, _ = paused
    with pytest.raises(ResumeError):
        resume(result.run_id, answer, runs_dir=str(tmp_path))


def test_unknown_run_id(paused, tmp_path):
    with pytest.raises(RunNotFoundError, match="nosuchrun"):
        resume("nosuchrun", "approve", runs_dir=str(tmp_path))


def test_no_runs_at_all(tmp_path):
    with pytest.raises(RunNotFoundError):
        resume("abc123", "approve", runs_dir=str(tmp_path / "empty"))


@pytest.mark.parametrize(("policy", "status"), [("approve", "approved_best"), ("abort", "aborted")])
def test_approve_and_abort_policies_never_pause(tmp_path, tiny_spmm_dict, scripted_verifier, policy, status):
    verifier = scripted_verifier(speedup=0.8)
    result = run_pipeline(tiny_spmm_dict, budget=2, on_budget=policy, runs_dir=str(tmp_path), verifier=verifier)
    assert result.status == status
    assert result.gate is None
    assert result.iterations == 2 == len(verifier.calls)
    assert (Path(result.artifacts_dir) / "report.md").is_file()


def test_reaching_the_target_speedup_is_accepted(tmp_path, tiny_spmm_dict, scripted_verifier):
    verifier = scripted_verifier(speedup=10.0)
    result = run_pipeline(tiny_spmm_dict, budget=5, runs_dir=str(tmp_path), verifier=verifier)
    assert result.status == "accepted"
    assert result.iterations == 1
    assert result.best["iteration"] == 1
    folder = Path(result.artifacts_dir)
    for name in ARTIFACTS:
        assert (folder / name).is_file(), name
    assert "target" in result_json(result)["verdicts"][-1]["diagnosis"]


def test_spent_budget_with_a_kernel_faster_than_the_baselines_is_accepted(tmp_path, tiny_spmm_dict, scripted_verifier):
    result = run_pipeline(tiny_spmm_dict, budget=2, on_budget="ask", runs_dir=str(tmp_path),
                          verifier=scripted_verifier(speedup=1.5))
    assert result.status == "accepted"
    assert result.gate is None
    assert result.iterations == 2


def test_wrong_results_are_never_accepted(tmp_path, tiny_spmm_dict, scripted_verifier, wrong_report):
    verifier = scripted_verifier(outcome=lambda candidate, n: wrong_report(candidate.label()))
    result = run_pipeline(tiny_spmm_dict, budget=6, on_budget="approve", runs_dir=str(tmp_path), verifier=verifier)
    assert result.status == "failed"
    assert result.best is None
    assert 1 <= result.iterations <= 6
    folder = Path(result.artifacts_dir)
    assert not (folder / "kernel.cu").exists()
    assert "wrong_result" in (folder / "report.md").read_text()


def test_wrong_results_approved_at_the_gate_still_fail(tmp_path, tiny_spmm_dict, scripted_verifier, wrong_report):
    verifier = scripted_verifier(outcome=lambda candidate, n: wrong_report(candidate.label()))
    paused = run_pipeline(tiny_spmm_dict, budget=1, on_budget="ask", runs_dir=str(tmp_path), verifier=verifier)
    assert paused.status == "awaiting_approval"
    assert paused.gate["best"] is None
    assert resume(paused.run_id, "approve", runs_dir=str(tmp_path)).status == "failed"


def test_progress_events(tmp_path, tiny_spmm_dict, scripted_verifier):
    events = []
    run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path),
                 verifier=scripted_verifier(), on_event=events.append)
    kinds = [e["event"] for e in events]
    for kind in ("planned", "candidate", "verifying", "verified", "reviewed", "finished"):
        assert kind in kinds
    assert kinds[-1] == "finished"
    assert next(e for e in events if e["event"] == "verifying")["backend"] == "gpu"


def test_run_id_can_be_chosen(tmp_path, tiny_spmm_dict, scripted_verifier):
    result = run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path),
                          verifier=scripted_verifier(), run_id="my-run")
    assert result.run_id == "my-run"
    assert Path(result.artifacts_dir) == tmp_path / "my-run"


# ---- compile-only ------------------------------------------------------------------------------------


def assert_compiled_only(result):
    assert result.status == "compiled_only"
    assert result.gate is None
    assert result.iterations >= 1
    folder = Path(result.artifacts_dir)
    for name in ARTIFACTS:
        assert (folder / name).is_file(), name
    report = (folder / "report.md").read_text()
    assert "compiled_only" in report
    assert "not executed" in report.lower()
    saved = result_json(result)
    for it in saved["iterations"]:
        assert it["backend"] == "compile_only"
        statuses = {f["stage"]: f["status"] for f in it["report"]["feedback"]}
        assert statuses["compile"] == "passed"
        assert all(statuses[s] == "not_executed" for s in ("correctness", "sanitizer", "benchmark"))
        assert it["report"]["measurement"] is None


def test_compile_only_default_without_a_gpu(tmp_path, examples_dir, machine_has_gpu):
    if machine_has_gpu:
        pytest.skip("a CUDA device is present: the default verifier runs on the GPU")
    result = run_pipeline(str(examples_dir / "small_spmm.yaml"), runs_dir=str(tmp_path))
    assert_compiled_only(result)


def test_forced_compile_only(tmp_path, tiny_spmm_dict):
    result = run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path), compile_only=True, on_budget="abort")
    assert_compiled_only(result)

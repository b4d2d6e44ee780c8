"""Run bookkeeping: the run id and folder exist before planning, status.json follows the run, `sparseditto runs`
finds crashed runs, `resume ID` continues them and `resume ID --abort` ends them without running anything;
bad run ids, on_budget values and runs dirs are refused with one clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparseditto.artifacts import list_runs, read_status, write_status
from sparseditto.errors import ResumeError, RunOptionError, RunsDirError, SparseDittoError
from sparseditto.graph import nodes
from sparseditto.pipeline import resume, run_pipeline


def status_of(tmp_path, run_id) -> dict:
    return json.loads((tmp_path / run_id / "status.json").read_text())


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def one_line(out) -> str:
    return " ".join(out.output.split())


class Boom(RuntimeError):
    pass


@pytest.fixture
def failing_planner(monkeypatch, tmp_path):
    """A planner that raises, recording what existed of the run when planning began."""
    seen = {}

    def plan_step(spec, policy, llm):
        folders = [p for p in tmp_path.iterdir() if p.is_dir()]
        seen["folders"] = [p.name for p in folders]
        seen["status"] = [json.loads((p / "status.json").read_text()) for p in folders]
        raise Boom("planner exploded")

    monkeypatch.setattr(nodes, "plan_step", plan_step)
    return seen


def test_the_run_exists_before_planning_and_a_crash_is_recorded(failing_planner, tmp_path, tiny_spmm_dict):
    events = []
    with pytest.raises(Boom):
        run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path), run_id="early", on_event=events.append)
    assert events[0] == {"event": "started", "run_id": "early", "folder": str(tmp_path / "early")}
    assert failing_planner["folders"] == ["early"]
    before = failing_planner["status"][0]
    assert before["state"] == "running" and before["spec"] == "tiny_spmm" and before["pid"] == os.getpid()
    after = status_of(tmp_path, "early")
    assert after["state"] == "failed"
    assert "planner exploded" in after["error"]
    assert after["started"] == before["started"] and after["updated"] >= before["updated"]
    # ended as it is: nothing was planned, the report says so
    ended = resume("early", "abort", runs_dir=str(tmp_path))
    assert ended.status == "aborted" and ended.iterations == 0
    assert "not planned" in (tmp_path / "early" / "report.md").read_text()
    assert status_of(tmp_path, "early")["state"] == "aborted"


def test_the_cli_prints_the_run_id_before_planning(cli, failing_planner, tmp_path, examples_dir):
    out = cli("run", examples_dir / "small_spmm.yaml", "--compile-only", "--runs-dir", tmp_path)
    assert isinstance(out.exception, Boom)
    run_id = failing_planner["folders"][0]
    assert f"run {run_id}" in one_line(out)
    assert status_of(tmp_path, run_id)["state"] == "failed"


def test_status_follows_the_run_to_the_gate_and_the_end(tmp_path, tiny_spmm_dict, scripted_verifier):
    seen = []

    def watch(event):
        seen.append(read_status(tmp_path, "follow"))

    paused = run_pipeline(tiny_spmm_dict, budget=2, runs_dir=str(tmp_path), run_id="follow",
                          verifier=scripted_verifier(speedup=0.8), on_event=watch)
    assert {s["state"] for s in seen} == {"running"}
    assert {"planner", "retriever", "coder", "tool"} <= {s.get("node") for s in seen}
    assert paused.status == "awaiting_approval"
    waiting = status_of(tmp_path, "follow")
    assert waiting["state"] == "waiting_for_approval"
    assert "iteration budget spent" in waiting["gate"]
    assert [r["state"] for r in list_runs(tmp_path)] == ["waiting_for_approval"]  # pid gone does not matter here

    done = resume("follow", "approve", runs_dir=str(tmp_path))
    final = status_of(tmp_path, "follow")
    assert (final["state"], final["result"]) == ("done", "approved_best")
    assert final["artifacts_dir"] == done.artifacts_dir and "gate" not in final


def test_abort_at_the_gate_is_recorded_as_aborted(tmp_path, tiny_spmm_dict, scripted_verifier):
    run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path), run_id="stop",
                 verifier=scripted_verifier(speedup=0.8))
    assert status_of(tmp_path, "stop")["state"] == "aborted"


# ---- crashed runs ---------------------------------------------------------------------------------------


@pytest.fixture
def crashed(tmp_path, tiny_spmm_dict, scripted_verifier, measured_report):
    """A run whose process died (as with kill -9) in its second verification: its status says running with a pid
    that no longer exists."""

    def outcome(candidate, n):
        if n == 2:
            raise Boom("killed")
        return measured_report(candidate.label(), speedup=0.8)

    with pytest.raises(Boom):
        run_pipeline(tiny_spmm_dict, budget=3, runs_dir=str(tmp_path), run_id="crashed",
                     verifier=scripted_verifier(outcome=outcome))
    write_status(tmp_path, "crashed", "running", node="coder")
    path = tmp_path / "crashed" / "status.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": dead_pid()}))
    return "crashed"


def test_runs_shows_a_dead_run_as_interrupted(cli, crashed, tmp_path, tiny_spmm_dict, scripted_verifier):
    run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path), run_id="finished",
                 verifier=scripted_verifier(speedup=0.8))
    states = {r["run_id"]: r["state"] for r in list_runs(tmp_path)}
    assert states == {"crashed": "interrupted", "finished": "aborted"}
    out = cli("runs", "--runs-dir", tmp_path)
    assert out.exit_code == 0, out.output
    text = one_line(out)
    assert "crashed" in text and "interrupted" in text and "finished" in text
    # the file itself is left as the dead process wrote it
    assert status_of(tmp_path, "crashed")["state"] == "running"


def test_abort_ends_a_crashed_run_without_running_anything(cli, crashed, tmp_path, scripted_verifier, monkeypatch):
    called = []
    monkeypatch.setattr(nodes, "make_verifier", lambda *a, **k: called.append(a) or scripted_verifier())
    out = cli("resume", crashed, "--abort", "--runs-dir", tmp_path)
    assert out.exit_code == 0, out.output
    assert "aborted" in out.output
    assert called == []
    status = status_of(tmp_path, crashed)
    assert (status["state"], status["result"]) == ("aborted", "aborted")
    folder = tmp_path / crashed
    report = (folder / "report.md").read_text()
    assert "aborted" in report and "--abort" in report
    assert (folder / "kernel.cu").is_file(), "the one verified iteration is kept"
    saved = json.loads((folder / "result.json").read_text())
    assert saved["status"] == "aborted" and len(saved["iterations"]) == 1
    with pytest.raises(ResumeError, match="already finished with status aborted"):
        resume(crashed, runs_dir=str(tmp_path))


def test_resume_continues_a_crashed_run(crashed, tmp_path, scripted_verifier):
    with pytest.raises(ResumeError, match="not at the approval gate"):
        resume(crashed, "approve", runs_dir=str(tmp_path))
    verifier = scripted_verifier(speedup=0.8)
    result = resume(crashed, runs_dir=str(tmp_path), verifier=verifier)
    assert result.status == "awaiting_approval"
    assert result.iterations == 3 and len(verifier.calls) == 2
    assert status_of(tmp_path, crashed)["state"] == "waiting_for_approval"
    with pytest.raises(ResumeError, match="waiting at the approval gate"):
        resume(crashed, runs_dir=str(tmp_path))


def test_a_run_still_running_is_not_resumed(crashed, tmp_path):
    path = tmp_path / crashed / "status.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": os.getppid(), "process_start": None}))
    with pytest.raises(ResumeError, match="still running"):
        resume(crashed, "abort", runs_dir=str(tmp_path))


def test_kill_9_then_runs_and_abort(cli, tmp_path):
    """A real kill -9 during the second verification, in a child process."""
    marker = tmp_path / "verifying"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "slow_run_child.py"), str(marker), str(tmp_path)])
    try:
        for _ in range(1200):
            if marker.exists() or proc.poll() is not None:
                break
            import time
            time.sleep(0.05)
        assert marker.exists(), "the child never reached its second verification"
    finally:
        proc.kill()
        proc.wait()
    assert status_of(tmp_path, "killed")["state"] == "running"
    assert {r["run_id"]: r["state"] for r in list_runs(tmp_path)} == {"killed": "interrupted"}
    assert "interrupted" in cli("runs", "--runs-dir", tmp_path).output
    out = cli("resume", "killed", "--abort", "--runs-dir", tmp_path)
    assert out.exit_code == 0, out.output
    assert status_of(tmp_path, "killed")["state"] == "aborted"
    assert json.loads((tmp_path / "killed" / "result.json").read_text())["iterations"][0]["iteration"] == 1


# ---- refused inputs -------------------------------------------------------------------------------------


BAD_IDS = ["../../x", "a/b", "a\\b", "", "x" * 65, "a.b", "..", "run id", "r\n"]


@pytest.mark.parametrize("run_id", BAD_IDS)
def test_bad_run_ids_are_refused(tmp_path, tiny_spmm_dict, scripted_verifier, run_id):
    runs = tmp_path / "runs"
    verifier = scripted_verifier()
    with pytest.raises(RunOptionError, match="run_id") as err:
        run_pipeline(tiny_spmm_dict, runs_dir=str(runs), run_id=run_id, verifier=verifier)
    assert isinstance(err.value, ValueError)
    assert "letters, digits" in str(err.value)
    with pytest.raises(RunOptionError, match="run_id"):
        resume(run_id, "approve", runs_dir=str(runs))
    assert verifier.calls == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == [], "nothing written anywhere"


def test_a_bad_run_id_at_the_cli_is_one_line(cli, tmp_path):
    out = cli("resume", "../../x", "--approve", "--runs-dir", tmp_path)
    assert out.exit_code == 2
    assert out.output.count("error:") == 1 and "run_id '../../x': a run id is 1 to 64" in one_line(out)
    assert "Traceback" not in out.output


def test_a_run_id_in_use_is_refused(tmp_path, tiny_spmm_dict, scripted_verifier):
    run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path), run_id="once",
                 verifier=scripted_verifier())
    with pytest.raises(RunOptionError, match="already exists"):
        run_pipeline(tiny_spmm_dict, budget=1, on_budget="abort", runs_dir=str(tmp_path), run_id="once",
                     verifier=scripted_verifier())


@pytest.mark.parametrize("value", ["maybe", "ASK", None, ""])
def test_bad_on_budget_is_refused(tmp_path, tiny_spmm_dict, scripted_verifier, value):
    with pytest.raises(RunOptionError, match=r"on_budget .*allowed: ask, approve, abort") as err:
        run_pipeline(tiny_spmm_dict, on_budget=value, runs_dir=str(tmp_path), verifier=scripted_verifier())
    assert isinstance(err.value, ValueError)
    assert list(tmp_path.iterdir()) == []


def test_a_runs_dir_that_is_a_file(cli, tmp_path, tiny_spmm_dict, scripted_verifier, examples_dir):
    file = tmp_path / "runs"
    file.write_text("not a folder")
    with pytest.raises(RunsDirError, match="is a file, not a folder"):
        run_pipeline(tiny_spmm_dict, runs_dir=str(file), verifier=scripted_verifier())
    with pytest.raises(RunsDirError, match="is a file"):
        resume("abc", "approve", runs_dir=str(file))
    with pytest.raises(RunsDirError, match="is a file"):
        list_runs(file)
    for args in (["run", examples_dir / "small_spmm.yaml", "--compile-only"], ["resume", "abc", "--approve"], ["runs"]):
        out = cli(*args, "--runs-dir", file)
        assert out.exit_code == 2, (args, out.output)
        assert "is a file, not a folder" in one_line(out) and "Traceback" not in out.output


def test_a_runs_dir_inside_a_file(tmp_path, tiny_spmm_dict, scripted_verifier):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunsDirError, match="cannot create it"):
        run_pipeline(tiny_spmm_dict, runs_dir=str(tmp_path / "file" / "runs"), verifier=scripted_verifier())


def test_a_runs_dir_not_writable(tmp_path, tiny_spmm_dict, scripted_verifier, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    from sparseditto import artifacts

    # root may write anywhere: the permission check itself is what is tested here
    monkeypatch.setattr(artifacts.os, "access", lambda path, mode: Path(path) != runs)
    with pytest.raises(RunsDirError, match="not writable"):
        run_pipeline(tiny_spmm_dict, runs_dir=str(runs), verifier=scripted_verifier())
    assert list(runs.iterdir()) == []


def test_runs_with_no_runs(cli, tmp_path):
    out = cli("runs", "--runs-dir", tmp_path / "none")
    assert out.exit_code == 0 and "no runs in" in out.output


def test_errors_are_sparseditto_errors():
    assert issubclass(RunOptionError, SparseDittoError) and issubclass(RunsDirError, SparseDittoError)

"""The `sparseditto` command through typer's CliRunner: runs, the approval gate, doctor, and user mistakes."""

from __future__ import annotations

import pytest

from sparseditto.pipeline import run_pipeline


def test_compile_only_run_reports_what_it_did_not_run(cli, examples_dir, tmp_path):
    out = cli("run", examples_dir / "small_spmm.yaml", "--compile-only", "--runs-dir", tmp_path)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # rich wraps long lines at the test console's width
    assert "compiled_only" in text and "GPU stages not executed" in text
    assert len(list(tmp_path.glob("*/report.md"))) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["run", "missing.yaml", "--compile-only"], "missing.yaml"),
    (["run", "{spec}", "--on-budget", "sometimes"], "--on-budget: 'sometimes' is not one of ask, approve, abort"),
    (["resume", "nosuchrun", "--approve"], "no runs in"),
    (["resume", "nosuchrun", "--approve", "--abort"], "give at most one of --approve, --extend N, --abort"),
])
def test_user_mistakes_are_one_line_errors(cli, examples_dir, tmp_path, args, message):
    args = [a.replace("{spec}", str(examples_dir / "small_spmm.yaml")) for a in args]
    out = cli(*args, "--runs-dir", tmp_path)
    assert out.exit_code == 2
    assert message in " ".join(out.output.split())
    assert "Traceback" not in out.output


def test_a_run_waiting_at_the_gate_is_approved_from_the_shell(cli, tmp_path, tiny_spmm_dict, scripted_verifier):
    paused = run_pipeline(tiny_spmm_dict, budget=1, on_budget="ask", runs_dir=str(tmp_path), verifier=scripted_verifier(speedup=0.8))
    assert paused.status == "awaiting_approval"
    out = cli("resume", paused.run_id, "--approve", "--runs-dir", tmp_path)
    assert out.exit_code == 0, out.output
    assert "approved_best" in out.output
    again = cli("resume", paused.run_id, "--abort", "--runs-dir", tmp_path)
    assert again.exit_code == 2 and "already finished" in again.output


def test_doctor_says_what_the_machine_offers(cli):
    out = cli("doctor")
    assert out.exit_code == 0
    for component in ("GPU", "NVRTC", "nvdisasm", "compute-sanitizer", "ncu", "LLM endpoint"):
        assert component in out.output

"""`sparseditto eval`: the smoke suite end to end in compile-only mode, resume, one-line errors, compare."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sparseditto.cli import app
from sparseditto.evals.records import ResultLog

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _keep_logging_off_the_captured_streams():
    """The CLI points structlog at sys.stderr, which CliRunner swaps for a stream it closes afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sparseditto.cli.configure_logging", lambda verbose=False: None)
        yield


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "smoke"
    result = runner.invoke(app, ["eval", "smoke", "--compile-only", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_the_smoke_suite_runs_end_to_end_compile_only(smoke_out):
    out, output = smoke_out
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [x["spec_id"] for x in lines] == ["smoke_spmm_fp32", "smoke_spmm_fp16", "smoke_spmv_fp32"]
    assert {(x["status"], x["correctness"], x["compile_only"]) for x in lines} == {("compiled_only", "not_executed", True)}
    assert all(x["candidate"] and x["median_us"] is None and (out / "runs" / x["run_id"] / "kernel.cu").is_file() for x in lines)
    for report in ("report.md", "report.html"):
        text = (out / report).read_text()
        assert "Compile-only: 3 of 3 specs were compiled but not executed" in text
        assert "not executed" in text
    assert "smoke_spmv_fp32: compiled_only, not executed" in output


def test_rerunning_needs_resume_and_resume_runs_nothing_twice(smoke_out):
    out, _ = smoke_out
    again = runner.invoke(app, ["eval", "smoke", "--compile-only", "--out", str(out)])
    assert again.exit_code == 2
    assert again.output.startswith("error:") and "pass --resume" in " ".join(again.output.split())
    assert "Traceback" not in again.output
    resumed = runner.invoke(app, ["eval", "smoke", "--compile-only", "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming: 3 of 3 specs already have results" in resumed.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(("args", "message"), [
    (["eval", "smoke", "--policy", "llm", "--compile-only"], "the llm policy needs a model"),
    (["eval", "smoke", "--policy", "clever"], "--policy 'clever': allowed: offline, llm, hybrid"),
    (["eval", "nosuch"], "suite 'nosuch': no such suite"),
    (["eval", "smoke", "--gpus", "zero"], "--gpus 'zero': give GPU indices"),
    (["eval", "smoke", "--only", "smoke_spmv_fp32,nosuch", "--compile-only"],
     "unknown nosuch; the suite's ids: smoke_spmm_fp32, smoke_spmm_fp16, smoke_spmv_fp32"),
])
def test_user_mistakes_are_one_line_errors_and_nothing_runs(tmp_path, args, message):
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_only_runs_the_named_specs_of_a_suite(tmp_path):
    out = tmp_path / "only"
    result = runner.invoke(app, ["eval", "smoke", "--compile-only", "--out", str(out), "--only", "smoke_spmv_fp32"])
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["spec_id"] for x in (out / "results.jsonl").read_text().splitlines()] == ["smoke_spmv_fp32"]


def test_help_shows_both_command_lines():
    top = runner.invoke(app, ["eval", "--help"])
    assert top.exit_code == 0 and "run" in top.output and "compare" in top.output
    run = runner.invoke(app, ["eval", "run", "--help"])
    assert "smoke" in run.output and "standard" in run.output and "--resume" in run.output


def test_compare_prints_and_writes_markdown(tmp_path, make_record):
    ResultLog(tmp_path / "a" / "results.jsonl").append(make_record("x", speedups={"cuSPARSE": 1.0}))
    ResultLog(tmp_path / "b.jsonl").append(make_record("x", speedups={"cuSPARSE": 2.0}))
    result = runner.invoke(app, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b.jsonl"),
                                 "--markdown", str(tmp_path / "cmp.md")])
    assert result.exit_code == 0, result.output
    assert "better" in result.output
    assert "1 better, 0 worse, 0 the same." in (tmp_path / "cmp.md").read_text()
    missing = runner.invoke(app, ["eval", "compare", str(tmp_path / "nowhere"), str(tmp_path / "b.jsonl")])
    assert missing.exit_code == 2 and "no results" in " ".join(missing.output.split())

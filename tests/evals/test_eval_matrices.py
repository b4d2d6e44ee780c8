"""`sparseditto eval --matrices DIR`: a folder of the user's matrix files as a suite, run compile-only; a file that
cannot be used fails its own specs with its one-line reason, and a folder without matrices is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from typer.testing import CliRunner

from sparseditto.cli import app
from sparseditto.errors import EvalError, SpecError
from sparseditto.evals.suite import folder_suite, matrix_keys
from sparseditto.spec import parse_spec

runner = CliRunner()

BROKEN_REASON = "pattern.path: broken.mtx: not a readable Matrix Market file"


@pytest.fixture(autouse=True, scope="module")
def _keep_logging_off_the_captured_streams():
    """The CLI points structlog at sys.stderr, which CliRunner swaps for a stream it closes afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sparseditto.cli.configure_logging", lambda verbose=False: None)
        yield


def _general(path: Path) -> None:
    """40 x 40, about 10% nonzero, row 3 empty."""
    a = sp.random(40, 40, density=0.1, random_state=1, format="lil")
    a[3, :] = 0
    scipy.io.mmwrite(path, a.tocsr())


def _symmetric_pattern(path: Path) -> None:
    path.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n% lower triangle only, no values\n"
                    "5 5 6\n1 1\n2 1\n3 2\n4 4\n5 1\n5 5\n")


def _broken(path: Path) -> None:
    path.write_text("this is not a matrix\n")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A general .mtx with an empty row, a symmetric pattern-only .mtx, a rectangular .mtx, a rectangular .npz in a
    subfolder, a broken .mtx, and files that are ignored (text, a hidden folder) or skipped (a dense .mtx)."""
    root = tmp_path / "mats"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    _general(root / "general.mtx")
    _symmetric_pattern(root / "sym.mtx")
    scipy.io.mmwrite(root / "rect.mtx", sp.random(20, 60, density=0.1, random_state=4))
    sp.save_npz(root / "sub" / "scipy_m.npz", sp.random(50, 20, density=0.2, random_state=3, format="csr"))
    _broken(root / "broken.mtx")
    (root / "README.txt").write_text("matrices from the lab\n")
    scipy.io.mmwrite(root / "sub" / "general_b.mtx", np.ones((40, 1)))  # a right-hand side: dense, skipped
    _general(root / ".hidden" / "h.mtx")
    return root


def test_the_folder_suite_has_one_spec_per_file_op_dtype_and_n(folder):
    scan = folder_suite(folder, ["spmv", "spmm"], ["fp32", "fp16"], [32, 128])
    ids = [s.id for s in scan.suite.specs]
    per_file = ["spmv-fp32", "spmv-fp16", "spmm-fp32-n32", "spmm-fp32-n128", "spmm-fp16-n32", "spmm-fp16-n128"]
    assert ids == [f"{stem}-{rest}" for stem in ("broken", "general", "rect", "scipy_m", "sym") for rest in per_file]
    assert scan.suite.name == "matrices-mats"
    assert [p.name for p in scan.files] == ["broken.mtx", "general.mtx", "rect.mtx", "general_b.mtx", "scipy_m.npz", "sym.mtx"]
    assert [(p.name, why) for p, why in scan.skipped] == [("general_b.mtx", "a dense (array-format) Matrix Market file, not a sparse matrix")]
    assert [p.name for p, _ in scan.refused] == ["broken.mtx"] and scan.refused[0][1].startswith(BROKEN_REASON)

    by_id = {s.id: s for s in scan.suite.specs}
    assert by_id["sym-spmm-fp16-n128"].spec == {"name": "sym-spmm-fp16-n128", "operation": "spmm", "dtype": "fp16", "N": 128,
                                                "pattern": {"kind": "matrix_file", "path": str(folder.resolve() / "sym.mtx")}}
    assert "N" not in by_id["sym-spmv-fp32"].spec
    assert by_id["sym-spmv-fp32"].tags == ["matrix_file", "spmv", "fp32", "mtx", "pattern", "symmetric"]
    assert by_id["scipy_m-spmv-fp32"].tags == ["matrix_file", "spmv", "fp32", "npz", "rectangular"]
    assert by_id["rect-spmv-fp32"].tags == ["matrix_file", "spmv", "fp32", "mtx", "rectangular"]
    # every spec but the broken file's is a valid spec; the broken one is refused with the reason the scan gave
    for s in scan.suite.specs:
        if s.id.startswith("broken"):
            with pytest.raises(SpecError, match=BROKEN_REASON):
                parse_spec(s.spec)
        else:
            assert parse_spec(s.spec).name == s.id


def test_clashing_stems_get_their_relative_paths(tmp_path):
    files = [tmp_path / "a.mtx", tmp_path / "a.npz", tmp_path / "x" / "a.mtx", tmp_path / "odd name!.mtx.gz"]
    assert list(matrix_keys(tmp_path, files).values()) == ["a.mtx", "a.npz", "x_a.mtx", "odd_name"]


def test_an_output_folder_inside_the_matrix_folder_is_not_scanned(folder):
    out = folder / "results"
    (out / "runs").mkdir(parents=True)
    _general(out / "runs" / "copy.mtx")
    scan = folder_suite(folder, ["spmv"], ["fp32"], [32], exclude=[out])
    assert "copy" not in {s.id.split("-")[0] for s in scan.suite.specs}


def test_the_cli_runs_the_folder_and_records_the_broken_file_as_failed(tmp_path):
    mats = tmp_path / "two"
    mats.mkdir()
    _general(mats / "general.mtx")
    _symmetric_pattern(mats / "sym.mtx")
    _broken(mats / "broken.mtx")
    (mats / "notes.txt").write_text("not a matrix")
    out = tmp_path / "out"
    args = ["eval", "--matrices", str(mats), "--ops", "spmv", "--compile-only", "--budget", "1", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["spec_id"] for r in records] == ["broken-spmv-fp32", "general-spmv-fp32", "sym-spmv-fp32"]
    broken, *good = records
    assert broken["status"] == "error" and BROKEN_REASON in broken["error"] and "\n" not in broken["error"]
    assert {(r["status"], r["correctness"], r["budget"]) for r in good} == {("compiled_only", "not_executed", 1)}
    assert all((out / "runs" / r["run_id"] / "kernel.cu").is_file() for r in good)
    report = (out / "report.md").read_text()
    assert f"- broken-spmv-fp32: SpecError: {BROKEN_REASON}" in report
    flat = " ".join(result.output.split())
    assert "suite matrices-two" in flat and "3 matrix files, 3 specs" in flat
    assert f"cannot use {BROKEN_REASON}" in flat and "broken-spmv-fp32: error: SpecError" in flat
    assert "general-spmv-fp32: compiled_only, not executed" in flat
    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0 and "resuming: 3 of 3 specs already have results" in resumed.output


@pytest.mark.parametrize(("setup", "extra", "message"), [
    (lambda d: None, [], "no matrix files (.mtx, .mtx.gz, .npz) in it or its subfolders"),
    (lambda d: (d / "notes.txt").write_text("x"), [], "no matrix files"),
    (lambda d: scipy.io.mmwrite(d / "b.mtx", np.ones((3, 1))), [], "no matrix files (.mtx, .mtx.gz, .npz) in it or its "
                                                                   "subfolders (1 dense Matrix Market files skipped)"),
    (lambda d: _general(d / "m.mtx"), ["--ops", "sddmm"], "--ops 'sddmm': unknown 'sddmm'; give one or more of spmv, spmm"),
    (lambda d: _general(d / "m.mtx"), ["--dtypes", "fp64"], "--dtypes 'fp64': unknown 'fp64'; give one or more of fp32, fp16, bf16"),
    (lambda d: _general(d / "m.mtx"), ["--n", "0"], "--n '0': give positive integers"),
    (lambda d: _general(d / "m.mtx"), ["--n", "32,2000000"], "--n 2000000: N must be less than or equal to 1048576 (for spmm)"),
    (lambda d: _general(d / "m.mtx"), ["smoke"], "give a SUITE or --matrices DIR, not both"),
])
def test_folder_mistakes_are_one_error_line_with_exit_2(tmp_path, setup, extra, message):
    mats = tmp_path / "m"
    mats.mkdir()
    setup(mats)
    result = runner.invoke(app, ["eval", "--matrices", str(mats), *extra, "--compile-only", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and result.output.count("\n") == 1, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["eval", "run"], "give a SUITE or --matrices DIR"),
    (["eval", "smoke", "--ops", "spmv"], "--ops, --n and --dtypes go with --matrices DIR"),
    (["eval", "--matrices", "/no/such/folder"], "--matrices /no/such/folder: no such folder"),
])
def test_option_mistakes_are_one_error_line(tmp_path, args, message):
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and message in result.output, result.output


def test_a_matrix_file_instead_of_a_folder_is_refused(tmp_path):
    _general(tmp_path / "m.mtx")
    with pytest.raises(EvalError, match="a file, not a folder"):
        folder_suite(tmp_path / "m.mtx", ["spmv"], ["fp32"], [32])

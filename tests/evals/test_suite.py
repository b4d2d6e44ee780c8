"""Suite files: the shipped suites, includes, and one-line errors for bad suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.errors import EvalError
from sparseditto.evals.suite import SUITES_DIR, available_suites, load_suite
from sparseditto.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_shipped_suites():
    assert {"smoke", "csr_spmm", "csr_spmv", "standard"} <= set(available_suites())
    smoke = load_suite("smoke")
    assert len(smoke.specs) == 3
    assert all(s.spec["budget"]["iterations"] <= 2 for s in smoke.specs)


def test_standard_includes_the_family_suites_at_the_shapes_of_the_examples():
    standard = load_suite("standard")
    assert [(s.suite, s.id) for s in standard.specs] == [
        ("csr_spmm", "spmm_fp32_1pct"), ("csr_spmm", "spmm_fp32_5pct"), ("csr_spmm", "spmm_fp16_1pct"),
        ("csr_spmm", "spmm_fp16_5pct"), ("csr_spmv", "spmv_fp32_uniform"), ("csr_spmv", "spmv_fp32_powerlaw")]
    for s in standard.specs:
        assert s.spec == load_spec(EXAMPLES / f"{s.id}.yaml").model_dump(mode="json")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_suite_by_path_with_a_relative_include(tmp_path):
    _write(tmp_path / "one.yaml", "name: one\nspecs:\n  - id: s1\n    tags: [x]\n"
           "    spec: {operation: spmv, pattern: {nnz_per_row: 4}, M: 64, K: 64}\n")
    both = _write(tmp_path / "both.yaml", "name: both\ninclude: [one.yaml, smoke]\n")
    suite = load_suite(str(both))
    assert suite.name == "both"
    assert [s.id for s in suite.specs][0] == "s1" and len(suite.specs) == 4
    assert suite.specs[0].spec["name"] == "s1"


@pytest.mark.parametrize(("text", "message"), [
    ("name: bad\nspecs:\n  - id: s1\n    spec: {operation: spmv, pattern: {nnz_per_row: 4}, M: 64}\n",
     "suite bad, spec s1: spec: M and K are required"),
    ("name: bad\nspecs:\n  - id: s1\n    spec: {operation: sddmm, pattern: {density: 0.1}, M: 64, K: 64}\n",
     "suite bad, spec s1: sddmm: this problem family is not implemented yet"),
    ("name: bad\nspecs:\n  - {id: s1, spec: {}}\n  - {id: s1, spec: {}}\n", "spec ids must be unique; repeated: s1"),
    ("name: bad\ninclude: [bad.yaml]\n", "includes itself"),
    ("name: bad\ninclude: [nowhere]\n", "suite 'nowhere': no such suite; known suites: csr_spmm"),
    ("name: bad\nspecs: [{id: s1, spec: {}, extra: 1}]\n", "specs.0.extra: Extra inputs are not permitted"),
    ("name: [\n", "not valid YAML"),
])
def test_bad_suites_are_one_line_errors(tmp_path, text, message):
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(EvalError, match=message.replace("(", r"\(")) as err:
        load_suite(str(path))
    assert "\n" not in str(err.value)


def test_ids_repeated_across_includes_are_refused(tmp_path):
    path = _write(tmp_path / "twice.yaml", "name: twice\ninclude: [smoke, smoke.yaml]\n")
    _write(tmp_path / "smoke.yaml", (SUITES_DIR / "smoke.yaml").read_text())
    with pytest.raises(EvalError, match="spec ids repeated across its includes: smoke_spmm_fp16"):
        load_suite(str(path))

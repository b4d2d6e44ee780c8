"""report.md and report.html: the same numbers as the records, figures embedded, compile-only said plainly."""

from __future__ import annotations

import base64
import re

import pytest

from sparseditto.evals.records import SpecRecord, measured_fields
from sparseditto.evals.report import write_reports


@pytest.fixture
def records(h200_result, make_record):
    measured = SpecRecord(suite="csr_spmv", spec_id="spmv_fp32_uniform", tags=["csr", "spmv"], policy="offline",
                          budget=6, status="accepted", seconds=60.0, **measured_fields(h200_result))
    return [measured,
            make_record("broken", correctness="no_kernel", status="error", error="RuntimeError: out of memory"),
            make_record("compiled", correctness="not_executed", status="compiled_only")]


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]


def test_reports_state_the_numbers_of_the_records(tmp_path, records):
    md_path, html_path = write_reports("csr_spmv", records, tmp_path)
    md, page = md_path.read_text(), html_path.read_text()
    for text in (md, page):
        assert "Device: NVIDIA H200" in text
        assert "Compile-only: 1 of 3 specs were compiled but not executed" in text
        assert "RuntimeError: out of memory" in text
        assert "cusparse_spmv_csr_alg1_pre" in text
    row = next(line for line in md.splitlines() if line.startswith("| spmv_fp32_uniform |"))
    assert "| accepted | correct |" in row and "| 125.8 |" in row and "| 1.04x |" in row and "| 27% |" in row
    assert "| 0.3 (-) |" in row  # 267 GFLOP/s; this older run recorded no peak
    # against cuSPARSE: 1 of the 3 specs is correct and faster than p = 0 and 1, none than 1.5
    assert "| cuSPARSE | 33% | 33% | 0% | 0% | 1.04x | 3 |" in md
    assert "| correct | 1 (33%) |" in md


def test_the_html_report_is_self_contained(tmp_path, records):
    _, html_path = write_reports("csr_spmv", records, tmp_path)
    page = html_path.read_text()
    images = _images(page)
    assert len(images) == 3 and all(img.startswith(b"\x89PNG") for img in images)
    assert "<script" not in page and "src='http" not in page and 'src="http' not in page


def test_a_compile_only_report_plots_nothing_it_did_not_measure(tmp_path, make_record):
    records = [make_record(f"s{i}", correctness="not_executed", status="compiled_only") for i in range(2)]
    md_path, html_path = write_reports("smoke", records, tmp_path)
    page = html_path.read_text()
    assert len(_images(page)) == 1  # time to solution only
    assert page.count("nothing measured, nothing to plot") == 2
    assert "| not executed (compile-only) | 2 |" in md_path.read_text()
    assert "| correct | 0 (0%) |" in md_path.read_text()


def test_a_compute_bound_spec_shows_its_rate_and_share_of_the_peak(tmp_path, make_record):
    """What issue 15 asks of the report: each kernel's dense-equivalent TFLOP/s and its fraction of the 2:4 peak."""
    md_path, _ = write_reports("sparse24", [make_record("sp24_8192", speedups={"cublas": 1.36}, tflops=1018.2,
                                                        peak_fraction=0.4756)], tmp_path)
    row = next(line for line in md_path.read_text().splitlines() if line.startswith("| sp24_8192 |"))
    assert "| 1018.2 (48%) |" in row

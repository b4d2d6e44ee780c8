"""Records read from a run's result.json (a real H200 run as fixture) and the results.jsonl log."""

from __future__ import annotations

import pytest

from sparseditto.errors import EvalError
from sparseditto.evals.records import ResultLog, load_records, measured_fields


def test_measured_fields_of_a_real_h200_run(h200_result):
    f = measured_fields(h200_result)
    assert f["correctness"] == "correct"
    assert f["candidate"] == "spmv_csr_vec4(BLOCK=256, GROUP=4, HINT=1, UNROLL=2, XL=0)"
    assert f["device"] == "NVIDIA H200"
    assert (f["iterations"], f["best_iteration"]) == (3, 1)
    assert f["median_us"] == pytest.approx(125.776, abs=1e-3)
    assert f["speedups"] == {"cuSPARSE": pytest.approx(131.36 / 125.776, rel=1e-4)}
    assert f["speedup_vs_best"] == pytest.approx(f["speedups"]["cuSPARSE"])
    assert f["bandwidth_fraction"] == pytest.approx(0.2744, abs=1e-4)
    assert f["tflops"] == pytest.approx(0.26678, abs=1e-5) and f["peak_fraction"] is None  # no peak in this older run
    # the fastest of the ten cuSPARSE configurations timed, and only the first iteration's time to reach it
    assert f["baselines"]["cuSPARSE"].name == "cusparse_spmv_csr_alg1_pre"
    assert f["seconds_to_best"] == pytest.approx(18.557, abs=1e-3)


def test_a_compile_only_run_is_not_executed_and_has_no_numbers(h200_result):
    it = h200_result["iterations"][0]
    report = {**it["report"], "backend": "compile_only", "measurement": None, "baselines": [], "trials": [],
              "feedback": [{"stage": "compile", "status": "passed"},
                           {"stage": "correctness", "status": "not_executed", "message": "not executed: no CUDA device"}]}
    f = measured_fields({**h200_result, "iterations": [{**it, "report": report}], "best_iteration": 1})
    assert f["correctness"] == "not_executed"
    assert "median_us" not in f and "speedups" not in f


def test_a_run_without_a_kernel_has_only_its_iteration_count(h200_result):
    assert measured_fields({**h200_result, "best_iteration": None}) == {"iterations": 3}


def test_log_appends_one_line_per_record_and_reads_them_back(tmp_path, make_record):
    log = ResultLog(tmp_path / "out" / "results.jsonl")
    assert log.read() == []
    log.append(make_record("a"))
    log.append(make_record("b", correctness="incorrect"))
    assert [r.spec_id for r in load_records(tmp_path / "out")] == ["a", "b"]
    assert len(log.path.read_text().splitlines()) == 2


def test_a_torn_last_line_is_skipped_but_a_torn_middle_line_is_an_error(tmp_path, make_record):
    path = tmp_path / "results.jsonl"
    good = make_record("a").model_dump_json()
    path.write_text(good + "\n" + good[:40])
    assert [r.spec_id for r in load_records(path)] == ["a"]
    path.write_text(good[:40] + "\n" + good + "\n")
    with pytest.raises(EvalError, match=r"results.jsonl:1: not a result record"):
        load_records(path)


def test_missing_results_are_a_one_line_error(tmp_path):
    with pytest.raises(EvalError, match="no results"):
        load_records(tmp_path)


def test_a_kernel_that_failed_its_checks_is_incorrect(h200_result):
    it = h200_result["iterations"][0]
    report = {**it["report"], "feedback": [{"stage": "compile", "status": "passed"},
                                           {"stage": "launch", "status": "failed", "message": "illegal address"}]}
    f = measured_fields({**h200_result, "iterations": [{**it, "report": report}], "best_iteration": 1})
    assert f["correctness"] == "incorrect"
    assert "median_us" not in f


def test_the_share_of_the_peak_is_the_achieved_rate_over_the_devices_peak(h200_result):
    best = next(it for it in h200_result["iterations"] if it["iteration"] == h200_result["best_iteration"])
    report = {**best["report"], "measurement": {**best["report"]["measurement"], "peak_gflops": 535265.28}}
    iterations = [{**it, "report": report} if it is best else it for it in h200_result["iterations"]]
    f = measured_fields({**h200_result, "iterations": iterations})
    assert f["peak_fraction"] == pytest.approx(266.779289 / 535265.28)

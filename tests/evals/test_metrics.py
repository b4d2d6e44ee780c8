"""Suite metrics on a fixed set of five records whose answers were worked out by hand."""

from __future__ import annotations

import math

import pytest

from sparseditto.evals.metrics import FASTEST, counted_against, fast_p, geomean_speedup, libraries, summarize


@pytest.fixture
def records(make_record):
    return [
        make_record("a", speedups={"cuSPARSE": 1.2, "cuBLAS": 3.0}, tokens={"total": 100}, best_iteration=1, seconds_to_best=3.0),
        make_record("b", speedups={"cuSPARSE": 0.5, "cuBLAS": 1.6}, tokens={"total": 50}, best_iteration=1),
        make_record("c", speedups={"cuSPARSE": 2.5}),  # an SpMV: no dense cuBLAS at this size
        make_record("d", correctness="incorrect"),
        make_record("e", correctness="no_kernel", status="error", error="RuntimeError: boom"),
    ]


def test_fast_p_counts_failed_specs_in_the_denominator(records):
    assert [fast_p(records, "cuSPARSE", p) for p in (0, 1, 1.5, 2)] == [3 / 5, 2 / 5, 1 / 5, 1 / 5]


def test_fast_p_leaves_out_correct_specs_the_library_was_not_timed_for(records):
    assert [r.spec_id for r in counted_against(records, "cuBLAS")] == ["a", "b", "d", "e"]
    assert [fast_p(records, "cuBLAS", p) for p in (0, 1, 1.5, 2)] == [2 / 4, 2 / 4, 2 / 4, 1 / 4]


def test_fast_p_against_the_fastest_baseline_uses_each_specs_slowest_library_ratio(records):
    # the fixture's speedup_vs_best is the smaller ratio: 1.2, 0.5, 2.5
    assert [fast_p(records, FASTEST, p) for p in (0, 1, 2)] == [3 / 5, 2 / 5, 1 / 5]


def test_fast_p_is_strictly_faster(make_record):
    assert fast_p([make_record("x", speedups={"cuSPARSE": 1.0})], "cuSPARSE", 1.0) == 0.0


def test_geomean_over_correct_specs_only(records):
    assert geomean_speedup(records, "cuSPARSE") == pytest.approx((1.2 * 0.5 * 2.5) ** (1 / 3))
    assert geomean_speedup(records, "cuBLAS") == pytest.approx(math.sqrt(3.0 * 1.6))
    assert geomean_speedup(records[3:], "cuSPARSE") is None


def test_compile_only_records_never_count_as_correct(make_record):
    compiled = [make_record(f"s{i}", correctness="not_executed", status="compiled_only") for i in range(3)]
    s = summarize(compiled)
    assert (s.correct, s.not_executed, s.correctness_rate) == (0, 3, 0.0)
    assert s.fast_p[FASTEST][0.0] == 0.0


def test_summary(records):
    s = summarize(records)
    assert libraries(records) == ["cuBLAS", "cuSPARSE", FASTEST]
    assert (s.specs, s.correct, s.incorrect, s.not_executed, s.errors) == (5, 3, 1, 0, 1)
    assert s.correctness_rate == pytest.approx(0.6)
    assert s.counted == {"cuBLAS": 4, "cuSPARSE": 5, FASTEST: 5}
    assert s.mean_bandwidth_fraction == pytest.approx(0.2)
    # over the correct specs only: iterations 1, 1, 2 and seconds 3, 6, 6
    assert (s.median_iterations_to_best, s.median_seconds_to_best) == (1, 6.0)
    assert s.total_seconds == pytest.approx(50.0)
    assert s.tokens == {"total": 150}

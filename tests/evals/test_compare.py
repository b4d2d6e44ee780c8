"""Two fixed result sets compared: correctness first, then the speedup against the fastest baseline."""

from __future__ import annotations

from sparseditto.evals.compare import changes_table, compare_markdown, compare_records, totals_table


def test_compare(make_record):
    a = [make_record("faster", speedups={"cuSPARSE": 1.0}), make_record("slower", speedups={"cuSPARSE": 2.0}),
         make_record("noise", speedups={"cuSPARSE": 1.0}), make_record("fixed", correctness="incorrect"),
         make_record("broke", speedups={"cuSPARSE": 1.5}), make_record("gone", speedups={"cuSPARSE": 1.0})]
    b = [make_record("faster", speedups={"cuSPARSE": 1.5}), make_record("slower", speedups={"cuSPARSE": 1.0}),
         make_record("noise", speedups={"cuSPARSE": 1.02}), make_record("fixed", speedups={"cuSPARSE": 0.5}),
         make_record("broke", correctness="no_kernel", status="error"), make_record("new", speedups={"cuSPARSE": 3.0})]
    changes = compare_records(a, b)
    assert [(c.spec_id, c.verdict) for c in changes] == [
        ("faster", "better"), ("slower", "worse"), ("noise", "same"), ("fixed", "better"), ("broke", "worse"),
        ("gone", "only in A"), ("new", "only in B")]
    assert changes[0].why == "speedup vs the fastest baseline x1.50"
    assert changes[4].why == "no longer correct (no kernel, status error)"

    totals = totals_table(a, b)
    assert totals.rows[1] == ["correct", "5", "5"]
    # fast_1 against the fastest baseline: A 2 of 6 (slower 2.0, broke 1.5), B 3 of 6 (faster 1.5, noise 1.02, new 3.0)
    assert totals.rows[2] == ["fast_1 vs the fastest baseline", "33%", "50%"]
    md = compare_markdown("a", "b", changes, totals)
    assert "2 better, 2 worse, 1 the same." in md
    assert "| slower | 100.0 us, 2.00x | 100.0 us, 1.00x | worse | speedup vs the fastest baseline x0.50 |" in md
    assert len(changes_table(changes).rows) == 7


def test_kernel_time_decides_when_no_baseline_was_timed(make_record):
    a = [make_record("x", median_us=100.0)]
    b = [make_record("x", median_us=50.0)]
    assert compare_records(a, b)[0].why == "kernel time x2.00"

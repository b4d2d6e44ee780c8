"""One-parameter steps in the experience store: which pairs a run records, and the ratios a later plan reads."""

from __future__ import annotations

import pytest

from sparseditto.agents.schemas import Choice, step_key
from sparseditto.knowledge_base.experience import ExperienceStore, record_steps

MERGE = "spmv_merge_path"


def iteration(n, params, report, kernel=MERGE, backend="gpu"):
    return {"iteration": n, "choice": Choice(kernel=kernel, params=params).model_dump(), "backend": backend,
            "report": report.model_dump(mode="json")}


@pytest.fixture
def store(tmp_path):
    return ExperienceStore(tmp_path / "experience.sqlite")


def test_pairs_one_parameter_apart_are_recorded_both_ways(store, tiny_spmv, measured_report, wrong_report):
    base = {"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": 0}
    iterations = [
        iteration(1, base, measured_report("a", median_us=100.0)),
        iteration(2, {**base, "ITEMS": 16}, measured_report("b", median_us=80.0)),
        iteration(3, {**base, "BLOCK": 512}, measured_report("c", median_us=103.0)),
        # two parameters apart from the first: no step
        iteration(4, {**base, "BLOCK": 128, "ITEMS": 4}, measured_report("d", median_us=90.0)),
        # wrong: never a step, whatever its time
        iteration(5, {**base, "EARLY": 1}, wrong_report("e")),
        # another kernel with the same parameters: not a step of merge path
        iteration(6, base, measured_report("f", median_us=50.0), kernel="spmv_csr_vec4"),
    ]
    assert record_steps(store, tiny_spmv, iterations, "r1") == 2
    ratios = store.step_ratios("csr_spmv", tiny_spmv.dtype, "Test GPU")
    assert ratios[step_key(MERGE, "ITEMS", 8, 16)] == pytest.approx(0.8)
    assert ratios[step_key(MERGE, "ITEMS", 16, 8)] == pytest.approx(1.25)
    assert ratios[step_key(MERGE, "BLOCK", 256, 512)] == pytest.approx(1.03)
    assert ratios[step_key(MERGE, "BLOCK", 512, 256)] == pytest.approx(1 / 1.03)
    assert len(ratios) == 4
    # another GPU or dtype reads nothing
    assert store.step_ratios("csr_spmv", tiny_spmv.dtype, "Other GPU") == {}
    assert store.step_ratios("csr_spmv", "fp16" if tiny_spmv.dtype != "fp16" else "fp32", "Test GPU") == {}


def test_a_step_is_worth_the_best_it_has_done(store, tiny_spmv, measured_report):
    base = {"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": 0}
    for run, after in (("r1", 110.0), ("r2", 90.0), ("r3", 120.0)):
        iterations = [iteration(1, base, measured_report("a", median_us=100.0)),
                      iteration(2, {**base, "ITEMS": 4}, measured_report("b", median_us=after))]
        record_steps(store, tiny_spmv, iterations, run)
    ratios = store.step_ratios("csr_spmv", tiny_spmv.dtype, "Test GPU")
    assert ratios[step_key(MERGE, "ITEMS", 8, 4)] == pytest.approx(0.9)
    assert ratios[step_key(MERGE, "ITEMS", 4, 8)] == pytest.approx(100.0 / 120.0)


def test_compile_only_runs_record_nothing(store, tiny_spmv, measured_report):
    base = {"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": 0}
    iterations = [iteration(1, base, measured_report("a"), backend="compile_only"),
                  iteration(2, {**base, "ITEMS": 4}, measured_report("b"), backend="compile_only")]
    assert record_steps(store, tiny_spmv, iterations, "r1") == 0
    assert store.step_ratios("csr_spmv", tiny_spmv.dtype, "Test GPU") == {}

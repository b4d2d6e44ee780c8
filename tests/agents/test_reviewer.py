"""The reviewer's offline coordinate search over fake iteration records."""

from __future__ import annotations

import pytest

from sparseditto.agents.reviewer import best_iteration, offline_review
from sparseditto.agents.schemas import Acceptance, Plan, Strategy, step_key
from sparseditto.tools.results import NOT_EXECUTED_NO_GPU, Feedback, VerificationReport

ROWSPLIT = "spmm_csr_rowsplit"
TILE = "spmm_csr_smem_tile"
ROW_START = {"VW": 4, "LANES": 32, "WARPS": 4, "UNROLL": 8}
TILE_START = {"LPR": 8, "WARPS": 16, "RPG": 2, "KC": 1024, "UNROLL": 4}


def make_plan(row_space=None, target=3.0):
    return Plan(
        family="csr_spmm", format="csr", features={}, baselines=["cusparse"], symbols={"N": 128},
        acceptance=Acceptance(min_speedup=1.0, target_speedup=target),
        strategies=[
            Strategy(kernel=ROWSPLIT, start=ROW_START, why="",
                     space=row_space or {"VW": [2, 4], "LANES": [32], "WARPS": [4, 8], "UNROLL": [8]}),
            Strategy(kernel=TILE, start=TILE_START, why="", space={k: [v] for k, v in TILE_START.items()}),
        ],
    )


class Records:
    """Builds iteration records the way the tool node stores them."""

    def __init__(self, measured_report, wrong_report):
        self.measured, self.wrong = measured_report, wrong_report
        self.items: list[dict] = []

    def add(self, kernel, params, report, backend="gpu"):
        self.items.append({"iteration": len(self.items) + 1, "choice": {"kernel": kernel, "params": dict(params)},
                           "candidate": f"{kernel}{sorted(params.items())}", "backend": backend,
                           "report": report.model_dump(mode="json")})
        return self

    def timed(self, kernel, params, us, speedup):
        return self.add(kernel, params, self.measured(kernel, median_us=us, speedup=speedup))

    def failed(self, kernel, params):
        return self.add(kernel, params, self.wrong(kernel))

    def compiled(self, kernel, params):
        report = VerificationReport(candidate=kernel, backend="compile_only", compiled=True, feedback=[
            Feedback(stage="compile", status="passed"),
            *(Feedback(stage=s, status="not_executed", message=NOT_EXECUTED_NO_GPU) for s in ("correctness", "sanitizer", "benchmark"))])
        return self.add(kernel, params, report, backend="compile_only")


@pytest.fixture
def records(measured_report, wrong_report):
    return Records(measured_report, wrong_report)


def tried(recs):
    return [(it["choice"]["kernel"], it["choice"]["params"]) for it in recs.items]


def review(plan, recs, dtype="fp32", budget_left=True):
    return offline_review(plan, recs.items, dtype, recs.items[-1]["backend"], budget_left=budget_left)


def test_proposes_an_untried_neighbour(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    verdict = review(make_plan(), records)
    assert verdict.decision == "revise"
    nxt = verdict.next
    assert nxt.kernel == ROWSPLIT
    changed = {k for k in ROW_START if nxt.params[k] != ROW_START[k]}
    assert len(changed) == 1
    assert (nxt.kernel, nxt.params) not in tried(records)
    name = changed.pop()
    assert f"{name}={nxt.params[name]}" in verdict.direction
    assert verdict.best_iteration == 1


def test_the_search_moves_to_the_best_candidate(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    records.timed(ROWSPLIT, {**ROW_START, "VW": 2}, 80.0, 1.5)
    verdict = review(make_plan(), records)
    assert verdict.decision == "revise"
    assert verdict.best_iteration == 2
    assert verdict.next.params == {"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 8}


def test_steps_that_paid_before_come_first_then_untried_ones_then_those_that_did_not(records):
    """Without a record the search keeps the declared order (VW before WARPS); earlier runs' measured steps reorder it."""
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    assert review(make_plan(), records).next.params == {**ROW_START, "VW": 2}
    paid = make_plan().model_copy(update={"step_ratios": {step_key(ROWSPLIT, "WARPS", 4, 8): 0.9,
                                                          step_key(ROWSPLIT, "VW", 4, 2): 0.95}})
    assert review(paid, records).next.params == {**ROW_START, "WARPS": 8}
    # VW's step never beat 2% faster: the untried WARPS step goes first
    not_paid = make_plan().model_copy(update={"step_ratios": {step_key(ROWSPLIT, "VW", 4, 2): 1.01}})
    assert review(not_paid, records).next.params == {**ROW_START, "WARPS": 8}
    # a step recorded in the other direction only says nothing of this one
    other_way = make_plan().model_copy(update={"step_ratios": {step_key(ROWSPLIT, "VW", 2, 4): 1.2}})
    assert review(other_way, records).next.params == {**ROW_START, "VW": 2}


def test_neighbours_invalid_for_the_dtype_are_skipped(records):
    plan = make_plan(row_space={"VW": [4, 8], "LANES": [32], "WARPS": [4], "UNROLL": [8]})
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    fp32 = review(plan, records, dtype="fp32")  # VW=8 is a 32-byte load in fp32
    assert fp32.next.kernel == TILE
    fp16 = review(plan, records, dtype="fp16")
    assert fp16.next.kernel == ROWSPLIT and fp16.next.params["VW"] == 8


def test_switches_strategy_when_the_neighbours_are_exhausted(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    records.timed(ROWSPLIT, {**ROW_START, "VW": 2}, 120.0, 1.0)
    records.timed(ROWSPLIT, {**ROW_START, "WARPS": 8}, 110.0, 1.1)
    verdict = review(make_plan(), records)
    assert verdict.decision == "revise"
    assert verdict.next.kernel == TILE
    assert verdict.next.params == TILE_START
    assert verdict.direction == f"switch strategy to {TILE}"


def test_a_wrong_candidate_is_not_a_search_centre(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.2)
    records.failed(ROWSPLIT, {**ROW_START, "VW": 2})
    verdict = review(make_plan(), records)
    assert verdict.decision == "revise"
    assert "wrong_result" in verdict.diagnosis
    assert verdict.best_iteration == 1
    assert verdict.next.params == {**ROW_START, "WARPS": 8}


def test_accepts_at_the_target_speedup(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 3.0)
    verdict = review(make_plan(target=3.0), records)
    assert verdict.decision == "accept"
    assert verdict.best_iteration == 1
    assert verdict.next is None


def test_the_target_counts_the_best_not_the_last(records):
    records.timed(ROWSPLIT, ROW_START, 30.0, 3.5)
    records.timed(ROWSPLIT, {**ROW_START, "VW": 2}, 90.0, 1.1)
    verdict = review(make_plan(target=3.0), records)
    assert verdict.decision == "accept"
    assert verdict.best_iteration == 1


def exhaust(records, speedup):
    records.timed(ROWSPLIT, ROW_START, 100.0, speedup)
    records.timed(ROWSPLIT, {**ROW_START, "VW": 2}, 120.0, speedup * 0.8)
    records.timed(ROWSPLIT, {**ROW_START, "WARPS": 8}, 110.0, speedup * 0.9)
    records.timed(TILE, TILE_START, 130.0, speedup * 0.7)
    return records


def test_accepts_an_exhausted_search_whose_best_beats_the_baselines(records):
    verdict = review(make_plan(), exhaust(records, 1.3))
    assert verdict.decision == "accept"
    assert verdict.best_iteration == 1
    assert "exhausted" in verdict.diagnosis


def test_gives_up_an_exhausted_search_whose_best_is_slower(records):
    verdict = review(make_plan(), exhaust(records, 0.9))
    assert verdict.decision == "give_up"
    assert verdict.best_iteration == 1


def test_gives_up_when_every_strategy_is_wrong(records):
    records.failed(ROWSPLIT, ROW_START)
    first = review(make_plan(), records)
    assert first.decision == "revise" and first.next.kernel == TILE
    records.failed(TILE, TILE_START)
    verdict = review(make_plan(), records)
    assert verdict.decision == "give_up"
    assert verdict.best_iteration is None


def test_last_verdict_of_the_budget_accepts_only_a_kernel_faster_than_the_baselines(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.4)
    assert review(make_plan(), records, budget_left=False).decision == "accept"
    slower = Records(records.measured, records.wrong).timed(ROWSPLIT, ROW_START, 100.0, 0.7)
    verdict = review(make_plan(), slower, budget_left=False)
    assert verdict.decision == "revise"  # the graph then routes to the gate


def test_compile_only_compiles_each_strategy_start_once(records):
    plan = make_plan()
    records.compiled(ROWSPLIT, ROW_START)
    first = review(plan, records)
    assert first.decision == "revise"
    assert (first.next.kernel, first.next.params) == (TILE, TILE_START)
    records.compiled(TILE, TILE_START)
    done = review(plan, records)
    assert done.decision == "compiled_only"
    assert done.next is None
    assert done.best_iteration == 1


def test_compile_only_ends_compiled_when_the_budget_runs_out_before_every_strategy(records):
    records.compiled(ROWSPLIT, ROW_START)
    last = review(make_plan(), records, budget_left=False)
    assert last.decision == "compiled_only" and last.best_iteration == 1


def test_best_iteration_prefers_the_fastest_correct_one(records):
    records.timed(ROWSPLIT, ROW_START, 100.0, 1.0)
    records.failed(ROWSPLIT, {**ROW_START, "VW": 2})
    records.timed(ROWSPLIT, {**ROW_START, "WARPS": 8}, 60.0, 1.6)
    assert best_iteration(records.items)["iteration"] == 3
    assert best_iteration(records.items[1:2]) is None
    assert best_iteration([]) is None

"""The retriever agent: experience refines the plan, passages fit the budget and match the plan."""

from __future__ import annotations

import pytest

from sparseditto.agents.planner import offline_plan
from sparseditto.agents.retriever import PLAUSIBLE_FACTOR, plan_query, references_markdown, retrieve
from sparseditto.agents.schemas import Choice
from sparseditto.knowledge_base.experience import ExperienceStore
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family

GPU = {"name": "NVIDIA H200", "arch": "sm_90"}


@pytest.fixture(autouse=True)
def kb_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kb-cache"))


@pytest.fixture
def store(tmp_path):
    return ExperienceStore(tmp_path / "experience.sqlite")


def stored(store, spec, params, gpu=GPU, checks=None):
    store.record(spec, Choice(kernel="spmm_csr_rowsplit", params=params), "// src",
                 {"median_us": 20.0, "speedup_vs_best": 1.1, "best_baseline": "cusparse"}, gpu, "run0", checks)


def test_empty_store_gives_library_references_and_passages(tiny_spmm, store):
    plan = offline_plan(tiny_spmm)
    refined, refs = retrieve(plan, tiny_spmm, GPU, store, context_chars=4000)
    assert refined == plan
    assert [r.kernel for r in refs.kernels] == [s.kernel for s in plan.strategies]
    assert all(r.origin == "library" for r in refs.kernels)
    assert refs.passages and sum(len(p.text) for p in refs.passages) <= 4000
    scores = [p.score for p in refs.passages]
    assert scores == sorted(scores, reverse=True)
    # the family filter keeps 2:4 and SpMV material out of a CSR SpMM run
    assert not any(p.id.startswith(("sparse_mma_2_4", "cusparselt", "spmv_algorithms", "kernel:spmv")) for p in refs.passages)
    assert any(p.id.startswith("spmm_algorithms") or p.id.startswith("kernel:spmm") for p in refs.passages[:3])


def test_context_budget_limits_the_passages(tiny_spmm, store):
    plan = offline_plan(tiny_spmm)
    small = retrieve(plan, tiny_spmm, None, store, context_chars=1500)[1].passages
    large = retrieve(plan, tiny_spmm, None, store, context_chars=20000)[1].passages
    assert sum(len(p.text) for p in small) <= 1500 < sum(len(p.text) for p in large)


def test_exact_entry_sets_reuse_and_comes_first(tiny_spmm, store):
    stored(store, tiny_spmm, {"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4})
    plan, refs = retrieve(offline_plan(tiny_spmm), tiny_spmm, GPU, store, 4000)
    assert plan.reuse == Choice(kernel="spmm_csr_rowsplit", params={"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4})
    assert refs.kernels[0].origin == "experience" and "same problem, same GPU" in refs.kernels[0].summary
    assert retrieve(offline_plan(tiny_spmm), tiny_spmm, None, store, 4000)[0].reuse is None, "no GPU, no reuse"


@pytest.mark.parametrize(("checks", "skips"), [({"sanitizer": "passed", "profile": "passed"}, True),
                                               ({"sanitizer": "not_executed", "profile": "not_executed"}, False),
                                               (None, False)])
def test_only_checks_the_stored_kernel_passed_are_skipped_on_reuse(tiny_spmm, store, checks, skips):
    stored(store, tiny_spmm, {"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4}, checks=checks)
    plan = retrieve(offline_plan(tiny_spmm), tiny_spmm, GPU, store, 4000)[0]
    assert plan.reuse is not None
    assert (plan.reuse_checked is not None) == skips
    if skips:
        assert "run0" in plan.reuse_checked and "compute-sanitizer" in plan.reuse_checked


def test_similar_entry_sets_the_start_point(tiny_spmm_dict, store):
    stored(store, parse_spec({**tiny_spmm_dict, "M": 512}), {"VW": 4, "LANES": 16, "WARPS": 8, "UNROLL": 4})
    spec = parse_spec(tiny_spmm_dict)
    plan, refs = retrieve(offline_plan(spec), spec, GPU, store, 4000)
    assert plan.reuse is None
    assert plan.strategies[0].start == {"VW": 4, "LANES": 16, "WARPS": 8, "UNROLL": 4}
    assert refs.kernels[0].origin == "experience" and refs.kernels[0].params == {"VW": 4, "LANES": 16, "WARPS": 8, "UNROLL": 4}


def test_a_similar_entry_at_another_n_starts_from_this_ns_lane_layout(tiny_spmm_dict, store):
    """The lanes are chosen from N: a neighbour's 8 lanes at N = 32 carried to N = 128 went first and lost (session 20:
    714 us against 625 at 32 lanes); its other parameters carry, and the reference shows what was accepted."""
    stored(store, parse_spec({**tiny_spmm_dict, "N": 32}), {"VW": 4, "LANES": 8, "WARPS": 8, "UNROLL": 4})
    spec = parse_spec({**tiny_spmm_dict, "N": 128})
    plain = offline_plan(spec)
    lanes = next(s for s in plain.strategies if s.kernel == "spmm_csr_rowsplit").start["LANES"]
    assert lanes == 32
    plan, refs = retrieve(plain, spec, GPU, store, 4000)
    first = plan.strategies[0]
    assert first.kernel == "spmm_csr_rowsplit" and first.start == {"VW": 4, "LANES": 32, "WARPS": 8, "UNROLL": 4}
    assert "with this shape's LANES=32" in first.why
    assert refs.kernels[0].params == {"VW": 4, "LANES": 8, "WARPS": 8, "UNROLL": 4}


def test_stored_parameters_outside_the_search_space_are_not_used(tiny_spmm_dict, store):
    # VW=8 is not valid for fp32 (32-byte vectors): the planner's space excludes it
    stored(store, parse_spec({**tiny_spmm_dict, "N": 128}), {"VW": 8, "LANES": 32, "WARPS": 8, "UNROLL": 4})
    spec = parse_spec(tiny_spmm_dict)
    plan, refs = retrieve(offline_plan(spec), spec, GPU, store, 4000)
    assert plan == offline_plan(spec)
    assert all(r.origin == "library" for r in refs.kernels)


def test_plan_query_and_report_section(tiny_spmv, store):
    plan = offline_plan(tiny_spmv)
    query = plan_query(plan, tiny_spmv)
    assert "spmv_csr_vec4" in query and "spmv" in query and "fp32" in query
    _, refs = retrieve(plan, tiny_spmv, None, store, 3000)
    lines = references_markdown(refs.model_dump())
    assert lines[0] == "## Retrieved"
    assert any("spmv_csr_vec4" in line and "| library |" in line for line in lines)
    assert any(line.startswith(f"| {refs.passages[0].id} |") and f"{refs.passages[0].score:.2f}" in line for line in lines)


def test_a_similar_entry_the_cost_model_prices_far_off_does_not_go_first(store):
    """In a suite of unrelated matrices the nearest stored entry may be a kernel that fits this one badly: it goes first
    only when the cost model prices it within PLAUSIBLE_FACTOR of its fastest start."""
    skewed = {"name": "skewed", "operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 8},
              "M": 20000, "K": 20000, "dtype": "fp32"}
    spec = parse_spec(skewed)
    plan = offline_plan(spec)
    prices = {s.kernel: s.predicted_us for s in plan.strategies}
    far = next(s for s in plan.strategies if s.predicted_us > PLAUSIBLE_FACTOR * min(prices.values()))
    store.record(parse_spec({**skewed, "M": 40000}), Choice(kernel=far.kernel, params=far.start), "// src",
                 {"median_us": 20.0, "speedup_vs_best": 1.1, "best_baseline": "cusparse"}, GPU, "run0")
    refined, refs = retrieve(plan, spec, GPU, store, 4000)
    assert refined.strategies[0].kernel == plan.strategies[0].kernel != far.kernel
    assert all(r.origin == "library" for r in refs.kernels)
    # the same entry for a kernel priced near the fastest goes first
    near = plan.strategies[0]
    store.record(parse_spec({**skewed, "M": 30000}), Choice(kernel=near.kernel, params=near.start), "// src",
                 {"median_us": 20.0, "speedup_vs_best": 1.1, "best_baseline": "cusparse"}, GPU, "run1")
    assert retrieve(plan, spec, GPU, store, 4000)[1].kernels[0].origin == "experience"


def test_a_similar_entry_goes_first_only_if_its_own_parameters_are_priced_near_the_fastest(store):
    """The kernel the model prices fastest, stored at parameters that fit this matrix badly (session 11: the previous
    matrix's GROUP 8 on rows of three nonzeros, 4.3x slower), does not go first; at parameters priced near the
    fastest it does."""
    rows_of_four = {"name": "short_rows", "operation": "spmv", "pattern": {"distribution": "uniform", "nnz_per_row": 4},
                    "M": 200000, "K": 200000, "dtype": "fp32"}
    spec = parse_spec(rows_of_four)
    plan = offline_plan(spec)
    family = get_family(plan.family)
    fastest = min(s.calibrated_us for s in plan.strategies)
    grouped = next(s for s in plan.strategies if "GROUP" in s.start)
    price = {g: family.predicted_us(spec, plan.features, grouped.kernel, {**grouped.start, "GROUP": g})
             for g in grouped.space["GROUP"]}
    wide = max(price, key=price.get)
    assert price[wide] > PLAUSIBLE_FACTOR * fastest
    store.record(parse_spec({**rows_of_four, "M": 300000}), Choice(kernel=grouped.kernel, params={**grouped.start, "GROUP": wide}),
                 "// src", {"median_us": 20.0, "speedup_vs_best": 1.1, "best_baseline": "cusparse"}, GPU, "run0")
    refined, refs = retrieve(plan, spec, GPU, store, 4000)
    assert refined.strategies[0].start == plan.strategies[0].start
    assert all(r.origin == "library" for r in refs.kernels)
    best = plan.strategies[0]
    store.record(parse_spec({**rows_of_four, "M": 250000}), Choice(kernel=best.kernel, params=best.start), "// src",
                 {"median_us": 20.0, "speedup_vs_best": 1.1, "best_baseline": "cusparse"}, GPU, "run1")
    assert retrieve(plan, spec, GPU, store, 4000)[1].kernels[0].origin == "experience"


def test_the_plan_carries_the_steps_measured_on_this_gpu_and_dtype(tiny_spmv, store):
    plan = offline_plan(tiny_spmv)
    assert retrieve(plan, tiny_spmv, GPU, store, 4000)[0].step_ratios == {}
    store.record_steps("csr_spmv", tiny_spmv.dtype, GPU["name"], [("spmv_merge_path", "ITEMS", 8, 16, 0.8)], "run0")
    store.record_steps("csr_spmv", tiny_spmv.dtype, "Other GPU", [("spmv_merge_path", "BLOCK", 256, 512, 0.5)], "run0")
    refined = retrieve(plan, tiny_spmv, GPU, store, 4000)[0]
    assert refined.step_ratios == {"spmv_merge_path:ITEMS:8->16": pytest.approx(0.8),
                                   "spmv_merge_path:ITEMS:16->8": pytest.approx(1.25)}
    assert retrieve(plan, tiny_spmv, None, store, 4000)[0].step_ratios == {}

"""The LLM planner: the prompt carries spec, features and vocabulary; answers become the offline `Plan`."""

from __future__ import annotations

from llm.scripted import ScriptedChatModel, answer

from sparseditto.agents.llm_planner import llm_plan
from sparseditto.agents.planner import spec_features
from sparseditto.agents.policies import LLM, plan_step
from sparseditto.settings import Settings

GOOD = {"strategies": [{"kernel": "spmm_csr_smem_tile", "start": {"LPR": 8, "WARPS": 8, "RPG": 4, "KC": 512, "UNROLL": 4},
                        "space": {"WARPS": [8, 16]}, "why": "dense enough for shared-memory tiles"},
                       {"kernel": "spmm_csr_rowsplit", "start": {"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8}, "why": "robust"}],
        "target_speedup": 1.8, "notes": "tiles first"}


def settings(**kw) -> Settings:
    return Settings(llm_model="scripted", **kw)


def test_a_valid_answer_becomes_the_plan(tiny_spmm):
    model = ScriptedChatModel(script=[answer(GOOD, prompt=300, completion=80)])
    result = llm_plan(model, tiny_spmm, spec_features(tiny_spmm), settings())
    plan = result.value
    assert [s.kernel for s in plan.strategies] == ["spmm_csr_smem_tile", "spmm_csr_rowsplit"]
    assert plan.strategies[0].space["WARPS"] == [8, 16]
    assert plan.strategies[0].space["KC"]  # parameters the model left out search every allowed value
    assert plan.acceptance.target_speedup == 1.8 and plan.acceptance.min_speedup == 1.0
    assert plan.features == spec_features(tiny_spmm)
    assert plan.baselines == ["cusparse", "torch_sparse", "cublas"]  # the spec names none: every registered library
    assert result.usage.total == 380 and len(result.attempts) == 1
    sent = model.text_of(0)
    for expected in ("spmm_csr_rowsplit", "spmm_csr_smem_tile", "row_mean", "density", "tiny_spmm"):
        assert expected in sent


def test_an_unknown_kernel_is_sent_back_and_repaired(tiny_spmm):
    bad = {**GOOD, "strategies": [{**GOOD["strategies"][0], "kernel": "spmm_magic"}]}
    model = ScriptedChatModel(script=[answer(bad), answer(GOOD)])
    result = llm_plan(model, tiny_spmm, spec_features(tiny_spmm), settings())
    assert result.value is not None and len(result.attempts) == 2
    assert "spmm_magic" in result.attempts[0].error and "not in the strategy vocabulary" in result.attempts[0].error
    repair = model.text_of(1)
    assert "rejected" in repair and "spmm_magic" in repair


def test_out_of_range_and_dtype_invalid_values_are_rejected(tiny_spmm):
    wide = {**GOOD, "strategies": [{"kernel": "spmm_csr_rowsplit", "start": {"VW": 8, "LANES": 32, "WARPS": 4, "UNROLL": 8}, "why": "x"}]}
    odd = {**GOOD, "strategies": [{"kernel": "spmm_csr_rowsplit", "start": {"VW": 4, "LANES": 32, "WARPS": 3, "UNROLL": 8}, "why": "x"}]}
    model = ScriptedChatModel(script=[answer(wide), answer(odd), answer("not json {")])
    result = llm_plan(model, tiny_spmm, spec_features(tiny_spmm), settings(llm_repair_attempts=2))
    assert result.value is None
    errors = [a.error for a in result.attempts]
    assert "breaks the constraint VW * value_bytes <= 16" in errors[0]
    assert "WARPS=3 is not one of" in errors[1]
    assert "not a JSON object" in errors[2]


def test_after_failed_repairs_the_offline_planner_plans_and_the_trace_says_so(tiny_spmm):
    model = ScriptedChatModel(script=[answer({"strategies": []})] * 2)
    plan, step = plan_step(tiny_spmm, "llm", LLM(settings(llm_repair_attempts=1), lambda role: model))
    assert plan.notes == "offline expert policy"
    assert step.policy == "llm" and step.fallback.startswith("no valid answer after 2 attempts")
    assert step.usage.total == 280 and len(step.attempts) == 2


def test_json_mode_puts_the_schema_in_the_prompt(tiny_spmm):
    model = ScriptedChatModel(script=[answer(GOOD)])
    llm_plan(model, tiny_spmm, spec_features(tiny_spmm), settings(llm_output_method="json_mode"))
    assert model.methods == ["json_mode"]
    assert "JSON Schema" in model.text_of(0) and "target_speedup" in model.text_of(0)

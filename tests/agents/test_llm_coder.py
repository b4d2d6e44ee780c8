"""The LLM coder: its prompt holds the last candidate and feedback only; its answer is data under the contract."""

from __future__ import annotations

import pytest
from llm.answers import new_kernel, reference
from llm.scripted import ScriptedChatModel, answer

from sparseditto.agents.llm_coder import llm_code
from sparseditto.agents.planner import offline_plan
from sparseditto.agents.policies import LLM, code_step
from sparseditto.agents.retriever import retrieve
from sparseditto.agents.schemas import Choice
from sparseditto.knowledge_base.experience import ExperienceStore
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.settings import Settings
from sparseditto.tools.verifier import CompileOnlyVerifier

SETTINGS = Settings(llm_model="scripted", llm_repair_attempts=1)


@pytest.fixture
def setup(tiny_spmm, tmp_path):
    plan, refs = retrieve(offline_plan(tiny_spmm), tiny_spmm, None, ExperienceStore(tmp_path / "experience.sqlite"), 2000)
    return tiny_spmm, plan, refs


def iteration(n, choice, candidate, report):
    return {"iteration": n, "choice": choice.model_dump(), "candidate": candidate.label(), "kernel": candidate.model_dump(),
            "backend": "gpu", "seconds": 1.0, "report": report.model_dump(mode="json")}


def code(model, setup, previous=None, iterations=(), verdicts=()):
    spec, plan, refs = setup
    return llm_code(model, SETTINGS, spec, plan, refs, previous, list(iterations), list(verdicts))


def test_a_reference_choice_instantiates_the_reference_kernel(setup):
    model = ScriptedChatModel(script=[answer(reference(vw=2))])
    choice, candidate = code(model, setup).value
    assert choice == Choice(kernel="spmm_csr_rowsplit", params={"VW": 2, "LANES": 8, "WARPS": 4, "UNROLL": 8})
    assert candidate.origin == "llm" and candidate.kernels == get_kernel("spmm_csr_rowsplit").kernels
    sent = model.text_of(0)
    assert "None yet: this is the first candidate." in sent
    assert 'extern "C"' in sent and "ceil_div" in sent  # the contract and the references' source
    assert "Input arrays: rowptr (int32), colind (int32), values (value_t), B (value_t)" in sent


def test_a_new_kernel_becomes_a_candidate_that_compiles(setup):
    spec = setup[0]
    model = ScriptedChatModel(script=[answer(new_kernel(cols=64))])
    choice, candidate = code(model, setup).value
    assert choice == Choice(kernel="spmm_thread_per_output", params={"COLS": 64})
    assert candidate.source.startswith("// SparseDitto kernel prelude")  # the prelude is compiled in
    report = CompileOnlyVerifier().verify(candidate, spec)
    assert report.compiled, report.feedback[0].message


@pytest.mark.parametrize(("changes", "error"), [
    ({"launches": [{"entry": "other_name", "grid": ["M", "1", "1"], "block": ["32", "1", "1"], "args": ["C"]}]},
     "not declared as extern"),
    ({"launches": [{"entry": "spmm_thread_per_output", "grid": ["M", "1", "1"], "block": ["32", "1", "1"],
                    "args": ["rowptr", "host_pointer"]}]}, "argument 'host_pointer' is not an array, tensor map, symbol or scalar"),
    ({"launches": [{"entry": "spmm_thread_per_output", "grid": ["__import__('os').system('id')", "1", "1"],
                    "block": ["32", "1", "1"], "args": ["C"]}]}, "only integers, symbols"),
    ({"launches": [{"entry": "spmm_thread_per_output", "grid": ["M", "1", "1"], "block": ["COLS * 64", "1", "1"],
                    "args": ["C"]}]}, "at most 1024 threads"),
    ({"name": "spmm_csr_rowsplit"}, "is a reference kernel's name"),
    ({"preparation": "merge_path"}, "preparation 'merge_path' is not one of"),
])
def test_answers_outside_the_contract_are_rejected_with_the_reason(setup, changes, error):
    model = ScriptedChatModel(script=[answer(new_kernel(**changes)), answer(new_kernel())])
    result = code(model, setup)
    assert error in result.attempts[0].error
    assert error in model.text_of(1)  # sent back for repair
    assert result.value[1].name == "spmm_thread_per_output"


def test_compile_options_outside_the_allow_list_are_rejected(setup):
    bad = new_kernel()
    bad["new_kernel"]["parameters"] = {"lower": 1}
    model = ScriptedChatModel(script=[answer(bad), answer({"change": "x"})])
    result = code(model, setup)
    assert result.value is None
    assert "upper-case" in result.attempts[0].error
    assert "exactly one of reference or new_kernel" in result.attempts[1].error


def test_the_prompt_holds_the_last_candidate_and_its_feedback_only(setup, wrong_report, measured_report):
    first = get_kernel("spmm_csr_rowsplit").instantiate({"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8})
    second = get_kernel("spmm_csr_rowsplit").instantiate({"VW": 2, "LANES": 8, "WARPS": 4, "UNROLL": 8})
    its = [iteration(1, Choice(kernel=first.name, params=first.parameters), first, wrong_report(first.label())),
           iteration(2, Choice(kernel=second.name, params=second.parameters), second,
                     measured_report(second.label(), median_us=80.0, speedup=0.7))]
    verdicts = [{"decision": "revise", "diagnosis": "wrong result in the vector path", "direction": "halve VW"},
                {"decision": "revise", "diagnosis": "gather-bound: 25% of the bandwidth floor",
                 "direction": "stage B tiles in shared memory"}]
    model = ScriptedChatModel(script=[answer(reference(vw=2)), answer(reference(vw=1))])
    result = code(model, setup, previous=second.model_dump(), iterations=its, verdicts=verdicts)
    sent = model.text_of(0)
    assert second.label() in sent and "80.0 us" in sent and "0.7" in sent
    assert "stage B tiles in shared memory" in sent
    assert "relative error 0.5" not in sent and "halve VW" not in sent
    # the model resent the candidate of iteration 2: rejected and repaired
    assert "already verified" in result.attempts[0].error
    assert result.value[0].params["VW"] == 1


def test_when_repair_fails_the_offline_coder_follows_the_reviewer(setup):
    spec, plan, refs = setup
    model = ScriptedChatModel(script=[answer("{}"), answer("{}")])
    verdicts = [{"decision": "revise", "diagnosis": "d", "direction": "switch",
                 "next": {"kernel": "spmm_csr_smem_tile", "params": start_of(plan, "spmm_csr_smem_tile")}}]
    prev = get_kernel("spmm_csr_rowsplit").instantiate(start_of(plan, "spmm_csr_rowsplit"))
    its = [iteration(1, Choice(kernel=prev.name, params=prev.parameters), prev, _compiled(prev.label()))]
    (choice, candidate), step = code_step(spec, plan, refs, prev.model_dump(), its, verdicts, "llm",
                                          LLM(SETTINGS, lambda role: model))
    assert choice.kernel == "spmm_csr_smem_tile" and candidate.origin == "offline"
    assert step.fallback and len(step.attempts) == 2 and step.iteration == 2


def start_of(plan, kernel):
    return next(s.start for s in plan.strategies if s.kernel == kernel)


def _compiled(label):
    from sparseditto.tools.results import Feedback, VerificationReport

    return VerificationReport(candidate=label, backend="gpu", compiled=True,
                              feedback=[Feedback(stage="compile", status="passed", message="compiled")])

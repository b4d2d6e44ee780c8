"""compute-sanitizer and Nsight Compute run once per compiled kernel and shape class in a process: the orchestration
of GpuVerifier with the GPU child, the sanitizer and the profiler replaced by doubles (their own tests are on the
GPU). What is judged here is only which stages run and what the report says when one is skipped."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import verifier as verifier_module
from sparseditto.tools.families import get_family
from sparseditto.tools.results import Feedback
from sparseditto.tools.runner import RunResult


def spmv(name: str, M: int):
    return parse_spec({"name": name, "operation": "spmv", "M": M, "K": M,
                       "pattern": {"distribution": "uniform", "nnz_per_row": 8}})


@pytest.fixture
def doubles(monkeypatch):
    calls = {"sanitizer": 0, "profile": 0}

    def run_child(job, tmp, timeout):
        problem = get_family(job.spec.family).make_problem(job.spec, 1)
        bench = Feedback(stage="benchmark", status="passed", message="10 us",
                         evidence={"sanitizer_instances": ["tails"], "tool_class": get_family(job.spec.family).tool_class(problem)})
        return RunResult(device={"name": "double"}, feedback=[Feedback(stage="correctness", status="passed"), bench], trials=[])

    def stage(name):
        def run(*args, **kwargs):
            calls[name] += 1
            return Feedback(stage=name, status="passed", message="clean")
        return run

    monkeypatch.setattr(verifier_module, "run_child", run_child)
    monkeypatch.setattr(verifier_module, "find_sanitizer", lambda: "compute-sanitizer")
    monkeypatch.setattr(verifier_module, "find_ncu", lambda: "ncu")
    monkeypatch.setattr(verifier_module, "sanitizer_stage", stage("sanitizer"))
    monkeypatch.setattr(verifier_module, "profile_stage", stage("profile"))
    monkeypatch.setattr(verifier_module, "_PROCESS_TOOLS", verifier_module.ProcessToolsRecord())
    return calls


def test_the_same_kernel_on_a_spec_of_the_same_class_skips_the_tools_and_says_where_they_passed(doubles):
    gpu = verifier_module.GpuVerifier(arch="sm_90")
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    first = gpu.verify(candidate, spmv("first", 5000))
    assert [first.stage(s).status for s in ("sanitizer", "profile")] == ["passed", "passed"]
    same_class = gpu.verify(candidate, spmv("second", 7000))  # both below 2^16 rows and nonzeros, rows of 8
    assert doubles == {"sanitizer": 1, "profile": 1}
    skipped = same_class.stage("sanitizer")
    assert skipped.status == "not_executed" and "passed compute-sanitizer and Nsight Compute on first" in skipped.message
    other_class = gpu.verify(candidate, spmv("third", 70000))
    assert other_class.stage("sanitizer").status == "passed" and doubles["sanitizer"] == 2
    other_kernel = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    assert gpu.verify(other_kernel, spmv("fourth", 6000)).stage("sanitizer").status == "passed"
    assert doubles["sanitizer"] == 3


def test_the_experience_store_keeps_the_record_across_processes_and_per_gpu(doubles, tmp_path, monkeypatch):
    """A later process (here a new verifier with the same store) skips both tools for the same kernel and class on a
    GPU of the same name, and says where they passed; on another GPU it runs them."""
    from sparseditto.knowledge_base.experience import ExperienceStore

    store = ExperienceStore(tmp_path / "experience.sqlite")
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    verifier_module.GpuVerifier(arch="sm_90", tools_record=store).verify(candidate, spmv("first", 5000))
    monkeypatch.setattr(verifier_module, "_PROCESS_TOOLS", verifier_module.ProcessToolsRecord())  # a new process
    later = verifier_module.GpuVerifier(arch="sm_90", tools_record=store).verify(candidate, spmv("second", 7000))
    assert doubles == {"sanitizer": 1, "profile": 1}
    assert "passed compute-sanitizer and Nsight Compute on first" in later.stage("sanitizer").message
    assert "double" in later.stage("sanitizer").message  # the GPU it passed on

    alone = verifier_module.run_child

    def on_another_gpu(job, tmp, timeout):
        return alone(job, tmp, timeout).model_copy(update={"device": {"name": "another GPU"}})

    monkeypatch.setattr(verifier_module, "run_child", on_another_gpu)
    elsewhere = verifier_module.GpuVerifier(arch="sm_90", tools_record=store).verify(candidate, spmv("third", 7000))
    assert elsewhere.stage("sanitizer").status == "passed" and doubles == {"sanitizer": 2, "profile": 2}


def test_csr_shape_classes_separate_dtypes_and_row_lengths():
    family = get_family("csr_spmv")
    base = family.make_problem(spmv("a", 5000), 1)
    assert family.tool_class(base) == family.tool_class(family.make_problem(spmv("b", 6000), 2))
    fp16 = parse_spec({"operation": "spmv", "M": 5000, "K": 5000, "dtype": "fp16",
                       "pattern": {"distribution": "uniform", "nnz_per_row": 8}})
    assert family.tool_class(family.make_problem(fp16, 1)) != family.tool_class(base)
    skewed = parse_spec({"operation": "spmv", "M": 5000, "K": 5000,
                         "pattern": {"distribution": "power_law", "nnz_per_row": 8}})
    assert family.tool_class(family.make_problem(skewed, 1)) != family.tool_class(base)

"""Candidates run ahead: GpuVerifier runs the next contenders in the current candidate's runner process, on the same
input draw, and hands each its own result when its iteration verifies it. The GPU child, the sanitizer and the profiler
are doubles here (the batch runner itself is checked on the GPU); judged are which children run, with which jobs, and
what each candidate's report carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import gpu_stages
from sparseditto.tools.ahead import AheadResults
from sparseditto.tools import verifier as verifier_module
from sparseditto.tools.results import Feedback
from sparseditto.tools.runner import BatchJob, RunResult


def spmv(M: int = 5000):
    return parse_spec({"name": f"ahead{M}", "operation": "spmv", "M": M, "K": M,
                       "pattern": {"distribution": "uniform", "nnz_per_row": 8}})


def vec4(group: int):
    return get_kernel("spmv_csr_vec4").instantiate({"GROUP": group, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})


def passed(job, us: float) -> RunResult:
    bench = Feedback(stage="benchmark", status="passed", message=f"{us} us", evidence={"sanitizer_instances": ["tails"]})
    return RunResult(device={"name": "double"}, trials=[],
                     feedback=[Feedback(stage="correctness", status="passed", evidence={"seeds": job.seeds}), bench])


@pytest.fixture
def children(monkeypatch):
    """Records every child run: ("single", [label]) or ("batch", [labels]); a batch's results follow `batch_outcome`."""
    log: dict = {"runs": [], "jobs": [], "batch_outcome": None}

    def run_child(job, tmp, timeout):
        log["runs"].append(("single", [job.candidate.label()]))
        log["jobs"].append([job])
        return passed(job, 10.0)

    def run_batch_child(jobs, tmp, timeout):
        log["runs"].append(("batch", [j.candidate.label() for j in jobs]))
        log["jobs"].append(jobs)
        BatchJob(jobs=jobs)  # one input draw for all, or the runner would refuse the batch
        outcome = log["batch_outcome"] or (lambda i, job: passed(job, 10.0 + i))
        return [outcome(i, job) for i, job in enumerate(jobs)]

    monkeypatch.setattr(verifier_module, "run_child", run_child)
    monkeypatch.setattr(verifier_module, "run_batch_child", run_batch_child)
    monkeypatch.setattr(verifier_module, "AHEAD", AheadResults())
    monkeypatch.setattr(verifier_module, "_PROCESS_TOOLS", verifier_module.ProcessToolsRecord())
    return log


def test_contenders_run_in_the_first_candidates_child_and_each_gets_its_own_result(children):
    gpu = verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)
    first, second, third = vec4(4), vec4(2), vec4(8)
    report = gpu.verify(first, spmv(), ahead=[second, third])
    assert children["runs"] == [("batch", [first.label(), second.label(), third.label()])]
    assert report.correct and report.stage("correctness").evidence.get("run_ahead") is None
    kept = [Path(job.cubin_path) for job in children["jobs"][0][1:]]
    assert all(p.is_file() for p in kept)  # the later stages need them

    later = gpu.verify(second, spmv())
    assert len(children["runs"]) == 1  # no new child: its result was waiting
    assert later.correct and "run_ahead" in later.stage("correctness").evidence
    assert later.stage("correctness").evidence["seeds"] == children["jobs"][0][1].seeds
    assert not kept[0].exists() and kept[1].exists()  # taken once, then its files go

    again = gpu.verify(second, spmv())  # a result run ahead is taken once: verifying again runs it again
    assert children["runs"][-1] == ("single", [second.label()])
    assert again.correct


def test_a_candidate_that_ends_the_batch_is_judged_alone_and_the_rest_run_later(children):
    def outcome(i, job):
        if i == 1:
            return Feedback(stage="launch", status="failed", error_type="crash", message="core dumped")
        if i == 2:
            return Feedback(stage="launch", status="not_executed", message="not executed: an earlier candidate ...")
        return passed(job, 10.0)

    children["batch_outcome"] = outcome
    gpu = verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)
    first, crashing, after = vec4(4), vec4(2), vec4(8)
    assert gpu.verify(first, spmv(), ahead=[crashing, after]).correct
    # neither the crash nor the candidate it kept from running is taken as a result: both run in their own child
    for candidate in (crashing, after):
        assert gpu.verify(candidate, spmv()).correct
        assert children["runs"][-1] == ("single", [candidate.label()])


def test_only_compiling_distinct_candidates_of_the_same_spec_run_ahead(children):
    gpu = verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)
    broken = vec4(2).model_copy(update={"source": vec4(2).source.replace("{", "{ this is not C;", 1), "name": "broken"})
    gpu.verify(vec4(4), spmv(), ahead=[vec4(4), broken, vec4(2)])
    assert children["runs"] == [("batch", [vec4(4).label(), vec4(2).label()])]
    # results run ahead for one spec are dropped when another spec is verified
    gpu.verify(vec4(8), spmv(6000))
    gpu.verify(vec4(2), spmv())
    assert children["runs"][-1] == ("single", [vec4(2).label()])


def test_the_runner_refuses_a_batch_whose_jobs_drew_different_inputs(children):
    gpu = verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)
    gpu.verify(vec4(4), spmv(), ahead=[vec4(2)])
    jobs = children["jobs"][0]
    with pytest.raises(ValueError, match="share the spec, the seeds"):
        BatchJob(jobs=[jobs[0], jobs[1].model_copy(update={"timing_seed": jobs[1].timing_seed + 1})])


def test_the_batch_child_reads_each_result_on_its_own(tmp_path, monkeypatch):
    """Results the runner wrote are read; the first missing one gets why the process ended; later ones are not run."""
    gpu = verifier_module.GpuVerifier(arch="sm_90")
    draw = verifier_module.InputDraw.fresh(spmv(), 2)
    jobs = [gpu._job(vec4(g), spmv(), verifier_module.compile_candidate(vec4(g), spmv(), "sm_90")[0], tmp_path, draw)
            for g in (4, 2, 8)]

    def crash_after_first(command, timeout_s):
        out_dir = Path(command[-1])
        (out_dir / "result-0.json").write_text(passed(jobs[0], 10.0).model_dump_json())
        return Feedback(stage="launch", status="failed", error_type="illegal_memory_access", message="ILLEGAL_ADDRESS")

    monkeypatch.setattr(gpu_stages, "_run", crash_after_first)
    first, second, third = gpu_stages.run_batch_child(jobs, tmp_path, 10.0)
    assert isinstance(first, RunResult)
    assert second.error_type == "illegal_memory_access"
    assert third.status == "not_executed" and "earlier candidate" in third.message


def test_a_candidate_slower_than_a_contender_run_beside_it_leaves_the_tools_for_later(children, monkeypatch,
                                                                                      measured_report):
    """The sanitizer and the profiler are deferred, not judged unneeded: the review never accepts such a candidate as
    it stands (it is not the best iteration), so every accepted kernel still has passed both tools."""
    from sparseditto.agents.reviewer import best_iteration
    from sparseditto.tools.results import VerificationReport

    def measured(job, us):
        run = passed(job, us)
        timing = measured_report("x", median_us=us).measurement
        return run.model_copy(update={"measurement": timing})

    children["batch_outcome"] = lambda i, job: measured(job, 20.0 if i == 0 else 10.0)
    monkeypatch.setattr(verifier_module, "find_sanitizer", lambda: "compute-sanitizer")
    monkeypatch.setattr(verifier_module, "sanitizer_stage", lambda *a, **k: Feedback(stage="sanitizer", status="passed"))
    gpu = verifier_module.GpuVerifier(arch="sm_90", profile=False)
    slow = gpu.verify(vec4(4), spmv(), ahead=[vec4(2)])
    assert slow.correct and slow.tools_deferred
    assert "slower than a contender run beside it (10.0 us)" in slow.stage("sanitizer").message
    fast = gpu.verify(vec4(2), spmv())
    assert not fast.tools_deferred and fast.stage("sanitizer").status == "passed"

    def iteration(n, report):
        return {"iteration": n, "choice": {"kernel": "k", "params": {}}, "report": report.model_dump(mode="json")}

    assert best_iteration([iteration(1, slow)]) is None  # alone it is no best: it would need the tools first
    assert best_iteration([iteration(1, slow), iteration(2, fast)])["iteration"] == 2
    assert not VerificationReport.model_validate(iteration(2, fast)["report"]).tools_deferred


def test_a_candidate_run_ahead_is_checked_and_compiled_once(children, monkeypatch):
    compiled = []
    check = verifier_module.check_and_compile

    def counted(candidate, spec, arch):
        compiled.append(candidate.label())
        return check(candidate, spec, arch)

    monkeypatch.setattr(verifier_module, "check_and_compile", counted)
    gpu = verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)
    gpu.verify(vec4(4), spmv(), ahead=[vec4(2)])
    later = gpu.verify(vec4(2), spmv())
    assert compiled == [vec4(4).label(), vec4(2).label()]
    assert later.compiled and later.correct and "run_ahead" in later.stage("correctness").evidence


def test_the_runner_reports_its_start_and_scrubs_and_the_parent_its_wall_time(tmp_path, monkeypatch):
    """Where a child's seconds go outside its stages: the start (interpreter and imports, from the parent's launch on
    the monotonic clock), the scrub between a batch's candidates, and the whole process as the parent timed it."""
    import time

    from sparseditto.tools import runner

    gpu = verifier_module.GpuVerifier(arch="sm_90")
    draw = verifier_module.InputDraw.fresh(spmv(), 2)
    jobs = [gpu._job(vec4(g), spmv(), verifier_module.compile_candidate(vec4(g), spmv(), "sm_90")[0], tmp_path, draw)
            for g in (4, 2)]
    monkeypatch.setenv(runner.LAUNCHED_AT_ENV, repr(time.monotonic() - 1.5))
    monkeypatch.setattr(runner, "run_job", lambda job: passed(job, 10.0))
    monkeypatch.setattr(runner, "scrub_free_device_memory", lambda: time.sleep(0.05))
    out = tmp_path / "batch-results"
    out.mkdir()
    runner.run_batch(BatchJob(jobs=jobs), out)
    first, second = (RunResult.model_validate_json((out / f"result-{i}.json").read_text()).feedback[0].evidence
                     for i in range(2))
    assert first["startup_seconds"] >= 1.5 and "scrub_seconds" not in first
    assert second["scrub_seconds"] >= 0.05 and "startup_seconds" not in second

    def slow_child(command, timeout_s):
        time.sleep(0.2)
        for i, job in enumerate(jobs):
            (Path(command[-1]) / f"result-{i}.json").write_text(passed(job, 10.0).model_dump_json())

    monkeypatch.setattr(gpu_stages, "_run", slow_child)
    results = gpu_stages.run_batch_child(jobs, tmp_path, 10.0)
    assert results[0].feedback[0].evidence["process_seconds"] >= 0.2
    assert "process_seconds" not in results[1].feedback[0].evidence


def test_the_parent_tells_the_child_process_when_it_launched_it(tmp_path):
    import sys

    from sparseditto.tools.runner import LAUNCHED_AT_ENV

    out = tmp_path / "startup.txt"
    code = (f"import os, time; open({str(out)!r}, 'w').write(repr(time.monotonic() - float(os.environ[{LAUNCHED_AT_ENV!r}])))")
    assert gpu_stages._run([sys.executable, "-c", code], 60) is None
    assert 0.0 < float(out.read_text()) < 60.0

"""The batch runner's orchestration with fake run functions (no pipeline): resume, errors, workers, GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparseditto.errors import EvalError, PolicyError
from sparseditto.evals.records import SpecRecord
from sparseditto.evals.runner import EvalConfig, Job, run_spec, run_suite
from sparseditto.evals.suite import Suite, SuiteSpec

SPEC = {"operation": "spmv", "pattern": {"nnz_per_row": 4}, "M": 64, "K": 64}


def _suite(n: int = 3) -> Suite:
    return Suite(name="t", description="", specs=[SuiteSpec(suite="t", id=f"s{i}", tags=[], spec=SPEC) for i in range(n)])


def fake_run(job: Job) -> SpecRecord:
    """Stands in for the pipeline; leaves a file per spec naming the GPU its worker was pinned to."""
    seen = job.config.out / "seen"
    seen.mkdir(parents=True, exist_ok=True)
    (seen / job.entry.id).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
    if job.entry.id == "s1" and job.config.out.name == "dies":
        os._exit(3)
    return SpecRecord(suite=job.entry.suite, spec_id=job.entry.id, policy=job.config.policy, budget=job.config.budget,
                      compile_only=job.config.compile_only, status="compiled_only", correctness="not_executed", seconds=0.1)


def _no_gpu() -> None:
    return None


def test_runs_every_spec_in_order_and_writes_one_line_each(tmp_path):
    events = []
    records = run_suite(_suite(), EvalConfig(out=tmp_path, compile_only=True), run_fn=fake_run,
                        on_event=events.append, gpu_count=_no_gpu)
    assert [r.spec_id for r in records] == ["s0", "s1", "s2"]
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x["spec_id"] for x in lines] == ["s0", "s1", "s2"]
    assert [e["event"] for e in events] == ["begin"] + ["started", "finished"] * 3


def test_resume_runs_only_the_specs_without_a_record(tmp_path):
    config = EvalConfig(out=tmp_path, compile_only=True)
    run_suite(_suite(1), config, run_fn=fake_run, gpu_count=_no_gpu)  # an evaluation interrupted after s0
    (tmp_path / "seen" / "s0").unlink()
    records = run_suite(_suite(3), config, resume=True, run_fn=fake_run, gpu_count=_no_gpu)
    assert [r.spec_id for r in records] == ["s0", "s1", "s2"]
    assert sorted(p.name for p in (tmp_path / "seen").iterdir()) == ["s1", "s2"]
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3


def test_an_interrupted_spec_loses_nothing_already_written(tmp_path):
    def interrupted(job: Job) -> SpecRecord:
        if job.entry.id == "s1":
            raise KeyboardInterrupt
        return fake_run(job)

    with pytest.raises(KeyboardInterrupt):
        run_suite(_suite(), EvalConfig(out=tmp_path, compile_only=True), run_fn=interrupted, gpu_count=_no_gpu)
    assert [json.loads(x)["spec_id"] for x in (tmp_path / "results.jsonl").read_text().splitlines()] == ["s0"]


def test_existing_results_need_resume_and_the_same_settings(tmp_path):
    config = EvalConfig(out=tmp_path, compile_only=True)
    run_suite(_suite(1), config, run_fn=fake_run, gpu_count=_no_gpu)
    with pytest.raises(EvalError, match="already holds 1 results; pass --resume"):
        run_suite(_suite(), config, run_fn=fake_run, gpu_count=_no_gpu)
    with pytest.raises(EvalError, match="made with policy offline, budget None"):
        run_suite(_suite(), config.model_copy(update={"budget": 4}), resume=True, run_fn=fake_run, gpu_count=_no_gpu)


@pytest.mark.parametrize(("update", "gpus_found", "error", "message"), [
    ({"policy": "llm"}, None, PolicyError, "the llm policy needs a model"),
    ({"gpus": [0, 2], "compile_only": False}, 2, EvalError, "--gpus: no GPU 2 on this machine"),
    ({"gpus": [0], "compile_only": True}, 1, EvalError, "exclude each other"),
    ({"gpus": [1, 1], "compile_only": False}, 2, EvalError, "each GPU once"),
    ({"gpus": [0, 1], "workers": 3, "compile_only": False}, 2, EvalError, "--gpus and --workers exclude each other"),
    ({"workers": 2, "compile_only": False}, 1, EvalError, "--workers > 1 would time several kernels on one GPU"),
])
def test_unusable_options_are_refused_before_anything_runs(tmp_path, update, gpus_found, error, message):
    config = EvalConfig(out=tmp_path, compile_only=True).model_copy(update=update)
    with pytest.raises(error, match=message):
        run_suite(_suite(), config, run_fn=fake_run, gpu_count=lambda: gpus_found)
    assert not (tmp_path / "results.jsonl").exists()


def test_a_failing_spec_is_recorded_as_an_error_and_the_suite_goes_on(tmp_path, monkeypatch):
    import sparseditto.pipeline

    def boom(spec, **kwargs):
        raise RuntimeError(f"no luck with {spec['operation']}")

    monkeypatch.setattr(sparseditto.pipeline, "run_pipeline", boom)
    records = run_suite(_suite(2), EvalConfig(out=tmp_path, compile_only=True), run_fn=run_spec, gpu_count=_no_gpu)
    assert [(r.status, r.error) for r in records] == [("error", "RuntimeError: no luck with spmv"),
                                                       ("error", "RuntimeError: no luck with spmv")]


def test_one_worker_per_gpu_and_a_worker_that_dies_costs_only_its_spec(tmp_path):
    out = tmp_path / "dies"  # fake_run kills its worker process on s1 here
    events = []
    records = run_suite(_suite(4), EvalConfig(out=out, gpus=[0, 1]), run_fn=fake_run, on_event=events.append,
                        gpu_count=lambda: 2)
    assert [(r.spec_id, r.status) for r in records] == [("s0", "compiled_only"), ("s1", "error"),
                                                         ("s2", "compiled_only"), ("s3", "compiled_only")]
    assert "worker process died (exit code 3)" in records[1].error
    started = [(e["spec_id"], e["worker"]) for e in events if e["event"] == "started"]
    assert sorted(spec_id for spec_id, _ in started) == ["s0", "s1", "s2", "s3"]
    for spec_id, worker in started:  # each worker, the replacement too, sees only its own GPU
        assert (out / "seen" / spec_id).read_text() == str(worker)


def test_suite_entry_ids_become_valid_run_ids():
    from sparseditto.artifacts import check_run_id
    from sparseditto.evals.runner import suite_run_id

    for spec_id in ("spmm.fp32/1%", "a" * 200, "plain_id-1"):
        run_id = suite_run_id(spec_id)
        assert check_run_id(run_id) == run_id

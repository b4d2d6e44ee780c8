"""The batch runner: the pipeline over every spec of a suite, in worker processes, resumably.

Each spec's record is appended to results.jsonl by this (the parent) process as soon as the spec
finishes, so an interrupted evaluation keeps every finished spec and `resume` runs only the rest.
Workers are spawned processes, one per GPU (CUDA_VISIBLE_DEVICES pinned before CUDA is touched) or N
of them without GPUs; a worker that dies takes only its current spec down, recorded as an error.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from sparseditto import pipeline
from sparseditto.agents.llm_models import check_usable
from sparseditto.errors import EvalError
from sparseditto.evals.records import ResultLog, SpecRecord, measured_fields, read_result_json
from sparseditto.evals.suite import Suite, SuiteSpec
from sparseditto.settings import Policy, Settings

log = structlog.get_logger(__name__)

EventHandler = Callable[[dict[str, Any]], None]


class EvalConfig(BaseModel):
    policy: Policy = "offline"
    budget: int | None = None
    compile_only: bool = False
    workers: int = 1
    gpus: list[int] | None = None
    out: Path


class Job(BaseModel):
    entry: SuiteSpec
    config: EvalConfig


RunFn = Callable[[Job], SpecRecord]


def suite_run_id(spec_id: str) -> str:
    """A run id from a suite entry's id: its letters, digits, '_' and '-' (others become '_'), at most 57 of them,
    and 6 random hex digits."""
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', spec_id)[:57]}-{uuid.uuid4().hex[:6]}"


def _identity(job: Job) -> dict[str, Any]:
    """The fields every record of this job carries, whatever happened to it."""
    cfg, entry = job.config, job.entry
    return dict(suite=entry.suite, spec_id=entry.id, tags=entry.tags, policy=cfg.policy, budget=cfg.budget,
                compile_only=cfg.compile_only)


def run_spec(job: Job) -> SpecRecord:
    """Run the pipeline on one spec (budget spent -> approve the best) and turn its result into a record."""
    cfg, entry = job.config, job.entry
    base = _identity(job)
    start = time.perf_counter()
    try:
        result = pipeline.run_pipeline(entry.spec, policy=cfg.policy, on_budget="approve", budget=cfg.budget,
                              runs_dir=str(cfg.out / "runs"), compile_only=cfg.compile_only,
                              run_id=suite_run_id(entry.id))
    except Exception as exc:  # one spec's failure must not stop the suite
        log.warning("spec_failed", spec=entry.id, error=repr(exc))
        return SpecRecord(**base, status="error", error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - start)
    return SpecRecord(**base, status=result.status, run_id=result.run_id, artifacts_dir=result.artifacts_dir,
                      tokens=result.tokens, seconds=time.perf_counter() - start,
                      **measured_fields(read_result_json(result.artifacts_dir)))


def check_config(config: EvalConfig, gpu_count: Callable[[], int | None]) -> None:
    """Refuse, before anything runs, options that cannot work: every spec would fail the same way."""
    if config.policy != "offline":
        check_usable(Settings())
    if config.gpus is not None:
        if config.workers > 1:
            raise EvalError("--gpus and --workers exclude each other: --gpus runs one worker per GPU")
        if config.compile_only:
            raise EvalError("--gpus and --compile-only exclude each other: compile-only runs use no GPU")
        found = gpu_count()
        bad = [g for g in config.gpus if found is None or g >= found]
        if bad:
            raise EvalError(f"--gpus: no GPU {', '.join(map(str, bad))} on this machine ({found or 0} found)")
        if len(set(config.gpus)) != len(config.gpus):
            raise EvalError("--gpus: each GPU once (one worker per GPU)")
    elif config.workers > 1 and not config.compile_only and gpu_count():
        raise EvalError("--workers > 1 would time several kernels on one GPU at once; use --gpus 0,1,... or --compile-only")


def _check_resumable(previous: list[SpecRecord], config: EvalConfig, resume: bool, path: Path) -> None:
    if previous and not resume:
        raise EvalError(f"{path} already holds {len(previous)} results; pass --resume to continue it or choose another --out")
    for r in previous:
        theirs = (r.policy, r.budget, r.compile_only)
        ours = (config.policy, config.budget, config.compile_only)
        if theirs != ours:
            raise EvalError(f"--resume: {path} was made with policy {r.policy}, budget {r.budget}, compile_only "
                            f"{r.compile_only}; this eval asks for {config.policy}, {config.budget}, {config.compile_only}")


def _serve(env: dict[str, str], run_fn: RunFn, conn: Connection) -> None:
    """A worker process: pin the GPU, then run each job the parent sends until it sends None."""
    os.environ.update(env)
    try:
        while (payload := conn.recv()) is not None:
            conn.send(run_fn(Job.model_validate_json(payload)).model_dump_json())
    except (KeyboardInterrupt, EOFError):  # Ctrl-C reaches every process of the terminal; the parent reports it
        return


class _Worker:
    """One spawned worker process, its pipe, and the job it is running (the parent hands out every job)."""

    def __init__(self, ctx: Any, slot: int, env: dict[str, str], run_fn: RunFn) -> None:
        self.slot = slot
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(env, run_fn, child))
        self.proc.start()
        child.close()
        self.job: Job | None = None

    def give(self, job: Job | None) -> None:
        self.job = job
        self.conn.send(job.model_dump_json() if job else None)

    def take(self) -> SpecRecord:
        """The record of the running job, or an error record when the process died running it."""
        job, self.job = self.job, None
        assert job is not None
        try:
            return SpecRecord.model_validate_json(self.conn.recv())
        except (EOFError, ConnectionError):
            self.proc.join(timeout=5)
            return _died(job, self.proc.exitcode)


class _Pool:
    """Spawned workers, one per GPU or N without; a worker that dies is recorded for its spec and replaced."""

    def __init__(self, envs: list[dict[str, str]], run_fn: RunFn, jobs: list[Job]) -> None:
        self.ctx = mp.get_context("spawn")
        self.envs, self.run_fn = envs, run_fn
        self.pending = deque(jobs)
        self.workers = [_Worker(self.ctx, slot, env, run_fn) for slot, env in enumerate(envs)]

    def _next(self, worker: _Worker) -> str | None:
        worker.give(self.pending.popleft() if self.pending else None)
        return worker.job.entry.id if worker.job else None

    def events(self) -> Iterator[tuple[str, int, Any]]:
        """Yield ("started", slot, spec id) and ("finished", slot, record) until every job has a record."""
        for w in self.workers:
            if (spec_id := self._next(w)) is not None:
                yield "started", w.slot, spec_id
        while busy := [w for w in self.workers if w.job is not None]:
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy])
            for w in busy:
                if w.conn not in ready and w.proc.sentinel not in ready:
                    continue
                record = w.take()
                yield "finished", w.slot, record
                if not w.proc.is_alive():
                    w = self.workers[w.slot] = _Worker(self.ctx, w.slot, self.envs[w.slot], self.run_fn)
                if (spec_id := self._next(w)) is not None:
                    yield "started", w.slot, spec_id

    def stop(self) -> None:
        for w in self.workers:
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self.workers:
            w.proc.join(timeout=5)


def _died(job: Job, exitcode: int | None) -> SpecRecord:
    return SpecRecord(**_identity(job), status="error", seconds=0.0,
                      error=f"worker process died (exit code {exitcode}) while running this spec")


def _worker_envs(config: EvalConfig) -> list[dict[str, str]]:
    if config.gpus is not None:
        return [{"CUDA_VISIBLE_DEVICES": str(g)} for g in config.gpus]
    return [{} for _ in range(config.workers)]


class Evaluation:
    """A suite checked against its options and its output folder, ready to run: what is done and what is left."""

    def __init__(self, suite: Suite, config: EvalConfig, *, resume: bool = False,
                 gpu_count: Callable[[], int | None] | None = None) -> None:
        check_config(config, gpu_count or _detected_gpus)
        self.suite, self.config = suite, config
        self.results = ResultLog(config.out / "results.jsonl")
        previous = self.results.read()
        _check_resumable(previous, config, resume, self.results.path)
        self.order = {e.id: n for n, e in enumerate(suite.specs)}
        self.records = [r for r in previous if r.spec_id in self.order]
        done = {r.spec_id for r in self.records}
        self.jobs = [Job(entry=e, config=config) for e in suite.specs if e.id not in done]

    def run(self, run_fn: RunFn = run_spec, on_event: EventHandler | None = None) -> list[SpecRecord]:
        """Run the specs left, appending each record as it comes; return all of the suite's records in suite order."""
        emit = on_event or (lambda event: None)
        total = len(self.suite.specs)
        emit({"event": "begin", "total": total, "skipped": total - len(self.jobs)})
        log.info("eval_begin", suite=self.suite.name, specs=total, to_run=len(self.jobs), out=str(self.config.out))
        envs = _worker_envs(self.config)

        def finish(record: SpecRecord, worker: int) -> None:
            self.results.append(record)
            self.records.append(record)
            emit({"event": "finished", "record": record, "worker": worker})

        if len(envs) == 1 and self.config.gpus is None:
            for job in self.jobs:  # one worker and no GPU to pin: this process is the worker
                emit({"event": "started", "spec_id": job.entry.id, "worker": 0})
                finish(run_fn(job), 0)
        elif self.jobs:
            pool = _Pool(envs, run_fn, self.jobs)
            try:
                for kind, slot, value in pool.events():
                    if kind == "started":
                        emit({"event": "started", "spec_id": value, "worker": slot})
                    else:
                        finish(value, slot)
            finally:
                pool.stop()
        self.jobs = []
        return sorted(self.records, key=lambda r: self.order[r.spec_id])


def run_suite(
    suite: Suite,
    config: EvalConfig,
    *,
    resume: bool = False,
    run_fn: RunFn = run_spec,
    on_event: EventHandler | None = None,
    gpu_count: Callable[[], int | None] | None = None,
) -> list[SpecRecord]:
    """Run every spec of `suite` not yet in <out>/results.jsonl; return all of the suite's records."""
    return Evaluation(suite, config, resume=resume, gpu_count=gpu_count).run(run_fn, on_event)


def _detected_gpus() -> int | None:
    from sparseditto.tools.device import detect

    gpu = detect().gpu
    return gpu["count"] if gpu else None

"""One line of results.jsonl per spec: what the pipeline found, read back from the run's result.json.

The numbers come from the run's best iteration as the pipeline recorded it, so a report can always be
traced to the artifact folder (`artifacts_dir`) that holds the kernel and every measurement.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from sparseditto.errors import EvalError
from sparseditto.tools.results import VerificationReport, fastest_per_library

Correctness = Literal["correct", "incorrect", "not_executed", "no_kernel"]


class LibraryBaseline(BaseModel):
    """The fastest correct configuration of one library, timed in the same process as the kernel."""

    name: str
    config: str
    median_us: float


class SpecRecord(BaseModel):
    suite: str
    spec_id: str
    tags: list[str] = []
    policy: str
    budget: int | None = None
    compile_only: bool = False
    # the pipeline's final status, or "error" when the run raised
    status: str
    error: str | None = None
    correctness: Correctness = "no_kernel"
    run_id: str | None = None
    artifacts_dir: str | None = None
    device: str | None = None
    candidate: str | None = None
    median_us: float | None = None
    floor_us: float | None = None
    bandwidth_fraction: float | None = None
    # the share of the chosen format's own floor (its streamed arrays and the dense operands at copy bandwidth)
    format_fraction: float | None = None
    # the family's counted FLOPs per second (dense-equivalent for 2:4) and their share of the device's peak for that
    # arithmetic: what a compute-bound spec is judged by, as the bandwidth floor is for a memory-bound one
    tflops: float | None = None
    peak_fraction: float | None = None
    best_baseline: str | None = None
    speedup_vs_best: float | None = None
    speedups: dict[str, float] = {}
    baselines: dict[str, LibraryBaseline] = {}
    iterations: int = 0
    best_iteration: int | None = None
    seconds_to_best: float | None = None
    # the first candidate's time over the best's (1.0: the planner's first guess was the best; None: it failed)
    first_over_best: float | None = None
    seconds: float
    tokens: dict[str, int] = {}
    finished_at: float = Field(default_factory=time.time)

    @property
    def correct(self) -> bool:
        return self.correctness == "correct"


def _correctness(report: VerificationReport) -> Correctness:
    """Correct only if the checks ran and passed; "not executed" only if they were reported as not run."""
    if report.correct:
        return "correct"
    stage = report.stage("correctness")
    return "not_executed" if stage is not None and stage.status == "not_executed" else "incorrect"


def _library_baselines(report: VerificationReport) -> dict[str, LibraryBaseline]:
    return {lib: LibraryBaseline(name=b.name, config=b.config, median_us=b.median_us)
            for lib, b in fastest_per_library(report.baselines).items()}


def measured_fields(result: dict[str, Any]) -> dict[str, Any]:
    """The record's fields taken from a run's result.json: its best iteration and the time spent to reach it."""
    iterations = result.get("iterations", [])
    fields: dict[str, Any] = {"iterations": len(iterations)}
    best_no = result.get("best_iteration")
    best = next((it for it in iterations if it["iteration"] == best_no), None)
    if best is None:
        return fields
    report = VerificationReport.model_validate(best["report"])
    fields.update(
        candidate=best["candidate"], best_iteration=best_no, correctness=_correctness(report),
        device=report.device.get("name"),
        seconds_to_best=sum(it["seconds"] for it in iterations if it["iteration"] <= best_no),
    )
    m = report.measurement
    first = VerificationReport.model_validate(iterations[0]["report"])
    if m is not None and first.correct and first.measurement is not None:
        fields["first_over_best"] = first.measurement.median_us / m.median_us
    if m is not None and fields["correctness"] == "correct":
        fields.update(median_us=m.median_us, floor_us=m.floor_us, bandwidth_fraction=m.bandwidth_fraction,
                      format_fraction=m.format_fraction,
                      tflops=m.achieved_gflops / 1e3,
                      peak_fraction=m.achieved_gflops / m.peak_gflops if m.peak_gflops else None,
                      best_baseline=m.best_baseline, speedup_vs_best=m.speedup_vs_best, speedups=dict(m.speedups),
                      baselines=_library_baselines(report))
    return fields


def read_result_json(artifacts_dir: str | None) -> dict[str, Any]:
    if not artifacts_dir:
        return {}
    path = Path(artifacts_dir) / "result.json"
    return json.loads(path.read_text()) if path.is_file() else {}


class ResultLog:
    """results.jsonl: appended one line per finished spec and flushed at once, so an interruption loses nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[SpecRecord]:
        return load_records(self.path) if self.path.exists() else []

    def append(self, record: SpecRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(record.model_dump_json() + "\n")
            f.flush()


def load_records(source: str | Path) -> list[SpecRecord]:
    """Records from a results.jsonl file or an eval output folder; a torn last line (a killed writer) is skipped."""
    path = Path(source)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise EvalError(f"{source}: no results (expected a results.jsonl file or a folder holding one)")
    records = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(SpecRecord.model_validate_json(line))
        except ValidationError:
            if n == len(lines):
                continue
            raise EvalError(f"{path}:{n}: not a result record") from None
    return records

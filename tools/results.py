"""Structured results of verifying a candidate: what the reviewer reads and the reports print."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from sparseditto.tools.compiler import KernelResources

Status = Literal["passed", "failed", "not_executed", "error"]
NOT_EXECUTED_NO_GPU = "not executed: no CUDA device"


class Feedback(BaseModel):
    """One stage's outcome, in a form the reviewer (and a person) can act on."""

    stage: Literal["compile", "launch", "correctness", "sanitizer", "benchmark", "profile"]
    status: Status
    error_type: str | None = None
    message: str = ""
    location: str | None = None
    evidence: dict[str, Any] = {}
    suggestion: str | None = None


class Trial(BaseModel):
    seed: int
    shape: dict[str, int]
    held_out: bool
    rel_error: float | None
    unwritten: int = 0
    inputs_unchanged: bool = True
    passed: bool


class BaselineTiming(BaseModel):
    name: str
    library: str
    config: str
    median_us: float
    rel_error: float
    correct: bool


class Measurement(BaseModel):
    """The candidate's time on the spec's main shape and where it stands against the floor and baselines."""

    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    preparation_ms: float
    floor_us: float
    achieved_gbps: float
    achieved_gflops: float
    bandwidth_fraction: float
    copy_bandwidth_gbps: float
    best_baseline: str | None = None
    best_baseline_us: float | None = None
    speedup_vs_best: float | None = None
    speedups: dict[str, float] = {}


class VerificationReport(BaseModel):
    candidate: str
    backend: Literal["gpu", "compile_only"]
    device: dict[str, Any] = {}
    compiled: bool
    resources: dict[str, KernelResources] = {}
    feedback: list[Feedback]
    trials: list[Trial] = []
    measurement: Measurement | None = None
    baselines: list[BaselineTiming] = []

    @property
    def correct(self) -> bool:
        return any(f.stage == "correctness" and f.status == "passed" for f in self.feedback) and not any(
            f.status in {"failed", "error"} for f in self.feedback
        )

    def stage(self, name: str) -> Feedback | None:
        return next((f for f in self.feedback if f.stage == name), None)

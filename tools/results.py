"""Structured results of verifying a candidate: what the reviewer reads and the reports print."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from sparseditto.tools.compiler import KernelResources
from sparseditto.tools.sass import SassCounts

Status = Literal["passed", "failed", "not_executed", "error"]
Stage = Literal["static", "compile", "launch", "correctness", "sanitizer", "benchmark", "profile"]
# Every way a candidate can fail, so that the reviewer (offline or LLM) can act on the kind, not the text.
ErrorType = Literal[
    "forbidden_construct",  # static check: host API, library call, device-side launch, printf, trap ...
    "compile_error",
    "invalid_launch",  # the declared preparation is unknown or fails on the instance
    # the launch checks (tools/launch_check.py), each before anything runs:
    "invalid_expression",  # a geometry, workspace or tensor-map expression does not evaluate
    "grid_limit",  # grid dimensions below 1 or above the device's (x < 2**31, y and z <= 65535)
    "block_limit",  # block dimensions (x, y <= 1024, z <= 64) or more than 1024 threads
    "cluster_shape",  # cluster above 8 blocks, on a GPU without clusters, or the grid does not divide into it
    "shared_memory_limit",  # static plus dynamic shared memory above the architecture's per-block limit
    "register_limit",  # registers per thread times threads above the 64K registers of a block
    "workspace_limit",  # a negative workspace size, or more than the cap in all
    "unknown_argument",  # an argument that is no array, tensor map, symbol or scalar of the contract
    "argument_type",  # a scalar passed as the wrong type, or a value that does not fit its type
    "tensor_map_invalid",  # a tensor map the driver would refuse or that reaches past its array
    "early_launch",  # a sequence's first launch declared early, or an early entry that does not wait first
    "timeout", "crash", "illegal_memory_access",
    "wrong_result",  # error far above the tolerance
    "precision_loss",  # close to the reference but outside the tolerance: arithmetic too coarse
    "held_out_failure",  # right at the tuned shape, wrong at a held-out shape
    "stale_result",  # the output equals an earlier trial's answer: results reused across calls
    "order_dependent",  # right or wrong depending on what ran before it on the device
    "unwritten_output",  # output elements still hold the poison
    "non_finite_output",  # NaN/Inf written by the kernel where the exact result is finite
    "special_value_mismatch",  # a NaN or Inf in the inputs not carried into the result as IEEE arithmetic does
    "input_mutation",  # an input (or a prepared array) differs after a correctness or timed run
    "inconsistent_output",  # right in the correctness trials, wrong in a timed run
    "suspect_timing",  # faster than the physical floor
    "out_of_bounds", "misaligned_access", "uninitialized_read", "shared_memory_race", "sync_error",
    "register_race",  # static: a register a warpgroup MMA in flight reads is written before its group retires
    "sanitizer_failure",  # the sanitizer run itself failed (crash, API error, timeout)
    "profiler_failure",
]
NOT_EXECUTED_NO_GPU = "not executed: no CUDA device"


class Feedback(BaseModel):
    """One stage's outcome, in a form the reviewer (and a person) can act on."""

    stage: Stage
    status: Status
    error_type: ErrorType | None = None
    message: str = ""
    location: str | None = None
    evidence: dict[str, Any] = {}
    suggestion: str | None = None


class Trial(BaseModel):
    seed: int
    shape: dict[str, int]
    held_out: bool
    rel_error: float | None  # the largest of the outputs' relative errors
    # each output's relative error (None: NaN/Inf or unwritten elements) and the first output that failed
    errors: dict[str, float | None] = {}
    failed_output: str | None = None
    unwritten: int = 0
    non_finite: int = 0
    exceeded: int = 0  # elements outside their own error bounds (or 1 for an output out of its norm-wise tolerance)
    inputs_unchanged: bool = True
    # candidate_first, or library_first: a vendor library ran on the same inputs just before the candidate
    order: str = "candidate_first"
    passed: bool


class BaselineTiming(BaseModel):
    name: str
    library: str
    config: str
    median_us: float
    rel_error: float
    correct: bool
    # timed by an earlier verification of the same spec and carried over; the fastest is always timed again
    carried: bool = False
    # host seconds this configuration took here: built and run once, then timed (where a spec's baseline time goes)
    seconds: float = 0.0


def fastest_per_library(baselines: list[BaselineTiming]) -> dict[str, BaselineTiming]:
    """Each library's fastest correct configuration: the one a speedup against that library is measured by."""
    best: dict[str, BaselineTiming] = {}
    for b in baselines:
        if b.correct and (b.library not in best or b.median_us < best[b.library].median_us):
            best[b.library] = b
    return best


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
    # the device's peak for the family's arithmetic (dense tensor-core rate times the family's flop_rate_factor)
    peak_gflops: float | None = None
    bandwidth_fraction: float
    copy_bandwidth_gbps: float
    best_baseline: str | None = None
    best_baseline_us: float | None = None
    speedup_vs_best: float | None = None
    speedups: dict[str, float] = {}
    # the chosen format's own floor: the arrays the kernel streams (its index bytes and padding included) and the
    # dense operands at copy bandwidth, and its share of the time; None where the kernel declares no streams
    format_floor_us: float | None = None
    format_fraction: float | None = None


class VerificationReport(BaseModel):
    candidate: str
    backend: Literal["gpu", "compile_only"]
    device: dict[str, Any] = {}
    compiled: bool
    resources: dict[str, KernelResources] = {}
    sass: dict[str, SassCounts] = {}
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

    @property
    def tools_deferred(self) -> bool:
        """compute-sanitizer and Nsight Compute were left for later (a faster contender ran beside it): such a
        candidate is never accepted as it stands."""
        sanitizer = self.stage("sanitizer")
        return bool(sanitizer and sanitizer.status == "not_executed" and sanitizer.evidence.get("deferred"))

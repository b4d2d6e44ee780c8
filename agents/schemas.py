"""Each agent's output schema. Offline and LLM policies fill the same models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Strategy(BaseModel):
    """One way to attack the problem: a reference kernel, where to start and which values to search."""

    kernel: str
    start: dict[str, int]
    space: dict[str, list[int]]
    why: str
    # the family's cost model at the start (us), and that times the kernel's calibration from earlier measurements
    predicted_us: float | None = None
    calibrated_us: float | None = None


class Acceptance(BaseModel):
    min_speedup: float = Field(1.0, description="accept only a speedup over the best baseline above this")
    target_speedup: float = Field(description="stop searching once this speedup is reached")

    def acceptable(self, speedup: float | None) -> bool:
        """Whether a measured speedup over the best baseline may be accepted (the one rule every reviewer uses)."""
        return speedup is not None and speedup > self.min_speedup


class Plan(BaseModel):
    family: str
    format: str
    features: dict[str, float]
    # the problem symbols of the spec's main shape (kernel constraints are checked against them)
    symbols: dict[str, int] = {}
    strategies: list[Strategy]
    baselines: list[str]
    acceptance: Acceptance
    notes: str = ""
    # a kernel accepted before for this very problem on this GPU: re-validated first, instead of a search
    reuse: Choice | None = None
    # what the stored kernel already passed (e.g. the sanitizer), so re-validation need not run it again
    reuse_checked: str | None = None
    # per one-parameter step (`kernel:PARAM:from->to`), the best time ratio earlier runs on this GPU measured for it
    # (experience store): the offline search tries the steps that have paid first
    step_ratios: dict[str, float] = {}


class Reference(BaseModel):
    kernel: str
    strategy: str
    summary: str
    # "experience": accepted by an earlier run (params are what it ran with); "library": a reference kernel
    origin: Literal["library", "experience"] = "library"
    params: dict[str, int] = {}


class Passage(BaseModel):
    """A retrieved knowledge-base chunk and its retrieval score."""

    id: str
    title: str
    source: str
    score: float
    text: str


class References(BaseModel):
    kernels: list[Reference]
    passages: list[Passage] = []


class Choice(BaseModel):
    """What the coder should build next: a reference kernel and its parameters."""

    kernel: str
    params: dict[str, int]

    def key(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        """Hashable identity, for the set of choices already tried."""
        return self.kernel, tuple(sorted(self.params.items()))


def tried_choices(iterations: list[dict[str, Any]]) -> set[tuple[str, tuple[tuple[str, int], ...]]]:
    """The keys of every choice a run has verified so far."""
    return {Choice.model_validate(it["choice"]).key() for it in iterations}


def step_key(kernel: str, param: str, from_value: int, to_value: int) -> str:
    """How a plan names one parameter's step (`Plan.step_ratios`): `kernel:PARAM:from->to`."""
    return f"{kernel}:{param}:{from_value}->{to_value}"


def measured_times(iterations: list[dict[str, Any]]) -> dict[tuple[str, tuple[tuple[str, int], ...]], float]:
    """Each choice's median time from its first correct, measured verification, keyed like `tried_choices`."""
    from sparseditto.tools.results import VerificationReport

    times: dict[tuple[str, tuple[tuple[str, int], ...]], float] = {}
    for it in iterations:
        report = VerificationReport.model_validate(it["report"])
        if report.correct and report.measurement:
            times.setdefault(Choice.model_validate(it["choice"]).key(), report.measurement.median_us)
    return times


class Verdict(BaseModel):
    decision: Literal["accept", "revise", "give_up", "compiled_only"]
    diagnosis: str
    direction: str = ""
    next: Choice | None = None
    best_iteration: int | None = None

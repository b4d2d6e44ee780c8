"""Shared fixtures: small specs, made-up verification reports and a scripted test-double Verifier.

GPU tests are marked `gpu` and skipped when no CUDA device is found (sparseditto.tools.device.detect).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.results import Feedback, Measurement, VerificationReport

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

TINY_SPMM = {
    "name": "tiny_spmm",
    "operation": "spmm",
    "pattern": {"distribution": "uniform", "density": 0.05},
    "M": 256,
    "K": 256,
    "N": 32,
    "dtype": "fp32",
}
TINY_SPMV = {
    "name": "tiny_spmv",
    "operation": "spmv",
    "pattern": {"distribution": "uniform", "nnz_per_row": 8},
    "M": 300,
    "K": 200,
    "dtype": "fp32",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from sparseditto.tools.device import detect

    facts = detect()
    if facts.gpu:
        return
    skip = pytest.mark.skip(reason=f"no CUDA device ({facts.gpu_error or 'none found'})")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def machine_has_gpu() -> bool:
    from sparseditto.tools.device import detect

    return detect().gpu is not None


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture
def tiny_spmm_dict() -> dict[str, Any]:
    return {**TINY_SPMM, "pattern": dict(TINY_SPMM["pattern"])}


@pytest.fixture
def tiny_spmm(tiny_spmm_dict: dict[str, Any]) -> Spec:
    return parse_spec(tiny_spmm_dict)


@pytest.fixture
def tiny_spmv() -> Spec:
    return parse_spec({**TINY_SPMV, "pattern": dict(TINY_SPMV["pattern"])})


# ---- made-up, well-formed verification reports ---------------------------------------------------------


def measured_report(label: str, median_us: float = 100.0, speedup: float = 0.8) -> VerificationReport:
    """A candidate that compiled, passed correctness and was timed at `speedup` x the best baseline."""
    baseline_us = median_us * speedup
    return VerificationReport(
        candidate=label,
        backend="gpu",
        device={"name": "Test GPU", "arch": "sm_90"},
        compiled=True,
        feedback=[
            Feedback(stage="compile", status="passed", message="compiled"),
            Feedback(stage="correctness", status="passed", message="3 trials within tolerance"),
            Feedback(stage="benchmark", status="passed", message=f"{median_us:.1f} us"),
        ],
        measurement=Measurement(
            median_us=median_us, p10_us=median_us * 0.95, p90_us=median_us * 1.05, runs=30, preparation_ms=0.0,
            floor_us=20.0, achieved_gbps=900.0, achieved_gflops=50.0, bandwidth_fraction=20.0 / median_us,
            copy_bandwidth_gbps=4300.0, best_baseline="cusparse_csr_alg2", best_baseline_us=baseline_us,
            speedup_vs_best=speedup, speedups={"cusparse": speedup},
        ),
    )


def wrong_report(label: str) -> VerificationReport:
    """A candidate that compiled but computed the wrong result."""
    return VerificationReport(
        candidate=label,
        backend="gpu",
        compiled=True,
        feedback=[
            Feedback(stage="compile", status="passed", message="compiled"),
            Feedback(stage="correctness", status="failed", error_type="wrong_result",
                     message="relative error 0.5 exceeds the tolerance 1e-05", location="shape {'M': 256}, seed 1"),
        ],
    )


@pytest.fixture(name="measured_report")
def _measured_report() -> Callable[..., VerificationReport]:
    return measured_report


@pytest.fixture(name="wrong_report")
def _wrong_report() -> Callable[[str], VerificationReport]:
    return wrong_report


class ScriptedVerifier:
    """Test double for the tool node's Verifier: `outcome(candidate, call_number)` makes each report."""

    backend = "gpu"

    def __init__(self, outcome: Callable[[KernelCandidate, int], VerificationReport]) -> None:
        self.outcome = outcome
        self.calls: list[str] = []
        self.ahead: list[list[str]] = []  # per call, the candidates offered to run ahead

    def verify(self, candidate: KernelCandidate, spec: Spec, best_us: float | None = None,
               already_checked: str | None = None, ahead: Sequence[KernelCandidate] = ()) -> VerificationReport:
        self.calls.append(candidate.label())
        self.ahead.append([c.label() for c in ahead])
        return self.outcome(candidate, len(self.calls))


@pytest.fixture
def scripted_verifier() -> Callable[..., ScriptedVerifier]:
    """Factory: scripted_verifier(speedup=0.8) -> every candidate correct, `speedup` x the baseline,
    a little faster at each call; scripted_verifier(outcome=fn) for any other script."""

    def make(speedup: float = 0.8, outcome: Callable[[KernelCandidate, int], VerificationReport] | None = None) -> ScriptedVerifier:
        if outcome is None:
            def outcome(candidate: KernelCandidate, n: int) -> VerificationReport:
                return measured_report(candidate.label(), median_us=100.0 - n, speedup=speedup)
        return ScriptedVerifier(outcome)

    return make


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """The `sparseditto` command in-process (typer's CliRunner); its log setup is skipped, since it would
    bind the loggers to the runner's captured stream."""
    from typer.testing import CliRunner

    from sparseditto import cli as cli_module

    monkeypatch.setattr(cli_module, "configure_logging", lambda verbose: None)
    return lambda *args: CliRunner().invoke(cli_module.app, [str(a) for a in args])

"""Spec records made by hand for the metrics, report and compare tests, and the recorded H200 result."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparseditto.evals.records import SpecRecord

FIXTURES = Path(__file__).parent / "fixtures"


def record(spec_id: str, correctness: str = "correct", speedups: dict[str, float] | None = None,
           status: str | None = None, **fields: Any) -> SpecRecord:
    """A record of suite "t"; a correct one gets a kernel time and its speedup against the fastest baseline."""
    speedups = speedups or {}
    measured = correctness == "correct"
    defaults: dict[str, Any] = dict(
        suite="t", spec_id=spec_id, policy="offline", status=status or ("accepted" if measured else "failed"),
        correctness=correctness, speedups=speedups, seconds=10.0, iterations=3,
        best_iteration=2 if correctness != "no_kernel" else None,
        seconds_to_best=6.0 if correctness != "no_kernel" else None,
        median_us=100.0 if measured else None,
        speedup_vs_best=min(speedups.values()) if measured and speedups else None,
        bandwidth_fraction=0.2 if measured else None,
    )
    return SpecRecord(**{**defaults, **fields})


@pytest.fixture
def make_record() -> Callable[..., SpecRecord]:
    return record


@pytest.fixture
def h200_result() -> dict[str, Any]:
    """The result.json of a real run on the H200: CSR SpMV fp32, 1M x 1M, 16 per row, accepted at iteration 1."""
    return json.loads((FIXTURES / "h200_spmv_fp32_uniform_result.json").read_text())

"""Correctness of a candidate's output against the float64 reference, and how a failed trial failed.

Pure NumPy, so the rules are tested without a GPU; the runner applies them to every trial.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sparseditto.tools.results import ErrorType, Trial

# below this relative error, an error spread over the whole output is coarse arithmetic, not a logic error
PRECISION_LOSS_MAX = 0.05


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref||: a zero or constant output is far off, whatever the result's magnitude."""
    if not np.isfinite(out).all():
        return float("inf")
    denom = float(np.linalg.norm(ref)) or 1.0
    return float(np.linalg.norm(out - ref) / denom)


def error_is_spread(out: np.ndarray, ref: np.ndarray) -> bool:
    """True when the error is spread over the output (coarse arithmetic), not concentrated (a logic error)."""
    diff = np.abs(out - ref).ravel()
    rms = float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0
    return rms > 0 and float(diff.max()) <= 8 * rms


def classify_failure(trials: list[Trial], failed: Trial, outputs: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]],
                     tolerances: Mapping[str, float]) -> tuple[ErrorType, str]:
    """Name the way a failed trial failed, so that the feedback says what to fix. `outputs[i][name]` is trial
    i's (output, reference) of each output; the failed trial's first failing output is judged."""
    if not failed.inputs_unchanged:
        return "input_mutation", "the kernel modified one of its inputs"
    main = [t for t in trials if not t.held_out]
    if failed.held_out and all(t.passed for t in main):
        what = (f"{failed.unwritten} elements never written" if failed.unwritten
                else f"relative error {failed.rel_error:.3g}" if failed.rel_error is not None else "NaN/Inf written")
        return "held_out_failure", f"correct at the tuned shape but wrong at held-out shape {failed.shape}: {what}"
    if failed.unwritten:
        return "unwritten_output", f"{failed.unwritten} output elements were never written (they still hold the poison)"
    if failed.non_finite:
        return "non_finite_output", f"the kernel wrote {failed.non_finite} NaN/Inf elements"
    name = failed.failed_output or next(iter(outputs[trials.index(failed)]))
    tol = tolerances[name]
    index = trials.index(failed)
    out, ref = outputs[index][name]
    err = failed.errors.get(name, failed.rel_error)
    earlier = [outputs[i][name][1] for i in range(index) if name in outputs[i] and outputs[i][name][1].shape == out.shape]
    if any(rel_error(out, prev) <= tol for prev in earlier):
        return "stale_result", f"{name} equals an earlier trial's answer: results are reused across calls instead of computed"
    if failed.order == "library_first" and all(t.passed for t in main if t.order != "library_first"):
        return "order_dependent", "correct when run first, wrong when the library ran just before it on the same inputs"
    if err is not None and err <= PRECISION_LOSS_MAX and error_is_spread(out, ref):
        return "precision_loss", f"{name}: relative error {err:.3g} is spread over the output, above the tolerance {tol:.1g}: arithmetic too coarse"
    return "wrong_result", f"{name}: relative error {err:.3g} exceeds the tolerance {tol:.1g}" if err is not None else f"{name}: wrong result"

"""Correctness of a candidate's output against the float64 reference, and how a failed trial failed.

Pure NumPy, so the rules are tested without a GPU; the runner applies them to every trial. A multilinear
family's outputs are judged element by element against bounds from each element's own terms
(tools/values.py); other families' norm-wise by their tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparseditto.tools import chunks
from sparseditto.tools.results import ErrorType, Trial
from sparseditto.tools.values import ElementBounds, element_ok

# below this relative error, an error spread over the whole output is coarse arithmetic, not a logic error
PRECISION_LOSS_MAX = 0.05
# a failing element off by at most this fraction of its value (median over the failing ones): coarse arithmetic
ELEMENT_PRECISION_LOSS_MAX = 0.5
# failing elements off by less than this fraction of the output's median magnitude: small terms dropped
TINY_NEXT_TO_TYPICAL = 1e-3


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


@dataclass
class CheckedOutput:
    """One output of one run against its reference. `failing`: the elements outside their bound (element-wise
    families) or None (norm-wise); unwritten elements always fail. `non_finite`: the written elements that are NaN
    or Inf where the exact result is finite."""

    out: np.ndarray
    ref: np.ndarray
    tolerance: float
    unwritten: np.ndarray
    bounds: ElementBounds | None = None
    failing: np.ndarray | None = None
    rel_error: float = 0.0
    passed: bool = True
    non_finite: int = 0

    @classmethod
    def judge(cls, out: np.ndarray, ref: np.ndarray, tolerance: float, unwritten: np.ndarray,
              bounds: ElementBounds | None, largest: float) -> "CheckedOutput":
        """The relative error over the elements whose exact result is finite (rel_error), and each element against
        its bound, in one pass over blocks of rows on threads."""
        failing = None if bounds is None else np.empty(out.shape, dtype=bool)
        sums: dict[int, tuple[float, float, int]] = {}

        def block(i: int, start: int, stop: int) -> None:
            o, r, u = out[start:stop], ref[start:stop], unwritten[start:stop]
            finite = np.isfinite(r)
            fo, fr = (o, r) if finite.all() else (np.where(finite, o, 0), np.where(finite, r, 0))
            bad = ~np.isfinite(fo)
            diff = fo - fr
            sums[i] = (float(np.vdot(fr, fr)), np.inf if bad.any() else float(np.vdot(diff, diff)), int((bad & ~u).sum()))
            if failing is not None:
                np.logical_or(~element_ok(o, r, bounds.bound[start:stop], largest), u, out=failing[start:stop])

        chunks.in_row_blocks(out.shape, block, chunks.ELEMENTWISE)
        ref_sq, err_sq, non_finite = (sum(part[k] for _, part in sorted(sums.items())) for k in range(3))
        err = float(np.sqrt(err_sq) / (float(np.sqrt(ref_sq)) or 1.0))
        passed = (bool(err <= tolerance) and not unwritten.any()) if failing is None else not failing.any()
        return cls(out, ref, tolerance, unwritten, bounds, failing, err, passed, non_finite)

    @property
    def exceeded(self) -> int:
        return int(self.failing.sum()) if self.failing is not None else int(not self.passed)

    def worst_index(self) -> int:
        """The element furthest outside its bound (or from the reference, norm-wise)."""
        with np.errstate(invalid="ignore"):
            diff = np.where(np.isfinite(self.out) & np.isfinite(self.ref), np.abs(self.out - self.ref), np.inf)
            if self.failing is not None:
                diff = np.where(self.failing, diff / np.maximum(self.bounds.bound, 1e-300), -1.0)
        return int(np.argmax(np.nan_to_num(diff, nan=np.inf)))


def _coarse(checked: CheckedOutput) -> tuple[bool, str]:
    """Whether a failing output looks like arithmetic too coarse (rather than wrong), and why."""
    if checked.failing is None:
        return (checked.rel_error <= PRECISION_LOSS_MAX and error_is_spread(checked.out, checked.ref),
                f"relative error {checked.rel_error:.3g} is spread over the output, above the tolerance {checked.tolerance:.1g}")
    failing = checked.failing
    if checked.bounds is not None and checked.bounds.subnormal[failing].all():
        return True, (f"{int(failing.sum())} elements whose exact results lie in the subnormal range are wrong: "
                      "subnormals flushed to zero or lost")
    with np.errstate(divide="ignore", invalid="ignore"):
        errors = np.abs(checked.out[failing] - checked.ref[failing])
        relative = errors / np.abs(checked.ref[failing])
    median = float(np.median(relative)) if relative.size else np.inf
    finite = np.abs(checked.ref[np.isfinite(checked.ref)])
    typical = float(np.median(finite)) if finite.size else 0.0
    if errors.size and float(np.median(errors)) <= TINY_NEXT_TO_TYPICAL * typical:
        return True, (f"{int(failing.sum())} of {failing.size} elements are wrong by amounts tiny next to the output's "
                      f"typical values (median error {float(np.median(errors)):.2g} against {typical:.2g}): small terms "
                      "or subnormals dropped")
    return (median <= ELEMENT_PRECISION_LOSS_MAX,
            f"{int(failing.sum())} of {failing.size} elements exceed the error their own terms allow in the promised "
            f"accumulation (median relative error of those {median:.2g})")


def classify_failure(trials: list[Trial], failed: Trial, outputs: dict[int, dict[str, CheckedOutput]]) -> tuple[ErrorType, str]:
    """Name the way a failed trial failed, so that the feedback says what to fix. `outputs[i][name]` is trial
    i's judged output `name`; the failed trial's first failing output is judged."""
    if not failed.inputs_unchanged:
        return "input_mutation", "the kernel modified one of its inputs"
    index = trials.index(failed)
    name = failed.failed_output or next(iter(outputs[index]))
    checked = outputs[index][name]
    main = [t for t in trials if not t.held_out]
    if failed.held_out and all(t.passed for t in main):
        what = (f"{failed.unwritten} elements never written" if failed.unwritten
                else f"{checked.exceeded} elements outside their bounds, relative error {checked.rel_error:.3g}")
        return "held_out_failure", f"correct at the tuned shape but wrong at held-out shape {failed.shape}: {what}"
    if failed.unwritten:
        return "unwritten_output", f"{failed.unwritten} output elements were never written (they still hold the poison)"
    finite_ref = np.isfinite(checked.ref)
    if failed.non_finite:
        return "non_finite_output", f"the kernel wrote {failed.non_finite} NaN/Inf elements where the exact result is finite"
    if checked.failing is not None and (checked.failing & ~finite_ref).any():
        n = int((checked.failing & ~finite_ref).sum())
        return "special_value_mismatch", (f"{name}: {n} elements whose exact result is NaN or Inf (from NaN/Inf inputs) "
                                          "are not: IEEE special values must propagate through the products and sums")
    earlier = [outputs[i][name].ref for i in range(index) if name in outputs[i] and outputs[i][name].ref.shape == checked.out.shape]
    if any(rel_error(checked.out, prev) <= checked.tolerance for prev in earlier):
        return "stale_result", f"{name} equals an earlier trial's answer: results are reused across calls instead of computed"
    if failed.order == "library_first" and all(t.passed for t in main if t.order != "library_first"):
        return "order_dependent", "correct when run first, wrong when the library ran just before it on the same inputs"
    coarse, why = _coarse(checked)
    if coarse:
        return "precision_loss", f"{name}: {why}: arithmetic too coarse"
    if checked.failing is not None:
        return "wrong_result", f"{name}: {checked.exceeded} of {checked.failing.size} elements wrong (relative error {checked.rel_error:.3g})"
    return "wrong_result", f"{name}: relative error {checked.rel_error:.3g} exceeds the tolerance {checked.tolerance:.1g}"

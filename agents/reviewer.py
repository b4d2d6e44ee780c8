"""Reviewer: the tool results so far -> one verdict (accept, revise with one direction, give up).

The offline policy measures the top of the planner's ranking first (the strategies predicted within
CONTENDER_FACTOR of the fastest), then a coordinate search: from the best correct candidate so far it tries one
neighbouring value of one parameter at a time (first the steps that earlier runs on this GPU measured as paying,
then untried ones in the kernel's declared order), then the plan's next strategy, until PATIENCE candidates in a
row bring nothing better; it accepts once the
target speedup over the best baseline is reached, or when the search or the budget is exhausted and
the best candidate is faster than every baseline. Otherwise a spent budget goes to the human gate.
"""

from __future__ import annotations

from typing import Any

from sparseditto.agents.planner import is_valid_choice
from sparseditto.agents.schemas import Choice, Plan, Verdict, step_key, tried_choices
from sparseditto.tools.results import VerificationReport


def best_iteration(iterations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest correct, measured iteration whose sanitizer and profiler were not left for later (or, without a
    GPU, the first one that compiled)."""
    reports = [(it, VerificationReport.model_validate(it["report"])) for it in iterations]
    if any(report.measurement for _, report in reports):
        measured = [it for it, report in reports if report.correct and report.measurement and not report.tools_deferred]
        return min(measured, key=lambda it: it["report"]["measurement"]["median_us"]) if measured else None
    compiled = [it for it in iterations if it["report"]["compiled"] and not any(
        f["status"] in {"failed", "error"} for f in it["report"]["feedback"])]
    return compiled[0] if compiled else None


def measured_speedup(iteration: dict[str, Any] | None) -> float | None:
    """An iteration's speedup over the best baseline, when it was measured against one."""
    report = VerificationReport.model_validate(iteration["report"]) if iteration else None
    return report.measurement.speedup_vs_best if report and report.measurement else None


def describe(report: VerificationReport) -> str:
    """One line on the outcome of a candidate: its first failure, or its speed against the baseline."""
    failure = next((f for f in report.feedback if f.status in {"failed", "error"}), None)
    if failure:
        where = f" at {failure.location}" if failure.location else ""
        return f"{failure.stage} failed ({failure.error_type}){where}: {failure.message}"
    m = report.measurement
    if m is None:
        return "compiled; GPU stages not executed"
    vs = f", {m.speedup_vs_best:.2f}x vs {m.best_baseline} ({m.best_baseline_us:.1f} us)" if m.speedup_vs_best else ""
    profile = report.stage("profile")
    why = ""
    if profile is not None and profile.status == "passed":
        metrics = ", ".join(f"{k} {v:g}" for k, v in profile.evidence.get("key_metrics", {}).items())
        why = f"; {profile.evidence.get('bottleneck')}-bound ({metrics})"
    return f"{m.median_us:.1f} us, {m.bandwidth_fraction:.0%} of the bandwidth floor{vs}{why}"


# the worth assumed of a step no earlier run measured: tried before steps measured as no better than 2% faster
UNTRIED_STEP_RATIO = 0.98


def _neighbours(plan: Plan, choice: Choice, dtype: str) -> list[Choice]:
    """One parameter moved by one step in its declared values, keeping the kernel's constraints; the steps earlier
    runs measured as paying most first (`Plan.step_ratios`), then untried ones, in declared order among equals."""
    strategy = next((s for s in plan.strategies if s.kernel == choice.kernel), None)
    if strategy is None:  # a kernel the LLM coder wrote: it has no search space
        return []
    out: list[tuple[float, Choice]] = []
    for name, values in strategy.space.items():
        if choice.params.get(name) not in values:
            continue
        i = values.index(choice.params[name])
        for j in (i + 1, i - 1):
            if 0 <= j < len(values):
                params = {**choice.params, name: values[j]}
                if is_valid_choice(choice.kernel, params, dtype, plan.symbols):
                    worth = plan.step_ratios.get(step_key(choice.kernel, name, values[i], values[j]), UNTRIED_STEP_RATIO)
                    out.append((worth, Choice(kernel=choice.kernel, params=params)))
    return [c for _, c in sorted(out, key=lambda wc: wc[0])]


# strategies whose calibrated prediction is within this factor of the best one are measured before any tuning
CONTENDER_FACTOR = 1.3
CONTENDERS = 3
# once the contenders are measured, this many candidates in a row that do not beat the best end the search (as if
# exhausted): a search that has stalled spends the rest of the budget's device time for little
PATIENCE = 3


def contenders(plan: Plan) -> list[Choice]:
    """The starts to measure before tuning: the top of the cost model's ranking (up to CONTENDERS predicted within
    CONTENDER_FACTOR of the fastest), or the first strategy when the family predicts nothing."""
    predicted = [s.calibrated_us for s in plan.strategies]
    if not plan.strategies or any(p is None for p in predicted):
        return [Choice(kernel=s.kernel, params=s.start) for s in plan.strategies[:1]]
    fastest = min(predicted)
    return [Choice(kernel=s.kernel, params=s.start) for s in plan.strategies
            if s.calibrated_us <= CONTENDER_FACTOR * fastest][:CONTENDERS]


def contenders_ahead(plan: Plan, iterations: list[dict[str, Any]], current: Choice, left: int) -> list[Choice]:
    """The contenders the offline review will ask for after `current`, at most `left` (the iterations the budget
    leaves after this one): what may be verified ahead, beside `current`."""
    tried = tried_choices(iterations) | {current.key()}
    return [c for c in contenders(plan) if c.key() not in tried][:max(left, 0)]


def offline_review(plan: Plan, iterations: list[dict[str, Any]], dtype: str, backend: str, budget_left: bool = True) -> Verdict:
    """`budget_left` False means this is the last verdict the budget allows: accept the best if it beats the baselines."""
    last = VerificationReport.model_validate(iterations[-1]["report"])
    tried = tried_choices(iterations)
    best = best_iteration(iterations)
    diagnosis = describe(last)
    untried_starts = [c for c in (Choice(kernel=s.kernel, params=s.start) for s in plan.strategies) if c.key() not in tried]

    if backend == "compile_only":
        if untried_starts and budget_left:
            nxt = untried_starts[0]
            return Verdict(decision="revise", diagnosis=diagnosis, direction=f"compile the {nxt.kernel} strategy too", next=nxt,
                           best_iteration=best["iteration"] if best else None)
        return Verdict(decision="compiled_only", diagnosis="no CUDA device: candidates compiled, nothing executed",
                       best_iteration=best["iteration"] if best else None)

    speedup = measured_speedup(best)
    last_speedup = (last.measurement.speedup_vs_best or 0.0) if last.measurement else 0.0
    if (plan.reuse is not None and Choice.model_validate(iterations[-1]["choice"]) == plan.reuse and last.correct
            and plan.acceptance.acceptable(last_speedup)):
        return Verdict(decision="accept", diagnosis=f"stored kernel re-validated: {diagnosis}",
                       best_iteration=iterations[-1]["iteration"])
    if speedup is not None and speedup >= plan.acceptance.target_speedup:
        return Verdict(decision="accept", diagnosis=f"{diagnosis}; target {plan.acceptance.target_speedup}x reached",
                       best_iteration=best["iteration"])

    if not budget_left and plan.acceptance.acceptable(speedup):
        return Verdict(decision="accept", diagnosis=f"budget spent; best is {speedup:.2f}x the best baseline "
                       f"(target {plan.acceptance.target_speedup}x not reached)", best_iteration=best["iteration"])
    centre = Choice.model_validate(best["choice"]) if best and best["report"].get("measurement") else None
    first = [c for c in contenders(plan) if c.key() not in tried]
    candidates = first + (_neighbours(plan, centre, dtype) if centre else []) + untried_starts
    nxt = next((c for c in candidates if c.key() not in tried), None)
    stalled = not first and centre is not None and len(iterations) - best["iteration"] >= PATIENCE
    if nxt is None or stalled:
        how = f"no better candidate in the last {PATIENCE}" if stalled and nxt is not None else "search exhausted"
        if plan.acceptance.acceptable(speedup):
            return Verdict(decision="accept", diagnosis=f"{how}; best is {speedup:.2f}x the best baseline",
                           best_iteration=best["iteration"])
        return Verdict(decision="give_up", diagnosis=f"{how}, without beating the best baseline; last: {diagnosis}",
                       best_iteration=best["iteration"] if best else None)
    changed = {k: v for k, v in nxt.params.items() if centre is None or nxt.kernel != centre.kernel or centre.params.get(k) != v}
    direction = (f"try {', '.join(f'{k}={v}' for k, v in changed.items())} on {nxt.kernel}"
                 if centre and nxt.kernel == centre.kernel else f"switch strategy to {nxt.kernel}")
    return Verdict(decision="revise", diagnosis=diagnosis, direction=direction, next=nxt,
                   best_iteration=best["iteration"] if best else None)

"""LLM reviewer: the latest tool results -> the same `Verdict` as the offline reviewer.

The model sees a one-line history, then the latest candidate's stages, timings, sanitizer findings and
the few profiler metrics the verifier selected, and names one bottleneck and one direction. It cannot
accept what was not measured: acceptance is checked against the measurements here.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from sparseditto.agents.llm_planner import check_choice, spec_text
from sparseditto.agents.llm_prompts import prompt
from sparseditto.agents.llm_schemas import ReviewAnswer
from sparseditto.agents.llm_structured import Answer, ask, schema_instructions
from sparseditto.agents.reviewer import best_iteration, describe, measured_speedup
from sparseditto.agents.schemas import Choice, Plan, Verdict
from sparseditto.settings import Settings
from sparseditto.spec import Spec
from sparseditto.tools.results import VerificationReport


def history_text(iterations: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> str:
    lines = []
    for n, it in enumerate(iterations):
        line = f"{it['iteration']}. {it['candidate']}: {describe(VerificationReport.model_validate(it['report']))}"
        if n < len(verdicts) and verdicts[n].get("direction"):
            line += f" -> {verdicts[n]['direction']}"
        lines.append(line)
    return "\n".join(lines)


# what the reviewer sees of each stage's evidence: the findings and the few metrics, not the full profile
_EVIDENCE = {"sanitizer": ("findings", "total"), "profile": ("bottleneck", "key_metrics", "top_stalls", "baseline")}


def results_text(report: VerificationReport) -> str:
    """Each stage in a line; timings against the baselines; sanitizer findings and profiler metrics with evidence."""
    lines = []
    for f in report.feedback:
        line = f"- {f.stage}: {f.status}" + (f" ({f.error_type})" if f.error_type else "") + (f": {f.message}" if f.message else "")
        line += f" at {f.location}" if f.location else ""
        lines.append(line)
        selected = {k: f.evidence[k] for k in _EVIDENCE.get(f.stage, ()) if k in f.evidence}
        if selected:
            lines.append(f"  {f.stage} evidence: {json.dumps(selected)[:1500]}")
    for entry, r in report.resources.items():
        lines.append(f"- {entry}: {r.registers} registers, {r.shared_bytes} static shared bytes, spills {r.spill_stores}/{r.spill_loads}")
    if report.measurement:
        m = report.measurement
        lines.append(f"- median {m.median_us:.1f} us (p10 {m.p10_us:.1f}, p90 {m.p90_us:.1f}); bandwidth floor {m.floor_us:.1f} us, "
                     f"{m.bandwidth_fraction:.0%} reached ({m.achieved_gbps:.0f} GB/s); {m.achieved_gflops:.0f} GFLOP/s")
        lines += [f"- baseline {b.name} ({b.library}, {b.config}): {b.median_us:.1f} us"
                  for b in sorted(report.baselines, key=lambda b: b.median_us)[:4]]
        if m.speedup_vs_best is not None:
            lines.append(f"- speedup against the best baseline ({m.best_baseline}): {m.speedup_vs_best:.2f}x")
    return "\n".join(lines)


def reviewer_messages(spec: Spec, plan: Plan, iterations: list[dict[str, Any]], verdicts: list[dict[str, Any]],
                      budget_left: bool, method: str) -> list[BaseMessage]:
    last = VerificationReport.model_validate(iterations[-1]["report"])
    best = best_iteration(iterations)
    budget = ("The budget allows more iterations." if budget_left else
              "This is the last verdict the budget allows: accept the best if it beats the baselines.")
    if best:
        budget += f" The best candidate so far is iteration {best['iteration']}."
    return prompt("reviewer", schema_instructions(ReviewAnswer) if method == "json_mode" else "",
                  spec=spec_text(spec), acceptance=plan.acceptance.model_dump_json(),
                  plan="\n".join(f"- {s.kernel}: start {json.dumps(s.start)}, search {json.dumps(s.space)}" for s in plan.strategies),
                  history=history_text(iterations, verdicts), candidate=iterations[-1]["candidate"],
                  results=results_text(last), budget=budget)


def to_verdict(answer: ReviewAnswer, spec: Spec, plan: Plan, iterations: list[dict[str, Any]]) -> Verdict:
    best = best_iteration(iterations)
    best_no = best["iteration"] if best else None
    backend = iterations[-1]["backend"]
    if answer.decision == "accept":
        speedup = measured_speedup(best)
        if not plan.acceptance.acceptable(speedup):
            raise ValueError(f"decision: accept needs a correct, measured candidate faster than the best baseline "
                             f"(more than {plan.acceptance.min_speedup}x); there is none yet: revise or stop")
        return Verdict(decision="accept", diagnosis=answer.bottleneck, best_iteration=best_no)
    if answer.decision == "stop":
        return Verdict(decision="compiled_only" if backend == "compile_only" else "give_up",
                       diagnosis=answer.bottleneck, best_iteration=best_no)
    if not answer.direction.strip():
        raise ValueError("direction: a revise verdict needs one concrete direction for the coder")
    nxt = None
    if answer.next is not None:
        check_choice(answer.next, spec, "next")
        nxt = Choice(kernel=answer.next.kernel, params=answer.next.params)
    return Verdict(decision="revise", diagnosis=answer.bottleneck, direction=answer.direction, next=nxt, best_iteration=best_no)


def llm_review(model: BaseChatModel, settings: Settings, spec: Spec, plan: Plan, iterations: list[dict[str, Any]],
               verdicts: list[dict[str, Any]], budget_left: bool) -> Answer[Verdict]:
    messages = reviewer_messages(spec, plan, iterations, verdicts, budget_left, settings.llm_output_method)
    return ask(model, ReviewAnswer, messages, lambda a: to_verdict(a, spec, plan, iterations),
               method=settings.llm_output_method, repair_attempts=settings.llm_repair_attempts)

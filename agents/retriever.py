"""Retriever: plan -> what is already known about it: stored kernels, reference kernels, doc passages.

Experience comes first. A kernel accepted before for this very problem on this GPU becomes the plan's
`reuse` (the coder builds it first and the reviewer accepts it once re-validated); a kernel accepted
for a similar problem (same family and dtype) becomes the first reference and, when its parameters fit
the strategy's search space, that strategy's start. Then the plan's reference kernels, and the BM25
passages that best match the plan, as many as fit the context budget.
"""

from __future__ import annotations

from typing import Any

import structlog

from sparseditto.agents.schemas import Choice, Passage, Plan, Reference, References
from sparseditto.knowledge_base.experience import Experience, ExperienceStore
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.knowledge_base.retrieval import Filters, PlanMatch, search
from sparseditto.errors import SparseDittoError
from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.device import detect
from sparseditto.tools.families import get_family

log = structlog.get_logger(__name__)

PASSAGE_CANDIDATES = 12


def gpu_identity(compile_only: bool) -> dict[str, Any] | None:
    """The GPU this run will measure on (name, arch), or None when nothing will run on a GPU."""
    return None if compile_only else detect().gpu


def plan_query(plan: Plan, spec: Spec) -> str:
    """The question the plan asks of the knowledge base, in its own words."""
    parts = [spec.operation, plan.format, plan.family, spec.dtype, spec.arch or ""]
    for s in plan.strategies:
        parts += [s.kernel, get_kernel(s.kernel).strategy.replace("_", " "), s.why]
    return " ".join(p for p in parts if p)


def _fits(plan: Plan, exp: Experience, in_space: bool) -> bool:
    """The stored choice is one of the plan's kernels with parameters it allows."""
    strategy = next((s for s in plan.strategies if s.kernel == exp.choice.kernel), None)
    if strategy is None or set(exp.choice.params) != set(strategy.start):
        return False
    allowed = strategy.space if in_space else get_kernel(exp.choice.kernel).parameters
    return all(v in allowed.get(k, ()) for k, v in exp.choice.params.items())


def _experience_ref(exp: Experience, why: str) -> Reference:
    m = exp.measurement
    measured = f"{m.get('median_us', 0):.1f} us, {m.get('speedup_vs_best') or 0:.2f}x vs {m.get('best_baseline')}"
    return Reference(kernel=exp.choice.kernel, strategy=get_kernel(exp.choice.kernel).strategy, origin="experience",
                     params=exp.choice.params,
                     summary=f"{why}: accepted for {exp.spec.get('name')} on {exp.gpu_name} ({measured}), run {exp.run_id}")


def _already_checked(exp: Experience) -> str | None:
    """Said only when the stored kernel did pass the sanitizer and the profiler when it was accepted."""
    if exp.checks.get("sanitizer") != "passed" or exp.checks.get("profile") != "passed":
        return None
    return f"the stored kernel passed compute-sanitizer and was profiled in run {exp.run_id} on {exp.gpu_name}"


# a similar problem's kernel goes first, at its accepted parameters, only if the cost model prices it there within
# this factor of its fastest start (the planner's target for a first candidate: within 15% of the best). The store's
# "similar" is the nearest entry of the family and dtype, however far: in a suite of unrelated matrices the previous
# matrix's kernel went first at 12x the model's best price and measured 5.6x slower (session 10); at 1.5x, priced
# at its kernel's start rather than its own parameters, the previous matrix's GROUP 8 went first on a matrix of
# 3-nonzero rows and measured 4.3x slower, and CSR went first on two stencils where DIA measured 1.2-1.6x faster
# (session 11)
PLAUSIBLE_FACTOR = 1.15


def _plausible(plan: Plan, spec: Spec, choice: Choice) -> bool:
    """Whether the cost model, calibrated like the plan's strategies, prices `choice` within PLAUSIBLE_FACTOR of the
    plan's fastest start (True when the family prices nothing)."""
    prices = {s.kernel: (s.predicted_us, s.calibrated_us) for s in plan.strategies}
    if not prices or any(p is None or c is None for p, c in prices.values()):
        return True
    if choice.kernel not in prices:
        return False
    own = get_family(plan.family).predicted_us(spec, plan.features, choice.kernel, choice.params)
    if own is None:
        return True
    predicted, calibrated = prices[choice.kernel]
    return own * calibrated / predicted <= PLAUSIBLE_FACTOR * min(c for _, c in prices.values())


def _carried(plan: Plan, spec: Spec, exp: Experience) -> Experience:
    """The similar problem's entry with its parameters as they carry to this spec (the family's `carried_params`
    against the plan's start of that kernel); as stored where the plan has no such kernel or the stored spec no
    longer validates."""
    strategy = next((s for s in plan.strategies if s.kernel == exp.choice.kernel), None)
    if strategy is None:
        return exp
    try:
        other = parse_spec(exp.spec)
    except SparseDittoError:
        return exp
    params = get_family(plan.family).carried_params(spec, other, exp.choice.params, strategy.start)
    return exp.model_copy(update={"choice": exp.choice.model_copy(update={"params": params})})


def _with_experience(plan: Plan, spec: Spec, gpu: dict[str, Any] | None, store: ExperienceStore) -> tuple[Plan, list[Reference]]:
    refs: list[Reference] = []
    exact = store.exact(spec, gpu) if gpu else None
    if exact and _fits(plan, exact, in_space=False):
        plan = plan.model_copy(update={"reuse": exact.choice, "reuse_checked": _already_checked(exact)})
        refs.append(_experience_ref(exact, "same problem, same GPU"))
    carried = ((stored, _carried(plan, spec, stored)) for stored in store.similar(spec, gpu))
    stored, similar = next(((stored, e) for stored, e in carried
                            if _fits(plan, e, in_space=True) and _plausible(plan, spec, e.choice)), (None, None))
    if similar:
        # the kernel accepted for a similar problem goes first, from its accepted parameters: a measurement on a
        # neighbour outranks the cost model's guess, where the model does not price that kernel far off the best
        changed = {k: v for k, v in similar.choice.params.items() if stored.choice.params.get(k) != v}
        why = f"starts from the kernel accepted for {similar.spec.get('name')}" + (
            f", with this shape's {', '.join(f'{k}={v}' for k, v in sorted(changed.items()))}" if changed else "")
        strategies = [s.model_copy(update={"start": dict(similar.choice.params), "why": f"{s.why}; {why}"})
                      if s.kernel == similar.choice.kernel else s for s in plan.strategies]
        strategies.sort(key=lambda s: s.kernel != similar.choice.kernel)
        plan = plan.model_copy(update={"strategies": strategies})
        refs.append(_experience_ref(stored, "similar problem"))
    return plan, refs


def _calibrated(plan: Plan, gpu: dict[str, Any] | None, store: ExperienceStore) -> Plan:
    """The cost model's predictions times each kernel's calibration on this GPU, and the strategies re-ranked by
    them (a family that predicts nothing keeps its order)."""
    if not gpu or any(s.predicted_us is None for s in plan.strategies):
        return plan
    factors = store.calibration(plan.family, gpu["name"])
    if not factors:
        return plan
    strategies = [s.model_copy(update={"calibrated_us": s.predicted_us * factors.get(s.kernel, 1.0)})
                  for s in plan.strategies]
    return plan.model_copy(update={"strategies": sorted(strategies, key=lambda s: s.calibrated_us)})


def _with_steps(plan: Plan, spec: Spec, gpu: dict[str, Any] | None, store: ExperienceStore) -> Plan:
    """The one-parameter steps earlier runs measured on this GPU, for the search to order its neighbours by."""
    if not gpu:
        return plan
    return plan.model_copy(update={"step_ratios": store.step_ratios(plan.family, spec.dtype, gpu["name"])})


def _passages(plan: Plan, spec: Spec, context_chars: int) -> list[Passage]:
    hits = search(plan_query(plan, spec), Filters(family=plan.family, arch=spec.arch, dtype=spec.dtype),
                  k=PASSAGE_CANDIDATES,
                  plan=PlanMatch(operation=spec.operation, format=plan.format, dtype=spec.dtype, family=plan.family,
                                 kernels=[s.kernel for s in plan.strategies]))
    out, used = [], 0
    for hit in hits:
        if used + len(hit.text) > context_chars:
            continue
        out.append(Passage(id=hit.id, title=hit.title, source=hit.source, score=hit.score, text=hit.text))
        used += len(hit.text)
    return out


def retrieve(plan: Plan, spec: Spec, gpu: dict[str, Any] | None, store: ExperienceStore, context_chars: int) -> tuple[Plan, References]:
    """The plan refined by experience, and the references for the coder (and an LLM planner's revisions)."""
    plan, stored = _with_experience(_with_steps(_calibrated(plan, gpu, store), spec, gpu, store), spec, gpu, store)
    library = [Reference(kernel=s.kernel, strategy=get_kernel(s.kernel).strategy, summary=get_kernel(s.kernel).summary.strip())
               for s in plan.strategies]
    refs = References(kernels=stored + library, passages=_passages(plan, spec, context_chars))
    log.info("retrieved", reuse=plan.reuse is not None, kernels=[r.kernel for r in refs.kernels],
             passages=[p.id for p in refs.passages])
    return plan, refs


def references_markdown(refs: dict[str, Any]) -> list[str]:
    """The report's section on what was retrieved: kernels (with their origin) and passages with scores."""
    parsed = References.model_validate(refs)
    lines = ["## Retrieved", "", "| kernel | origin | note |", "|---|---|---|"]
    for r in parsed.kernels:
        params = f"({', '.join(f'{k}={v}' for k, v in sorted(r.params.items()))})" if r.params else ""
        note = r.summary.replace("|", "/").replace("\n", " ")
        lines.append(f"| `{r.kernel}{params}` | {r.origin} | {note[:160]} |")
    if parsed.passages:
        lines += ["", "| passage | source | score |", "|---|---|---|"]
        lines += [f"| {p.id} | {p.source} | {p.score:.2f} |" for p in parsed.passages]
    return lines + [""]

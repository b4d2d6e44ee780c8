"""LLM coder: plan, references, the contract, the previous candidate and its feedback -> a candidate.

Only the last candidate and its feedback go into the prompt, not the whole history. The answer is
data: a reference kernel re-parameterised, or new device source with a declarative launch. It becomes a
`KernelCandidate` only if it holds under the contract (entry points declared, arguments the runner
knows, launch expressions that evaluate); otherwise the reason goes back to the model for repair.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from sparseditto.agents.llm_planner import check_choice, spec_text
from sparseditto.agents.llm_prompts import prompt
from sparseditto.agents.llm_schemas import CoderAnswer, NewKernel
from sparseditto.agents.llm_structured import Answer, ask, schema_instructions
from sparseditto.agents.schemas import Choice, Plan, References
from sparseditto.knowledge_base.library import get_kernel, prelude, reference_kernels
from sparseditto.settings import Settings
from sparseditto.spec import Spec
from sparseditto.tools.contract import KernelCandidate, KernelLaunch, runner_symbols
from sparseditto.tools.families import get_family
from sparseditto.tools.verifier import check_geometry

Written = tuple[Choice, KernelCandidate]


def contract_text(spec: Spec) -> str:
    """The family's arrays and symbols, the preparations and the prelude: everything a new kernel may use."""
    family = get_family(spec.family)
    tiny = family.make_problem(spec, 0, family.tiny_shape(spec))

    def typed(name: str, dtype: str) -> str:
        return f"{name} ({'value_t' if dtype == spec.dtype else dtype})"

    arrays = [typed(n, d) for n, d in tiny.input_dtypes.items()]
    outputs = [typed(n, o.dtype) for n, o in tiny.outputs.items()]
    doc = (sys.modules[type(family).__module__].__doc__ or "").strip()
    preparations = "\n".join(f"- {name}: {' '.join((fn.__doc__ or '').split())}" for name, fn in family.preparations.items())
    scalars = f"\nFloat scalars: {', '.join(tiny.scalars)}." if tiny.scalars else ""
    return (f"{doc}\n\nInput arrays: {', '.join(arrays)}. Output arrays: {', '.join(outputs)}, poisoned before "
            f"every run.\nSymbols: {', '.join([*tiny.symbols, *runner_symbols(spec.dtype, sms=0)])}.{scalars}\n"
            f"One-time preparations (their arrays and symbols become available by name):\n{preparations}\n\n"
            f"Prelude compiled before every source:\n```cuda\n{prelude()}\n```")


def _launch_yaml(kernels: Any) -> str:
    return yaml.safe_dump([KernelLaunch.model_validate(k).model_dump(mode="json") for k in kernels], sort_keys=False).strip()


def references_text(refs: References) -> str:
    """Each library kernel once (source, parameters, launches), kernels accepted before, then the retrieved passages."""
    out, shown = [], set()
    for r in refs.kernels:
        if r.origin == "experience":
            out.append(f"### Accepted before: {r.kernel} with {json.dumps(r.params)}\n{r.summary}")
        if r.kernel in shown or r.kernel not in {k.name for k in reference_kernels()}:
            continue
        shown.add(r.kernel)
        ref = get_kernel(r.kernel)
        out.append(f"### {ref.name} ({ref.strategy})\n{r.summary}\nParameters and allowed values: "
                   f"{json.dumps({p: list(v) for p, v in ref.parameters.items()})}\nPreparation: {ref.preparation}\n"
                   f"Launches:\n```yaml\n{_launch_yaml(ref.kernels)}\n```\n```cuda\n{ref.body.strip()}\n```")
    out += [f"### Notes: {p.title} ({p.source})\n{p.text.strip()}" for p in refs.passages
            if p.id.removeprefix("kernel:") not in shown]
    return "\n\n".join(out)


def previous_text(candidate: dict[str, Any] | None) -> str:
    if not candidate:
        return "None yet: this is the first candidate."
    c = KernelCandidate.model_validate(candidate)
    source = c.source.removeprefix(prelude()).strip()
    return (f"{c.label()} (origin {c.origin}, preparation {c.preparation})\nLaunches:\n```yaml\n{_launch_yaml(c.kernels)}\n```\n"
            f"Workspace: {json.dumps({n: w.model_dump() for n, w in c.workspace.items()})}\n```cuda\n{source}\n```")


def feedback_text(iteration: dict[str, Any] | None, verdict: dict[str, Any] | None) -> str:
    """The last tool results, trimmed to what acts on the code, and the reviewer's direction."""
    if not iteration:
        return "None yet."
    report = iteration["report"]
    lines = []
    for f in report["feedback"]:
        line = f"- {f['stage']}: {f['status']}"
        line += f" ({f['error_type']})" if f.get("error_type") else ""
        line += f": {f['message']}" if f.get("message") else ""
        line += f" at {f['location']}" if f.get("location") else ""
        line += f"; suggestion: {f['suggestion']}" if f.get("suggestion") else ""
        lines.append(line)
        if f.get("evidence", {}).get("log") and f["status"] == "failed":
            lines.append(f"  compiler log (end):\n```\n{f['evidence']['log'][-1500:]}\n```")
    m = report.get("measurement")
    if m:
        lines.append(f"- time: {m['median_us']:.1f} us, {m['bandwidth_fraction']:.0%} of the bandwidth floor "
                     f"({m['floor_us']:.1f} us); best baseline {m.get('best_baseline')} at {m.get('best_baseline_us')} us, "
                     f"speedup {m.get('speedup_vs_best')}")
    for entry, r in report.get("resources", {}).items():
        lines.append(f"- {entry}: {r['registers']} registers, {r['shared_bytes']} static shared bytes, "
                     f"spills {r['spill_stores']}/{r['spill_loads']}")
    if verdict:
        lines.append(f"\nReviewer: {verdict['diagnosis']}")
        if verdict.get("direction"):
            lines.append(f"Direction: {verdict['direction']}")
        if verdict.get("next"):
            lines.append(f"Suggested: {json.dumps(verdict['next'])}")
    return "\n".join(lines)


def coder_messages(spec: Spec, plan: Plan, refs: References, previous: dict[str, Any] | None,
                   iteration: dict[str, Any] | None, verdict: dict[str, Any] | None, method: str) -> list[BaseMessage]:
    return prompt("coder", schema_instructions(CoderAnswer) if method == "json_mode" else "",
                  spec=spec_text(spec), plan=plan.model_dump_json(indent=1, exclude={"features"}),
                  family=spec.family, contract=contract_text(spec), references=references_text(refs),
                  previous=previous_text(previous), feedback=feedback_text(iteration, verdict))


def _new_candidate(k: NewKernel, spec: Spec) -> KernelCandidate:
    if k.name in {r.name for r in reference_kernels()}:
        raise ValueError(f"new_kernel.name: {k.name!r} is a reference kernel's name; choose a new one")
    for launch in k.launches:
        if not re.search(r'extern\s+"C"\s+__global__[^;{]*?\b' + re.escape(launch.entry) + r"\s*\(", k.source):
            raise ValueError(f'new_kernel.launches: {launch.entry!r} is not declared as extern "C" __global__ in the source')
    candidate = KernelCandidate(
        name=k.name, family=spec.family, source=prelude() + "\n" + k.source, parameters=k.parameters,
        kernels=tuple(KernelLaunch(entry=x.entry, grid=tuple(x.grid), block=tuple(x.block), shared_bytes=x.shared_bytes,
                                   args=tuple(x.args)) for x in k.launches),
        workspace=k.workspace, preparation=k.preparation, origin="llm")
    bad = check_geometry(candidate, spec, spec.arch or "sm_90")
    if bad:
        raise ValueError(f"new_kernel.launches: {bad.message}")
    return candidate


def to_candidate(answer: CoderAnswer, spec: Spec, tried: set[tuple[str, str]]) -> Written:
    """The answer as a candidate under the contract; ValueError says what to fix."""
    if answer.reference is not None:
        ref = check_choice(answer.reference, spec, "reference")
        choice = Choice(kernel=ref.name, params=answer.reference.params)
        candidate = ref.instantiate(choice.params, origin="llm")
    else:
        candidate = _new_candidate(answer.new_kernel, spec)
        choice = Choice(kernel=candidate.name, params=candidate.parameters)
    if (candidate.label(), candidate.source) in tried:
        raise ValueError(f"{candidate.label()} with this source was already verified; change something")
    return choice, candidate


def llm_code(model: BaseChatModel, settings: Settings, spec: Spec, plan: Plan, refs: References,
             previous: dict[str, Any] | None, iterations: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> Answer[Written]:
    tried = {(KernelCandidate.model_validate(it["kernel"]).label(), it["kernel"]["source"])
             for it in iterations if it.get("kernel")}
    messages = coder_messages(spec, plan, refs, previous, iterations[-1] if iterations else None,
                              verdicts[-1] if verdicts else None, settings.llm_output_method)
    return ask(model, CoderAnswer, messages, lambda a: to_candidate(a, spec, tried),
               method=settings.llm_output_method, repair_attempts=settings.llm_repair_attempts)

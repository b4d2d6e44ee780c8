"""LLM planner: spec, matrix features and the strategy vocabulary -> the same `Plan` as the offline planner."""

from __future__ import annotations

import json

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from sparseditto.agents.llm_prompts import prompt
from sparseditto.agents.llm_schemas import PlanAnswer, ReferenceChoice
from sparseditto.agents.llm_structured import Answer, ask, schema_instructions
from sparseditto.agents.schemas import Acceptance, Plan, Strategy
from sparseditto.knowledge_base.library import ReferenceKernel, get_kernel, kernels_for
from sparseditto.settings import Settings
from sparseditto.spec import Spec
from sparseditto.tools.baselines import libraries_for
from sparseditto.tools.families import get_family


def spec_text(spec: Spec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False).strip()


def vocabulary(spec: Spec) -> list[ReferenceKernel]:
    return kernels_for(spec.family, spec.dtype, spec.arch)


def _vocabulary_text(kernels: list[ReferenceKernel]) -> str:
    return "\n\n".join(
        f"### {k.name} ({k.strategy})\n{k.summary.strip()}\nParameters and allowed values: "
        + json.dumps({p: list(v) for p, v in k.parameters.items()})
        + (f"\nConstraints (over parameters, problem symbols and value_bytes): {'; '.join(k.constraints)}" if k.constraints else "")
        for k in kernels)


def planner_messages(spec: Spec, features: dict[str, float], method: str) -> list[BaseMessage]:
    return prompt("planner", schema_instructions(PlanAnswer) if method == "json_mode" else "",
                  spec=spec_text(spec), features=json.dumps({k: round(v, 4) for k, v in features.items()}, indent=1),
                  family=spec.family, dtype=spec.dtype, arch=spec.arch or "sm_90",
                  vocabulary=_vocabulary_text(vocabulary(spec)))


def check_choice(choice: ReferenceChoice, spec: Spec, where: str) -> ReferenceKernel:
    """A reference kernel with a value for each parameter, from its ranges and valid for the dtype."""
    names = [k.name for k in vocabulary(spec)]
    if choice.kernel not in names:
        raise ValueError(f"{where}: {choice.kernel!r} is not in the strategy vocabulary: {', '.join(names)}")
    ref = get_kernel(choice.kernel)
    if set(choice.params) != set(ref.parameters):
        raise ValueError(f"{where}: {choice.kernel} takes exactly the parameters {sorted(ref.parameters)}, "
                         f"got {sorted(choice.params)}")
    for name, value in choice.params.items():
        if value not in ref.parameters[name]:
            raise ValueError(f"{where}: {name}={value} is not one of {list(ref.parameters[name])}")
    if broken := ref.violated(choice.params, get_family(spec.family).symbols(spec), spec.dtype):
        raise ValueError(f"{where}: {choice.params} breaks the constraint {broken} of {choice.kernel} for {spec.dtype}")
    return ref


def to_plan(answer: PlanAnswer, spec: Spec, features: dict[str, float]) -> Plan:
    strategies = []
    for i, s in enumerate(answer.strategies, 1):
        ref = check_choice(ReferenceChoice(kernel=s.kernel, params=s.start), spec, f"strategies.{i}")
        space = {}
        for name, allowed in ref.parameters.items():
            values = s.space.get(name) or list(allowed)
            bad = [v for v in values if v not in allowed]
            if bad:
                raise ValueError(f"strategies.{i}.space.{name}: {bad} not in the allowed values {list(allowed)}")
            space[name] = sorted(set(values) | {s.start[name]})
        unknown = set(s.space) - set(ref.parameters)
        if unknown:
            raise ValueError(f"strategies.{i}.space: {s.kernel} has no parameters {sorted(unknown)}")
        strategies.append(Strategy(kernel=s.kernel, start=s.start, space=space, why=s.why))
    family = get_family(spec.family)
    return Plan(family=spec.family, format=family.format, features=features, symbols=family.symbols(spec),
                strategies=strategies, baselines=list(spec.baselines or libraries_for(spec.family)),
                acceptance=Acceptance(min_speedup=1.0, target_speedup=answer.target_speedup),
                notes=answer.notes or "llm policy")


def llm_plan(model: BaseChatModel, spec: Spec, features: dict[str, float], settings: Settings) -> Answer[Plan]:
    messages = planner_messages(spec, features, settings.llm_output_method)
    return ask(model, PlanAnswer, messages, lambda a: to_plan(a, spec, features),
               method=settings.llm_output_method, repair_attempts=settings.llm_repair_attempts)


"""Graph state: plain JSON-able dicts and lists so that the SQLite checkpointer saves every step (and loads it
again in any process, whatever family packages are installed there); nodes read it through `RunView`, which
validates each part once into its model."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import ConfigDict
# typing_extensions' TypedDict: pydantic builds the JSON schemas that LangGraph Studio shows from these classes,
# and refuses typing.TypedDict before Python 3.12
from typing_extensions import TypedDict

from sparseditto.agents.reviewer import best_iteration
from sparseditto.agents.schemas import Plan, References
from sparseditto.settings import OnBudget
from sparseditto.spec import SpecBase, parse_spec
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.results import Measurement


def add_counts(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Counters summed key by key (tokens of each node's calls add up to the run's)."""
    return {**old, **{k: old.get(k, 0) + v for k, v in new.items()}}


def add_per_node(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {**old, **{node: add_counts(old.get(node, {}), counts) for node, counts in new.items()}}


class PipelineState(TypedDict, total=False):
    run_id: str
    spec: dict[str, Any]
    on_budget: OnBudget
    started_at: float
    iteration_limit: int
    # offline | llm | hybrid, fixed when the run starts
    policy: str
    plan: dict[str, Any]
    references: dict[str, Any]
    choice: dict[str, Any]
    candidate: dict[str, Any]
    # one record per tool run: iteration, choice, candidate label, the candidate itself, report, seconds
    iterations: Annotated[list[dict[str, Any]], operator.add]
    verdicts: Annotated[list[dict[str, Any]], operator.add]
    # the wall-clock reading the last verdict was made at; the router judges the budget by it
    reviewed_at: float
    human: dict[str, Any]
    status: str
    best_iteration: int | None
    artifacts_dir: str
    # LLM tokens spent so far, per kind (prompt, completion, total)
    tokens: Annotated[dict[str, int], add_counts]
    cost_usd: Annotated[float, operator.add]
    # per node: prompt, completion, total, cost_usd, calls
    node_tokens: Annotated[dict[str, dict[str, Any]], add_per_node]
    # the LLM budget of the run: {"tokens": int | None, "cost_usd": float | None}
    llm_limits: dict[str, Any]
    # one entry per agent step under the llm or hybrid policy (sparseditto.agents.llm_trace.Step)
    llm_trace: Annotated[list[dict[str, Any]], operator.add]


def example_input() -> dict[str, Any]:
    """An input Studio shows with the schema: the example spec of the first registered family (by name) that has one."""
    from sparseditto.tools.families import families

    spec = next(f.example_spec for _, f in sorted(families().items()) if f.example_spec)
    return {"spec": dict(spec), "on_budget": "ask"}


EXAMPLE_INPUT: dict[str, Any] = example_input()


class PipelineInput(TypedDict, total=False):
    """What a run starts from (LangGraph Studio shows these fields): the spec, as in a spec file, and what to do
    when the budget is spent; run_pipeline also fixes the run's id, start, iteration limit and policy (the
    planner fills them in when a run starts from a bare spec)."""

    __pydantic_config__ = ConfigDict(use_attribute_docstrings=True,  # type: ignore[misc]
                                     json_schema_extra={"examples": [EXAMPLE_INPUT]})

    spec: dict[str, Any]
    """Required. The problem, as in a spec file (YAML there, JSON here): its operation and its family's fields
    (the README's "Spec format"; the example below is one family's), and optionally name, dtype, arch, baselines
    and budget ({"iterations": 4, "wall_seconds": 1800}). The documents' short form is read too."""
    on_budget: OnBudget
    """What to do when the budget is spent: ask (stop at the approval gate and wait for an answer; the default),
    approve (finish with the best kernel so far) or abort."""
    run_id: str
    """Optional: the run's id (its artifact folder's name); a new one when unset."""
    started_at: float
    """Optional: when the run started (Unix seconds), for the wall-clock budget; now when unset."""
    iteration_limit: int
    """Optional: the iteration budget; the spec's budget.iterations when unset."""
    policy: str
    """Optional: offline, llm or hybrid; the context's policy, else the settings' (SPARSEDITTO_POLICY), when unset."""


@dataclass(frozen=True)
class RunView:
    """Typed, read-only access to a state: each part is validated into its model on first use."""

    state: PipelineState

    @classmethod
    def of(cls, state: PipelineState) -> "RunView":
        return cls(state)

    @cached_property
    def spec(self) -> SpecBase:
        return parse_spec(self.state["spec"])

    @cached_property
    def plan(self) -> Plan:
        return Plan.model_validate(self.state["plan"])

    @cached_property
    def references(self) -> References:
        return References.model_validate(self.state["references"])

    @cached_property
    def candidate(self) -> KernelCandidate:
        return KernelCandidate.model_validate(self.state["candidate"])

    @cached_property
    def best_measurement(self) -> Measurement | None:
        """The measurement of the fastest correct iteration so far (None before any GPU measurement)."""
        best = best_iteration(self.state.get("iterations", []))
        measured = best["report"].get("measurement") if best else None
        return Measurement.model_validate(measured) if measured else None

    @property
    def best_median_us(self) -> float | None:
        return self.best_measurement.median_us if self.best_measurement else None

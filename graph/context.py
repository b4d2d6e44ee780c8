"""Run-time context of the graph: what nodes need but the checkpoint must not hold.

The LLM fields are what LangGraph Studio shows and lets a person change per run; each one left at
None takes its value from the settings (SPARSEDITTO_LLM_* environment variables). The API key is read
from the environment only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sparseditto.agents.policies import LLM
from sparseditto.settings import OutputMethod, Policy, Settings


@dataclass
class PipelineContext:
    # unset (LangGraph Studio): the settings' SPARSEDITTO_RUNS_DIR and SPARSEDITTO_COMPILE_ONLY
    runs_dir: str = field(default_factory=lambda: Settings().runs_dir)
    force_compile_only: bool = field(default_factory=lambda: Settings().compile_only)
    arch: str | None = None
    # a Verifier; None picks the GPU backend when a device is found, else compile-only
    verifier: Any = None
    # which agent policy drives the run: offline, llm, or hybrid (offline first candidate, then llm);
    # None keeps the run's own (the one it started with), else offline
    policy: Policy | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_planner_model: str | None = None
    llm_coder_model: str | None = None
    llm_reviewer_model: str | None = None
    llm_temperature: float | None = None
    llm_output_method: OutputMethod | None = None
    llm_repair_attempts: int | None = None
    llm_token_budget: int | None = None
    llm_cost_budget_usd: float | None = None
    # a callable role -> LangChain chat model, to use another provider or a scripted model; None: ChatOpenAI
    chat_models: Any = None

    def llm_settings(self) -> Settings:
        """The settings with this context's LLM fields laid over them (validated like the settings)."""
        overrides = {f.name: getattr(self, f.name) for f in fields(self)
                     if f.name.startswith("llm_") and getattr(self, f.name) is not None}
        return Settings(**overrides)

    def llm(self) -> LLM:
        return LLM(settings=self.llm_settings(), factory=self.chat_models)

    def run_policy(self, state: dict[str, Any]) -> str:
        return self.policy or state.get("policy") or Settings().policy


def context_of(runtime: Any) -> PipelineContext:
    """The run's context; a graph run without one (Studio, tests) gets the defaults from the settings."""
    return runtime.context or PipelineContext()


LLM_OPTIONS = frozenset(f.name for f in fields(PipelineContext) if f.name.startswith("llm_")) | {"chat_models"}

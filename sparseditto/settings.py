"""Settings with defaults, read from SPARSEDITTO_* environment variables; the CLI overrides them."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError as SourceError

from sparseditto.errors import SettingsError, clip, shown

Role = Literal["planner", "coder", "reviewer"]
# who drives the agents: expert rules, a model, or the rules' first candidate then a model
Policy = Literal["offline", "llm", "hybrid"]
POLICIES: tuple[str, ...] = get_args(Policy)
# what a run does when its budget is spent: ask a person at the gate, approve the best, or abort
OnBudget = Literal["ask", "approve", "abort"]
ON_BUDGET: tuple[str, ...] = get_args(OnBudget)
OutputMethod = Literal["json_schema", "function_calling", "json_mode"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPARSEDITTO_", populate_by_name=True)

    runs_dir: str = "runs"
    on_budget: OnBudget = "ask"
    compile_only: bool = False
    policy: Policy = "offline"
    # GPU verification stages after correctness and timing (each needs its tool on PATH)
    sanitize: bool = True
    profile: bool = True
    # compute-sanitizer's tools on a candidate at the same time, each its own process (the GPU's memory and the
    # host's cores allow it); off: one after another
    sanitizer_parallel: bool = True
    # the offline policy's next contenders run in the runner process of the current candidate (one draw of inputs,
    # the baselines timed once); their results wait for their own iterations
    run_ahead: bool = True
    # where to keep the sanitizer's and Nsight Compute's raw output (unset: not kept)
    tool_output_dir: str | None = None

    # --- LLM policy: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LM Studio) ---
    llm_base_url: str | None = None
    llm_model: str | None = None
    # a model per role; unset roles use llm_model
    llm_planner_model: str | None = None
    llm_coder_model: str | None = None
    llm_reviewer_model: str | None = None
    llm_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("llm_api_key", "SPARSEDITTO_LLM_API_KEY", "OPENAI_API_KEY"))
    llm_temperature: float = Field(0.2, ge=0.0, le=2.0)
    llm_timeout_s: float = Field(120.0, gt=0)
    # transport retries of the client (429, 5xx, timeouts), with its backoff
    llm_max_retries: int = Field(2, ge=0, le=10)
    llm_output_method: OutputMethod = "json_schema"
    # how many times an answer that does not validate is sent back with the error before the offline policy takes over
    llm_repair_attempts: int = Field(2, ge=0, le=10)
    # budgets for the whole run; None is unlimited
    llm_token_budget: int | None = Field(None, ge=1)
    llm_cost_budget_usd: float | None = Field(None, gt=0)
    # prices per 1000 tokens, for the cost in reports and the cost budget; 0 when unknown
    llm_prompt_usd_per_1k: float = Field(0.0, ge=0)
    llm_completion_usd_per_1k: float = Field(0.0, ge=0)

    # knowledge base: BM25 index cache (default ~/.cache/sparseditto/kb), experience store
    # (default <runs_dir>/experience.sqlite), and how many characters of passages the agents get
    kb_cache_dir: str | None = None
    experience_db: str | None = None
    context_chars: int = Field(6000, ge=0)

    def __init__(self, **values: object) -> None:
        """Settings from the environment, with `values` laid over them. A bad environment variable is a
        SettingsError naming the variable in one line; a bad keyword value stays a pydantic ValidationError."""
        try:
            super().__init__(**values)
        except SourceError as exc:  # a value pydantic-settings could not even parse
            raise SettingsError(f"environment: {clip(str(exc), 200)}") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            if name in values or name not in type(self).model_fields:
                raise
            raise SettingsError(f"environment variable {env_variable(name)}: {_message(err)} (got {shown(err.get('input'))})") from None

    def model_for(self, role: Role) -> str | None:
        """The model a role uses: its own setting, else llm_model."""
        return getattr(self, f"llm_{role}_model") or self.llm_model


def env_variable(field: str) -> str:
    """The environment variable a setting is read from."""
    return f"SPARSEDITTO_{field.upper()}"


def _message(err: dict) -> str:
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return msg.replace("Input should be", "must be", 1)

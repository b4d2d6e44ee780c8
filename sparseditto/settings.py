"""Settings with defaults, read from SPARSEDITTO_* environment variables; the CLI overrides them."""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPARSEDITTO_")

    runs_dir: str = "runs"
    on_budget: Literal["ask", "approve", "abort"] = "ask"
    compile_only: bool = False
    arch: str | None = None
    policy: Literal["offline", "llm", "hybrid"] = "offline"
    # GPU verification stages after correctness and timing (each needs its tool on PATH)
    sanitize: bool = True
    profile: bool = True
    llm_base_url: str | None = None
    llm_model: str | None = None

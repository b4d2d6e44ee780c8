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
    llm_base_url: str | None = None
    llm_model: str | None = None
    # knowledge base: BM25 index cache (default ~/.cache/sparseditto/kb), experience store
    # (default <runs_dir>/experience.sqlite), and how many characters of passages the agents get
    kb_cache_dir: str | None = None
    experience_db: str | None = None
    context_chars: int = 6000

"""Run-time context of the graph: what nodes need but the checkpoint must not hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PipelineContext:
    runs_dir: str = "runs"
    force_compile_only: bool = False
    arch: str | None = None
    # a Verifier; None picks the GPU backend when a device is found, else compile-only
    verifier: Any = None
    # which agent policy drives the run: offline (default), llm, or hybrid (offline first candidate, then llm)
    policy: str = "offline"

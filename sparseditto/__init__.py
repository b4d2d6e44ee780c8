"""SparseDitto: from a sparse operation and its sparsity pattern to a validated, benchmarked CUDA kernel."""

from __future__ import annotations

from typing import Any

__all__ = ["PipelineResult", "Spec", "load_spec", "parse_spec", "resume", "run_pipeline"]


def __getattr__(name: str) -> Any:
    """Imported on first use, so that the GPU runner's child processes (sparseditto.tools.runner) start
    without loading the graph, the agents and the retriever."""
    if name in ("PipelineResult", "resume", "run_pipeline"):
        from sparseditto import pipeline

        return getattr(pipeline, name)
    if name in ("Spec", "load_spec", "parse_spec"):
        from sparseditto import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'sparseditto' has no attribute {name!r}")

"""SparseDitto: from a sparse operation and its sparsity pattern to a validated, benchmarked CUDA kernel."""

from sparseditto.pipeline import PipelineResult, resume, run_pipeline
from sparseditto.spec import Spec, load_spec, parse_spec

__all__ = ["PipelineResult", "Spec", "load_spec", "parse_spec", "resume", "run_pipeline"]

"""The graph LangGraph Studio serves (`langgraph dev`, named in langgraph.json): compiled without a
checkpointer, the server brings its own.

Start a run with the input {"spec": {...}} (a spec file's fields as JSON, or the documents' short form; the
input schema, graph/state.py's PipelineInput, documents each field) and optionally "on_budget": "ask" (the
default: stop at the approval gate), "approve" or "abort". The spec is validated like everywhere else; a bad one
ends the run with the validation message. At the approval gate, resume with "approve", "abort" or "extend N"
(or {"action": "approve"}, {"action": "extend", "iterations": N}, ...); an answer the gate cannot read is asked
again with the reason.

Test seam (for tests/graph/test_studio_server.py, which has no GPU): when the server is started with
SPARSEDITTO_TEST_VERIFIER=module:attr, a run whose context says {"verifier": "test"} verifies its candidates with
`attr()` from that module (a class or factory returning a Verifier, such as tests/graph/studio_doubles.py's).
The variable is read here only, once, when the server loads this file; without it, or in any run whose context
does not ask for it, the verifier is chosen as everywhere else (the GPU when one is found, else compile-only).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparseditto.graph.builder import make_builder
from sparseditto.graph.context import PipelineContext

TEST_VERIFIER_ENV = "SPARSEDITTO_TEST_VERIFIER"


def _load(target: str | None) -> Callable[[], Any] | None:
    """module:attr -> the attribute (imported now, when the server loads the graph, not on its event loop)."""
    if not target:
        return None
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"{TEST_VERIFIER_ENV}={target!r}: expected module:attr")
    return getattr(importlib.import_module(module), attr)


_test_verifier = _load(os.environ.get(TEST_VERIFIER_ENV))


@dataclass
class StudioContext(PipelineContext):
    """A run's options (JSON from the client): leave `verifier` unset, the GPU is found by itself ("test" is a test seam)."""

    def __post_init__(self) -> None:
        if self.verifier is None:
            return
        if self.verifier != "test":
            raise ValueError(f"verifier: {self.verifier!r} cannot be set from a run's context; leave it unset")
        if _test_verifier is None:
            raise ValueError(f'verifier "test" needs the server started with {TEST_VERIFIER_ENV}=module:attr (a test seam)')
        self.verifier = _test_verifier()


graph = make_builder(StudioContext).compile(name="sparseditto")

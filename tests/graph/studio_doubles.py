"""Test doubles that the LangGraph server of tests/graph/test_studio_server.py loads by name.

The server is started with SPARSEDITTO_TEST_VERIFIER=studio_doubles:SlowerThanBaselines and this folder and tests/
on its PYTHONPATH; a run whose context says {"verifier": "test"} then gets these GPU results instead of a GPU
(graph/studio.py's test seam). Not a test module: pytest does not collect it.
"""

from __future__ import annotations

from collections.abc import Sequence

from conftest import measured_report  # tests/ is on the server's PYTHONPATH too

from sparseditto.spec import SpecBase
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.results import VerificationReport

SPEEDUP = 0.8


class SlowerThanBaselines:
    """Every candidate compiles, is correct and runs in 100 us, at 0.8x the best baseline: never good enough,
    so a run spends its budget and stops at the approval gate."""

    backend = "gpu"

    def verify(self, candidate: KernelCandidate, spec: SpecBase, best_us: float | None = None,
               already_checked: str | None = None, ahead: Sequence[KernelCandidate] = ()) -> VerificationReport:
        return measured_report(candidate.label(), median_us=100.0, speedup=SPEEDUP)

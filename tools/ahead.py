"""Runner results of candidates run ahead, kept until the verification of that very compiled kernel for that spec.

The verifier runs the next contenders in the runner process of the current candidate (`runner --batch`); each one's
compile outputs and runner result, with its job (whose cubin and sanitizer instances live in this store's folder, for
the sanitizer and the profiler later), wait here under (candidate and architecture, spec) and are taken once.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from sparseditto.tools.contract import KernelCandidate

from sparseditto.tools.results import Feedback
from sparseditto.tools.runner import RunJob, RunResult


class RunAhead(NamedTuple):
    """A contender as it was run ahead: what check_and_compile gave (compile result, feedback, SASS counts), its
    job and its runner result."""

    compiled: tuple[Any, list[Feedback], dict[str, Any]]
    job: RunJob
    run: RunResult


def candidate_key(candidate: KernelCandidate, arch: str) -> str:
    """The same candidate compiled for the same architecture gives the same code."""
    return hashlib.sha256(f"{arch}|{candidate.model_dump_json()}".encode()).hexdigest()


class AheadResults:
    def __init__(self) -> None:
        self._results: dict[tuple[str, str], RunAhead] = {}
        self._folder: Path | None = None

    def folder(self) -> Path:
        """Where jobs run ahead keep their files until taken (removed at exit)."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="sparseditto-ahead-"))
            atexit.register(shutil.rmtree, self._folder, True)
        return self._folder

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._results

    def put(self, key: tuple[str, str], entry: RunAhead) -> None:
        self._results[key] = entry

    def take(self, key: tuple[str, str]) -> RunAhead | None:
        return self._results.pop(key, None)

    def forget_other_specs(self, spec_key: str) -> None:
        """Results run ahead for other specs are never taken: an evaluation has moved on."""
        for key in [k for k in self._results if k[1] != spec_key]:
            discard(self._results.pop(key).job)


def discard(job: RunJob) -> None:
    """A job run ahead, done with: its cubin and sanitizer instances (up to gigabytes) go."""
    for path in (job.cubin_path, job.instances_path):
        if path:
            Path(path).unlink(missing_ok=True)


def measured_correct(run: RunResult | Feedback) -> bool:
    """A runner result with a measurement and no failed stage."""
    return (isinstance(run, RunResult) and run.measurement is not None
            and not any(f.status in {"failed", "error"} for f in run.feedback))


AHEAD = AheadResults()

"""The tool node's seam: one Verifier interface, a GPU backend and a compile-only backend.

Both compile with NVRTC and report ptxas resources. The GPU backend then runs the candidate in a
separate process with a timeout (`sparseditto.tools.runner`); the compile-only backend reports every
GPU stage as not executed — never as passed.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

import structlog

from sparseditto.spec import Spec
from sparseditto.tools.compiler import DTYPE_CODES, CompileResult, compile_source
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.expr import ExpressionError
from sparseditto.tools.families import FAMILIES
from sparseditto.tools.families.base import VALUE_BYTES
from sparseditto.tools.preparations import PREPARATIONS
from sparseditto.tools.results import NOT_EXECUTED_NO_GPU, Feedback, VerificationReport
from sparseditto.tools.runner import RunJob, RunResult

log = structlog.get_logger(__name__)


class Verifier(Protocol):
    backend: str

    def verify(self, candidate: KernelCandidate, spec: Spec) -> VerificationReport: ...


def compile_candidate(candidate: KernelCandidate, spec: Spec, arch: str) -> tuple[CompileResult, Feedback]:
    result = compile_source(candidate.source, arch, [*candidate.defines(DTYPE_CODES[spec.dtype]), *candidate.compile_options])
    if not result.ok:
        first_error = next((ln for ln in result.log.splitlines() if "error" in ln), result.log[:200])
        return result, Feedback(stage="compile", status="failed", error_type="compile_error", message=first_error,
                                evidence={"log": result.log[-2000:]})
    spills = {k: r.spill_stores for k, r in result.resources.items() if r.spill_stores}
    return result, Feedback(
        stage="compile", status="passed", message=f"compiled for {arch} in {result.seconds:.2f} s",
        evidence={"resources": {k: r.model_dump() for k, r in result.resources.items()}},
        suggestion=f"registers spill in {sorted(spills)}: lower the per-thread work" if spills else None,
    )


def check_geometry(candidate: KernelCandidate, spec: Spec) -> Feedback | None:
    """Launch expressions must evaluate: checked on a tiny instance, its preparation included."""
    family = FAMILIES[spec.family]
    tiny = family.make_problem(spec, seed=0, shape={"M": 64, "K": 64, "N": min(spec.N, 8)})
    extra = PREPARATIONS[candidate.preparation](tiny, candidate.parameters)[1] if candidate.preparation else {}
    symbols = {**family.symbols(spec), **extra, "value_bytes": VALUE_BYTES[spec.dtype], "num_sms": 132}
    try:
        geos = candidate.geometry(symbols)
    except (ExpressionError, ValueError) as exc:
        return Feedback(stage="launch", status="failed", error_type="invalid_launch", message=str(exc))
    too_big = [g.entry for g in geos if g.shared_bytes > 227 * 1024]
    if too_big:
        return Feedback(stage="launch", status="failed", error_type="invalid_launch",
                        message=f"{too_big}: dynamic shared memory above the 227 KiB per-block limit")
    return None


class CompileOnlyVerifier:
    """No CUDA device: compile, keep the resource report, and say plainly what was not run."""

    backend = "compile_only"

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch

    def verify(self, candidate: KernelCandidate, spec: Spec) -> VerificationReport:
        result, fb = compile_candidate(candidate, spec, spec.arch or self.arch)
        feedback = [fb]
        if result.ok and (bad := check_geometry(candidate, spec)):
            feedback.append(bad)
        elif result.ok:
            feedback += [Feedback(stage=s, status="not_executed", message=NOT_EXECUTED_NO_GPU)
                         for s in ("correctness", "sanitizer", "benchmark")]
        return VerificationReport(candidate=candidate.label(), backend="compile_only", compiled=result.ok,
                                  resources=result.resources, feedback=feedback)


class GpuVerifier:
    """Compile here, run in a child process with a timeout: a crash or hang never reaches the pipeline."""

    backend = "gpu"

    def __init__(self, arch: str, trials: int = 3, timeout_s: float = 300.0, runs: int = 30) -> None:
        self.arch = arch
        self.trials = trials
        self.timeout_s = timeout_s
        self.runs = runs

    def verify(self, candidate: KernelCandidate, spec: Spec) -> VerificationReport:
        result, fb = compile_candidate(candidate, spec, spec.arch or self.arch)
        feedback = [fb]
        if not result.ok:
            return VerificationReport(candidate=candidate.label(), backend="gpu", compiled=False, feedback=feedback)
        if bad := check_geometry(candidate, spec):
            return VerificationReport(candidate=candidate.label(), backend="gpu", compiled=True,
                                      resources=result.resources, feedback=[fb, bad])
        family = FAMILIES[spec.family]
        with tempfile.TemporaryDirectory(prefix="sparseditto-") as tmp:
            cubin = Path(tmp) / "candidate.cubin"
            cubin.write_bytes(result.cubin or b"")
            seeds = [secrets.randbelow(2**31) for _ in range(self.trials)]
            job = RunJob(candidate=candidate, spec=spec, cubin_path=str(cubin), seeds=seeds,
                         held_out_shapes=family.held_out_shapes(spec), timing_seed=secrets.randbelow(2**31),
                         runs=self.runs)
            job_file, out_file = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job_file.write_text(job.model_dump_json())
            run = self._run_child(job_file, out_file)
            if isinstance(run, Feedback):
                feedback.append(run)
                return VerificationReport(candidate=candidate.label(), backend="gpu", compiled=True,
                                          resources=result.resources, feedback=feedback)
        feedback += run.feedback
        feedback.append(Feedback(stage="sanitizer", status="not_executed",
                                 message="not executed: the compute-sanitizer stage is not built yet"))
        return VerificationReport(candidate=candidate.label(), backend="gpu", device=run.device, compiled=True,
                                  resources=result.resources, feedback=feedback, trials=run.trials,
                                  measurement=run.measurement, baselines=run.baselines)

    def _run_child(self, job_file: Path, out_file: Path) -> RunResult | Feedback:
        cmd = [sys.executable, "-m", "sparseditto.tools.runner", str(job_file), str(out_file)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, env=os.environ.copy())
        except subprocess.TimeoutExpired:
            return Feedback(stage="launch", status="failed", error_type="timeout",
                            message=f"the candidate run did not finish within {self.timeout_s:.0f} s (hang or far too slow)",
                            suggestion="check loop bounds and that every thread reaches each barrier")
        if proc.returncode != 0 or not out_file.exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            kind = "illegal_memory_access" if "ILLEGAL_ADDRESS" in tail or "illegal memory" in tail else "crash"
            last = tail.splitlines()[-1] if tail else f"exit code {proc.returncode}"
            log.info("candidate_run_failed", error_type=kind, message=last)
            return Feedback(stage="launch", status="failed", error_type=kind, message=last, evidence={"stderr_tail": tail},
                            suggestion="guard every index against the row/column bounds" if kind == "illegal_memory_access" else None)
        return RunResult.model_validate_json(out_file.read_text())


def make_verifier(arch: str | None = None, force_compile_only: bool = False) -> Verifier:
    """The GPU backend when a CUDA device is usable, else compile-only."""
    from sparseditto.tools.device import detect

    facts = detect()
    if facts.gpu and not force_compile_only:
        return GpuVerifier(arch=arch or facts.gpu["arch"])
    return CompileOnlyVerifier(arch=arch or "sm_90")

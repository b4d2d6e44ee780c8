"""The GPU stages of verification, each in child processes with a timeout.

run_child: correctness and benchmark in the runner process (run_batch_child: several candidates of one spec in one). sanitizer_stage: the four
compute-sanitizer tools over the instances the runner saved. profile_stage: Nsight Compute over the main shape,
summarised for the reviewer. A crash, hang or tool failure becomes feedback, never an exception here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog

from sparseditto.settings import Settings
from sparseditto.tools.profiler import KernelProfile, ProfileSummary, run_ncu, summarize
from sparseditto.tools.results import Feedback
from sparseditto.tools.runner import LAUNCHED_AT_ENV, BatchJob, RunJob, RunResult, note_seconds
from sparseditto.tools.sanitizer import TOOLS, Finding, run_tool

log = structlog.get_logger(__name__)


def keep_tool_output(name: str, text: str) -> None:
    """With the setting tool_output_dir, keep each tool's raw output (for debugging and parser fixtures)."""
    folder = Settings().tool_output_dir
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / name).write_text(text)


def _child_command(job_file: Path, out_file: Path) -> list[str]:
    return [sys.executable, "-m", "sparseditto.tools.runner", str(job_file), str(out_file)]


def run_child(job: RunJob, tmp: Path, timeout_s: float) -> RunResult | Feedback:
    """The runner in its own process; a hang, crash or missing result becomes launch feedback."""
    job_file, out_file = tmp / f"job-{job.mode}.json", tmp / f"result-{job.mode}.json"
    job_file.write_text(job.model_dump_json())
    start = time.perf_counter()
    ended = _run(_child_command(job_file, out_file), timeout_s)
    if ended is not None or not out_file.exists():
        return ended or _missing(None)
    return note_seconds(RunResult.model_validate_json(out_file.read_text()),
                        process_seconds=round(time.perf_counter() - start, 2))


def run_batch_child(jobs: list[RunJob], tmp: Path, timeout_s: float) -> list[RunResult | Feedback]:
    """Several candidates of one spec in one runner process (`runner --batch`), timeout_s each. Each result is read on
    its own: the candidate that ended the process early gets the hang or crash as its launch feedback, the ones after
    it a note that they were not run."""
    batch_file, out_dir = tmp / "job-batch.json", tmp / "batch-results"
    out_dir.mkdir(exist_ok=True)
    batch_file.write_text(BatchJob(jobs=jobs).model_dump_json())
    start = time.perf_counter()
    ended = _run([sys.executable, "-m", "sparseditto.tools.runner", "--batch", str(batch_file), str(out_dir)],
                 timeout_s * len(jobs))
    seconds = time.perf_counter() - start
    results: list[RunResult | Feedback] = []
    for i in range(len(jobs)):
        out_file = out_dir / f"result-{i}.json"
        if out_file.exists():
            result = RunResult.model_validate_json(out_file.read_text())
            # the process's whole wall time beside the stages' own seconds: what it spent starting and between them
            results.append(note_seconds(result, process_seconds=round(seconds, 2)) if i == 0 else result)
        elif not any(isinstance(r, Feedback) for r in results):
            results.append(ended or _missing(None))
        else:
            results.append(Feedback(stage="launch", status="not_executed",
                                    message="not executed: an earlier candidate of its batch ended the runner process"))
    return results


def _run(command: list[str], timeout_s: float) -> Feedback | None:
    """The command to its end; why it failed as launch feedback, None when it exited normally."""
    # the launch's moment on the system-wide monotonic clock: the runner reports how long it took to start
    env = {**os.environ, LAUNCHED_AT_ENV: repr(time.monotonic())}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return Feedback(stage="launch", status="failed", error_type="timeout",
                        message=f"the candidate run did not finish within {timeout_s:.0f} s (hang or far too slow)",
                        suggestion="check loop bounds and that every thread reaches each barrier")
    return _missing(proc) if proc.returncode != 0 else None


def _missing(proc: subprocess.CompletedProcess | None) -> Feedback:
    """A crash (its stderr's tail as evidence), or a normal exit that left no result."""
    tail = "\n".join(proc.stderr.strip().splitlines()[-15:]) if proc else ""
    kind = "illegal_memory_access" if "ILLEGAL_ADDRESS" in tail or "illegal memory" in tail else "crash"
    last = tail.splitlines()[-1] if tail else (f"exit code {proc.returncode}" if proc else "the runner left no result")
    log.info("candidate_run_failed", error_type=kind, message=last)
    return Feedback(stage="launch", status="failed", error_type=kind, message=last, evidence={"stderr_tail": tail},
                    suggestion="guard every index against the row/column bounds" if kind == "illegal_memory_access" else None)


# the instances each tool launches: the main instance only under the cheaper tools (racecheck and synccheck
# instrument every shared-memory access and barrier; the longest-rows slice gives them the long-row paths)
_MAIN_INSTANCE_TOOLS = ("memcheck", "initcheck")


def sanitizer_stage(job: RunJob, tmp: Path, timeout_s: float, instances: list[str],
                    tools: tuple[str, ...] = TOOLS, not_needed: dict[str, str] | None = None) -> Feedback:
    """`tools` (memcheck, racecheck, initcheck, synccheck) over the runner's saved instances; any finding rejects.
    `not_needed`: the tools left out and why (nothing in the compiled code they could find). The tools run at the
    same time, each in its own process (setting sanitizer_parallel), their findings read in the order of `tools`."""
    start = time.perf_counter()
    findings: list[Finding] = []
    failures: list[str] = []
    launched = {tool: [n for n in instances if n != "main" or tool in _MAIN_INSTANCE_TOOLS] for tool in tools}

    def one(tool: str) -> tuple[list[Finding], str, int | None]:
        job_file, out_file = tmp / f"job-sanitize-{tool}.json", tmp / f"result-sanitize-{tool}.json"
        job_file.write_text(job.model_copy(update={"sanitize_instances": launched[tool]}).model_dump_json())
        return run_tool(tool, _child_command(job_file, out_file), timeout_s)

    with ThreadPoolExecutor(max_workers=len(tools) if Settings().sanitizer_parallel else 1) as pool:
        outcomes = list(pool.map(one, tools))
    for tool, (found, raw, code) in zip(tools, outcomes):
        keep_tool_output(f"sanitizer_{tool}_{job.candidate.name}.txt", raw)
        findings += found
        if code is None:
            failures.append(f"{tool}: no answer within {timeout_s:.0f} s")
        elif code not in (0, 99) and not found:
            failures.append(f"{tool}: exit code {code}: {raw.strip().splitlines()[-1] if raw.strip() else ''}")
    seconds = time.perf_counter() - start
    real = [f for f in findings if f.kind != "sanitizer_failure"] or findings
    if real:
        first = real[0]
        return Feedback(
            stage="sanitizer", status="failed", error_type=first.kind,
            message=f"{first.tool}: {first.message}" + (f" in {first.kernel}" if first.kernel else ""),
            location=first.source or first.kernel,
            evidence={"findings": [f.model_dump(exclude_none=True) for f in real[:10]], "total": len(real), "seconds": seconds},
            suggestion={"out_of_bounds": "guard every index against the array bounds (row < M, col < N, j < nnz)",
                        "uninitialized_read": "read only what the kernel or the runner wrote: initialise workspaces first",
                        "shared_memory_race": "put __syncthreads() between writing shared memory and reading another thread's part",
                        "sync_error": "every thread of the block must reach each __syncthreads()",
                        }.get(first.kind),
        )
    if failures:
        return Feedback(stage="sanitizer", status="error", error_type="sanitizer_failure", message="; ".join(failures),
                        evidence={"seconds": seconds})
    left_out = "".join(f"; {tool} not run: {why}" for tool, why in (not_needed or {}).items())
    return Feedback(stage="sanitizer", status="passed",
                    message=f"{', '.join(tools)} clean on {', '.join(instances)} ({seconds:.1f} s){left_out}",
                    evidence={"seconds": seconds, "instances": launched, "not_needed": not_needed or {}})


_BASELINE_PROFILES: dict[str, ProfileSummary] = {}


def split_profiles(profiles: list[KernelProfile], entries: Sequence[str]) -> tuple[list[KernelProfile], list[KernelProfile]]:
    """The candidate's launches and the baseline's, from one profiled range where the candidate's sequence ran first:
    the leading launches of the candidate's entries, then everything else."""
    lead = next((i for i, p in enumerate(profiles) if p.kernel not in entries), len(profiles))
    return profiles[:lead], profiles[lead:]


def profile_stage(job: RunJob, tmp: Path, timeout_s: float, copy_bw_gbps: float | None, best_baseline: str | None) -> Feedback:
    """Nsight Compute on the main shape; the best baseline (None: the candidate alone) is profiled once per spec and
    device for comparison, in the same run as the candidate (one child, one instance, one tool start). A run with the
    baseline that gave none of the candidate's launches is made again without it, so that the library cannot fail the
    candidate's stage."""
    start = time.perf_counter()
    entries = [k.entry for k in job.candidate.kernels]
    key = f"{job.spec.model_dump_json(exclude={'name', 'budget'})}|{best_baseline}"
    with_baseline = best_baseline if best_baseline and key not in _BASELINE_PROFILES else None

    def ncu(baseline: str | None) -> tuple[list[KernelProfile], list[KernelProfile], str, int | None]:
        job_file, out_file = tmp / "job-profile.json", tmp / "result-profile.json"
        job_file.write_text(job.model_copy(update={"profile_baseline": baseline}).model_dump_json())
        # with the baseline in the range every launch is profiled (its kernels' names are the library's)
        found, raw, code = run_ncu(_child_command(job_file, out_file), [] if baseline else entries, timeout_s,
                                   profiled_range_only=True)
        keep_tool_output(f"ncu_{job.candidate.name}{'_with_' + baseline if baseline else ''}.csv", raw)
        return *split_profiles(found, entries), raw, code

    profiles, baseline_profiles, raw, code = ncu(with_baseline)
    if not profiles and with_baseline:
        profiles, _, raw, code = ncu(None)
    if not profiles:
        last = raw.strip().splitlines()[-1] if raw.strip() else "no output"
        return Feedback(stage="profile", status="error", error_type="profiler_failure",
                        message=f"ncu gave no metrics of {', '.join(entries)} (exit code {code}): {last}")
    summary = summarize(profiles, copy_bw_gbps)
    evidence: dict[str, Any] = {"bottleneck": summary.bottleneck, "key_metrics": summary.key_metrics,
                                "top_stalls": summary.top_stalls, "kernels": [p.model_dump() for p in summary.kernels]}
    if with_baseline and baseline_profiles:
        _BASELINE_PROFILES[key] = summarize(baseline_profiles, copy_bw_gbps)
    if best_baseline and key in _BASELINE_PROFILES:
        base = _BASELINE_PROFILES[key]
        evidence["baseline"] = {"name": best_baseline, "bottleneck": base.bottleneck, "key_metrics": base.key_metrics}
    evidence["seconds"] = time.perf_counter() - start
    return Feedback(stage="profile", status="passed", message=f"{summary.bottleneck}-bound: {summary.reason}",
                    evidence=evidence, suggestion=summary.advice)

"""A run's folder `<runs dir>/<run id>/`: its status file, kept current while the run moves, and its artifacts:
the kernel source, a standalone launcher, the build command, report.md, result.json, and under an LLM policy
the trace of every model call (trace.jsonl, trace.md).

`status.json` is written when the run starts (before planning), after each node, at the approval gate and at
the end: state (running | interrupted | waiting_for_approval | done | aborted | failed), spec name, started and
updated times, the pid (and host) of the process driving it. A process killed with -9 leaves `running` with a
pid that no longer exists; `run_state` reads that as `interrupted`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

from sparseditto.agents.llm_trace import render_markdown
from sparseditto.agents.retriever import references_markdown
from sparseditto.agents.reviewer import best_iteration, describe
from sparseditto.agents.schemas import Choice, measured_times
from sparseditto.errors import RunOptionError, RunsDirError
from sparseditto.spec import parse_spec
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.families import get_family
from sparseditto.tools.results import VerificationReport

RunState = Literal["running", "interrupted", "waiting_for_approval", "done", "aborted", "failed"]
RUN_STATES: tuple[str, ...] = get_args(RunState)
STATUS_FILE = "status.json"
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_run_id(run_id: Any) -> str:
    """The run id, if it can name a folder under the runs dir: 1-64 letters, digits, '_' or '-'."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise RunOptionError(f"run_id {run_id!r}: a run id is 1 to 64 letters, digits, '_' or '-' "
                             "(no path separators, no dots)")
    return run_id


def check_runs_dir(runs_dir: str | Path, create: bool = True) -> Path:
    """The runs dir, created if missing; one clear error when it is a file, cannot be created or is not writable."""
    path = Path(runs_dir)
    hint = "choose another with --runs-dir or SPARSEDITTO_RUNS_DIR"
    if path.exists() and not path.is_dir():
        raise RunsDirError(f"runs dir {path}: it is a file, not a folder; {hint}")
    if not create:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunsDirError(f"runs dir {path}: cannot create it ({exc.strerror or exc}); {hint}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunsDirError(f"runs dir {path}: not writable; {hint}")
    return path


def run_folder(runs_dir: str | Path, run_id: str) -> Path:
    return Path(runs_dir) / check_run_id(run_id)


# ---- the status file ----------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _process_start(pid: int) -> str | None:
    """When a process started (clock ticks since boot, from /proc), to tell a live pid from a reused one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def read_status(runs_dir: str | Path, run_id: str) -> dict[str, Any] | None:
    """The run's status file, or None when it has none (or it cannot be read)."""
    try:
        status = json.loads((run_folder(runs_dir, run_id) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def write_status(runs_dir: str | Path, run_id: str, state: RunState, **fields: Any) -> dict[str, Any]:
    """Update the run's status file (atomically: a reader never sees half of it); fields set to None are dropped.

    A `running` state records this process (pid, host, start) as the one driving the run."""
    assert state in RUN_STATES, state
    folder = run_folder(runs_dir, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    now = _now()
    status = read_status(runs_dir, run_id) or {"run_id": run_id, "started": now}
    status.update(state=state, updated=now, **fields)
    if state == "running":
        status.update(pid=os.getpid(), host=socket.gethostname(), process_start=_process_start(os.getpid()))
        status.pop("error", None)
    status = {k: v for k, v in status.items() if v is not None}
    tmp = folder / f".{STATUS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(status, indent=1, default=str))
    os.replace(tmp, folder / STATUS_FILE)
    return status


def pid_alive(pid: Any, process_start: str | None = None) -> bool:
    """Whether a process with this pid runs (not a zombie; with `process_start`, not a later process reusing it)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
        return False
    return process_start is None or _process_start(pid) in (None, process_start)


def run_state(status: dict[str, Any]) -> str:
    """The state a status file stands for now: `running` whose process is gone (on this host) reads `interrupted`."""
    state = status.get("state", "unknown")
    if state == "running" and status.get("host", socket.gethostname()) == socket.gethostname() \
            and not pid_alive(status.get("pid"), status.get("process_start")):
        return "interrupted"
    return state


def list_runs(runs_dir: str | Path) -> list[dict[str, Any]]:
    """Every run in the runs dir, newest first, with its current state (`run_state`).

    Folders without a status file (runs of older versions) are read from result.json; runs known only to
    the checkpoint database (killed before their folder existed, by older versions) show state `unknown`."""
    path = check_runs_dir(runs_dir, create=False)
    if not path.is_dir():
        return []
    runs: dict[str, dict[str, Any]] = {}
    for folder in path.iterdir():
        if not folder.is_dir() or not RUN_ID.fullmatch(folder.name):
            continue
        status = read_status(path, folder.name)
        if status is None:
            try:
                result = json.loads((folder / "result.json").read_text())
            except (OSError, ValueError):
                continue
            status = {"run_id": folder.name, "state": "aborted" if result.get("status") == "aborted" else "done",
                      "result": result.get("status"), "spec": (result.get("spec") or {}).get("name"),
                      "started": _iso(result.get("started_at"))}
        runs[folder.name] = {**status, "run_id": folder.name, "state": run_state(status)}
    for thread in _checkpointed_runs(path):
        runs.setdefault(thread, {"run_id": thread, "state": "unknown", "note": "checkpoint only, no run folder"})
    return sorted(runs.values(), key=lambda r: (r.get("started") or "", r["run_id"]), reverse=True)


def _iso(epoch: Any) -> str | None:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds") if isinstance(epoch, (int, float)) else None


def _checkpointed_runs(runs_dir: Path) -> list[str]:
    db = runs_dir / "checkpoints.sqlite"
    if not db.is_file():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
    except sqlite3.Error:
        return []
    return [r[0] for r in rows if isinstance(r[0], str) and RUN_ID.fullmatch(r[0])]


# ---- artifacts ----------------------------------------------------------------------------------------


def kernel_source(candidate: KernelCandidate, dtype: str) -> str:
    """The candidate as one self-contained .cu file: parameters fixed as #defines at the top."""
    defines = "\n".join(f"#define {d[2:].replace('=', ' ', 1)}" for d in candidate.defines(dtype_info(dtype).code))
    return f"// {candidate.label()} for {dtype}, generated by SparseDitto\n{defines}\n{candidate.source}"


def _report_md(state: dict[str, Any], status: str, best: dict[str, Any] | None, note: str | None = None) -> str:
    """The report; a run ended early (aborted after a crash) may lack its plan, iterations or verdicts."""
    spec, plan = state["spec"], state.get("plan") or {}
    lines = [f"# SparseDitto run {state['run_id']}: {spec.get('name')}", "", f"Status: **{status}**", ""]
    if note:
        lines += [note, ""]
    shape = ", ".join(f"{k}={v}" for k, v in plan.get("symbols", {}).items())
    family = plan.get("family", "not planned")
    lines += [f"Operation {spec.get('operation')} ({family}){', ' + shape if shape else ''}, dtype {spec.get('dtype')}.", ""]
    if best:
        report = VerificationReport.model_validate(best["report"])
        lines += [f"Best kernel: `{best['candidate']}` (iteration {best['iteration']}): {describe(report)}.", ""]
        if report.device:
            lines += [f"Device: {report.device.get('name')} ({report.device.get('arch')}).", ""]
        if report.resources:
            lines += ["| entry point | registers | static shared bytes | stack bytes | spills (stores/loads) | SASS instructions "
                      "| tensor-core | 128-bit loads / loads | local memory ops |", "|---|---|---|---|---|---|---|---|---|"]
            for e, r in report.resources.items():
                c = report.sass.get(e)
                sass = (f"{c.instructions} | {c.tensor_core} | {c.global_loads_128}/{c.global_loads} | {c.local_loads + c.local_stores}"
                        if c else "- | - | - | -")
                lines.append(f"| {e} | {r.registers} | {r.shared_bytes} | {r.stack_bytes} | {r.spill_stores}/{r.spill_loads} | {sass} |")
            lines.append("")
        lines += ["| stage | status | detail |", "|---|---|---|"]
        lines += [f"| {f.stage} | {f.status} | {(f.message or '').replace('|', '/')}"
                  + (f" ({f.suggestion.replace('|', '/')})" if f.suggestion and f.stage == "profile" else "") + " |"
                  for f in report.feedback]
        lines.append("")
        if report.backend == "compile_only":
            lines += ["Nothing here was measured: no CUDA device.", ""]
        if report.measurement:
            m = report.measurement
            lines += ["| measure | value |", "|---|---|",
                      f"| median time | {m.median_us:.1f} us (p10 {m.p10_us:.1f}, p90 {m.p90_us:.1f}, {m.runs} runs) |",
                      f"| bandwidth floor | {m.floor_us:.1f} us ({m.bandwidth_fraction:.0%} reached, {m.achieved_gbps:.0f} GB/s of {m.copy_bandwidth_gbps:.0f} copy) |",
                      f"| throughput | {m.achieved_gflops:.0f} GFLOP/s"
                      + (f" ({m.achieved_gflops / m.peak_gflops:.1%} of the {m.peak_gflops / 1e3:.0f} TFLOP/s peak for this arithmetic)"
                         if m.peak_gflops else "") + " |",
                      f"| one-time preparation | {m.preparation_ms:.1f} ms (not in the per-call time) |", ""]
        if report.baselines:
            lines += ["| baseline | library | configuration | median us | correct | speedup |", "|---|---|---|---|---|---|"]
            for b in sorted(report.baselines, key=lambda b: b.median_us):
                sp = f"{b.median_us / report.measurement.median_us:.2f}x" if report.measurement else "-"
                us = f"{b.median_us:.1f}" + (" (carried)" if b.carried else "")
                lines.append(f"| {b.name} | {b.library} | {b.config} | {us} | {'yes' if b.correct else 'no'} | {sp} |")
            if any(b.carried for b in report.baselines):
                lines.append("\n(carried: timed by this spec's first verification; the fastest is timed again beside every candidate)")
            lines.append("")
    lines += _ranking_md(plan, state.get("iterations", []))
    if state.get("references"):
        lines += references_markdown(state["references"])
    lines += ["## Iterations", "", "| # | candidate | backend | outcome | verdict |", "|---|---|---|---|---|"]
    for it, verdict in zip(state.get("iterations", []), state.get("verdicts", [])):
        outcome = describe(VerificationReport.model_validate(it["report"])).replace("|", "/")
        lines.append(f"| {it['iteration']} | `{it['candidate']}` | {it['backend']} | {outcome} | {verdict['decision']}: {verdict.get('direction') or verdict['diagnosis']} |")
    if state.get("human") and not note:
        lines += ["", f"Approval gate answer: {state['human']}."]
    lines += _llm_md(state)
    if best:
        lines += ["", "Rebuild: `sh build.sh` (nvcc) or run `launch.py`, which compiles `kernel.cu` with NVRTC."]
    lines.append("")
    return "\n".join(lines)


def _ranking_md(plan: dict[str, Any], iterations: list[dict[str, Any]]) -> list[str]:
    """The planner's order (cost model, calibrated by earlier measurements) beside the measured times of the
    strategies' starts that ran; nothing when the family predicts no times."""
    strategies = [s for s in plan.get("strategies", []) if s.get("predicted_us") is not None]
    if not strategies:
        return []
    measured = measured_times(iterations)
    times = [measured.get(Choice(kernel=s["kernel"], params=s["start"]).key()) for s in strategies]
    ranks = {t: n for n, t in enumerate(sorted(t for t in times if t is not None), 1)}
    lines = ["## Ranking: predicted and measured", "", "| planned | kernel | predicted us | calibrated us | measured us | measured rank |",
             "|---|---|---|---|---|---|"]
    for n, (s, t) in enumerate(zip(strategies, times), 1):
        lines.append(f"| {n} | `{s['kernel']}` | {s['predicted_us']:.1f} | {s.get('calibrated_us') or s['predicted_us']:.1f} | "
                     f"{'-' if t is None else f'{t:.1f}'} | {'-' if t is None else ranks[t]} |")
    return [*lines, ""]


def _llm_md(state: dict[str, Any]) -> list[str]:
    """Policy, tokens and cost per node and for the run; nothing for a purely offline run."""
    if not state.get("llm_trace"):
        return []
    t = state.get("tokens", {})
    lines = ["", f"## LLM ({state.get('policy')} policy)", "",
             f"Tokens: {t.get('prompt', 0)} prompt + {t.get('completion', 0)} completion = {t.get('total', 0)}; "
             f"cost ${state.get('cost_usd', 0.0):.4f}. Every prompt and answer: `trace.md`.", "",
             "| node | calls | prompt | completion | total | cost USD |", "|---|---|---|---|---|---|"]
    for node, n in state.get("node_tokens", {}).items():
        lines.append(f"| {node} | {n.get('calls', 0)} | {n.get('prompt', 0)} | {n.get('completion', 0)} | {n.get('total', 0)} "
                     f"| {n.get('cost_usd', 0.0):.4f} |")
    fallbacks = [f"{s['node']} (iteration {s['iteration']}): {s['fallback']}" for s in state["llm_trace"] if s.get("fallback")]
    if fallbacks:
        lines += ["", "Steps done by the offline policy instead: " + "; ".join(fallbacks) + "."]
    return lines


def write_artifacts(state: dict[str, Any], status: str, runs_dir: str, note: str | None = None) -> Path:
    """Write the run's artifacts and mark its status file `done` (or `aborted`) with the final status.

    `note`: a line for report.md on how the run ended, when not by the graph's own end (an abort after a crash)."""
    folder = run_folder(runs_dir, state["run_id"])
    folder.mkdir(parents=True, exist_ok=True)
    best = best_iteration(state.get("iterations", []))
    spec = parse_spec(state["spec"])
    if best:
        candidate = write_candidate_from(best)
        arch = candidate.compile_arch(best["report"].get("device", {}).get("arch") or spec.arch or "sm_90")
        (folder / "kernel.cu").write_text(kernel_source(candidate, spec.dtype))
        (folder / "launch.py").write_text(get_family(spec.family).launcher(candidate, spec, arch))
        (folder / "build.sh").write_text(f"nvcc -cubin -O3 -std=c++17 -arch={arch} kernel.cu -o kernel.cubin\n")
    (folder / "report.md").write_text(_report_md(state, status, best, note))
    if state.get("llm_trace"):
        (folder / "trace.jsonl").write_text("".join(json.dumps(step) + "\n" for step in state["llm_trace"]))
        (folder / "trace.md").write_text(render_markdown(state["llm_trace"], state["run_id"]))
    result = {k: v for k, v in state.items() if k not in ("candidate", "llm_trace")}
    (folder / "result.json").write_text(json.dumps({**result, "status": status, "best_iteration": best["iteration"] if best else None}, indent=1, default=str))
    write_status(runs_dir, state["run_id"], "aborted" if status == "aborted" else "done", result=status,
                 spec=spec.name, artifacts_dir=str(folder), node="finalize")
    return folder


def write_candidate_from(iteration: dict[str, Any]) -> KernelCandidate:
    """The candidate an iteration verified (kept in its record; older records are rebuilt from their choice)."""
    if iteration.get("kernel"):
        return KernelCandidate.model_validate(iteration["kernel"])
    from sparseditto.agents.coder import write_candidate
    from sparseditto.agents.schemas import Choice

    return write_candidate(Choice.model_validate(iteration["choice"]))

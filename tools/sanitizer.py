"""compute-sanitizer stage: run a small instance of the candidate under each tool and parse the findings.

Each tool runs the runner in its own process (`RunJob.mode == "sanitize"`) with a timeout. The runner
then uses plain cudaMalloc allocations (no memory pool, so every buffer's true size is known), leaves
outputs and workspaces uninitialised (so initcheck sees reads before writes) and launches only the
candidate. `--padding` puts a guard band after every allocation, so a read just past the end of one
buffer is not silently served by its neighbour.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from pydantic import BaseModel

from sparseditto.tools.results import ErrorType

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
_PREFIX = "========="
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "Target application returned",
                 "LEAK SUMMARY", "Saved host backtrace", "Host Frame", "Device Frame", "Warning: Error buffer overflow")
_SKIPPED_COUNT = re.compile(r"^\d+ errors were skipped")


class Finding(BaseModel):
    """One error the sanitizer reported, with what is needed to find it in the source."""

    tool: str
    kind: ErrorType
    message: str
    kernel: str | None = None
    source: str | None = None  # file:line, when built with -lineinfo
    access_size: int | None = None
    address: str | None = None
    thread: str | None = None
    block: str | None = None
    hazards: int | None = None


def sanitizer_command(tool: str, program: Sequence[str], executable: str = "compute-sanitizer") -> list[str]:
    # host API errors are not the candidate's (it is device code only; the runner is ours), and cuda-bindings looks up
    # driver entry points a given driver may lack (cuGetProcAddress fails harmlessly): only device faults count
    cmd = [executable, "--tool", tool, "--print-limit", "20", "--error-exitcode", "99", "--show-backtrace", "no",
           "--report-api-errors", "no"]
    if tool == "memcheck":
        cmd += ["--padding", "1024", "--leak-check", "no"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "analysis"]
    return [*cmd, *program]


def _kind(header: str) -> ErrorType:
    text = header.lower()
    if "uninitialized" in text:
        return "uninitialized_read"
    if "race" in text or "hazard" in text:
        return "shared_memory_race"
    if "barrier" in text or "divergent" in text or "synccheck" in text:
        return "sync_error"
    if "misaligned" in text:
        return "misaligned_access"
    if "invalid" in text and ("read" in text or "write" in text or "atomic" in text):
        return "out_of_bounds"
    return "sanitizer_failure"


def parse_sanitizer(output: str, tool: str) -> list[Finding]:
    """The findings in compute-sanitizer's text output (one per reported error, not per summary line)."""
    findings: list[Finding] = []
    current: dict | None = None
    for raw in output.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        text = body.strip()
        if not text or any(text.startswith(s) for s in _NOT_FINDINGS) or _SKIPPED_COUNT.match(text):
            continue
        if not body.startswith("    "):  # a new record; continuation lines are indented
            current = {"tool": tool, "kind": _kind(text), "message": text}
            if m := re.search(r"of size (\d+) bytes", text):
                current["access_size"] = int(m.group(1))
            findings.append(current)  # type: ignore[arg-type]
            _fill(current, text)
        elif current is not None:
            _fill(current, text)
    return [Finding.model_validate(f) for f in findings]


def _fill(record: dict, text: str) -> None:
    if m := re.search(r"\bat (\w+)\+0x[0-9a-f]+(?: in (\S+:\d+))?", text):
        record.setdefault("kernel", m.group(1))
        if m.group(2):
            record.setdefault("source", m.group(2))
    if m := re.search(r"by thread \(([\d,]+)\) in block \(([\d,]+)\)", text):
        record["thread"], record["block"] = m.group(1), m.group(2)
    if m := re.search(r"(?:Address|Access to|Access at) (0x[0-9a-f]+)", text):
        record["address"] = m.group(1)
    if m := re.search(r"\[(\d+) hazards?\]", text):
        record["hazards"] = int(m.group(1))


def find_sanitizer() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer")
         if shutil.which(p)), None)


def run_tool(tool: str, program: Sequence[str], timeout_s: float) -> tuple[list[Finding], str, int | None]:
    """Findings, the raw output and the exit code (None on timeout) of one tool over `program`."""
    exe = find_sanitizer() or "compute-sanitizer"
    try:
        proc = subprocess.run(sanitizer_command(tool, program, exe), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return parse_sanitizer(out, tool), out, None
    return parse_sanitizer(proc.stdout, tool), proc.stdout + proc.stderr[-2000:], proc.returncode

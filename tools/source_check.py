"""Static check of a candidate's source: device code only, nothing that reaches the host or the timer.

A candidate is data under the kernel contract. Its source may define device functions and
`extern "C" __global__` entry points; it may not call host or library APIs, launch kernels from the
device (work outside the runner's launch sequence escapes the timer), print, trap, spin on clocks, or
pull in headers. The check runs on the source with its comments removed.
"""

from __future__ import annotations

import re

from sparseditto.tools.results import Feedback

# (pattern, what it is, why it is refused)
_FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (r"#\s*include\b", "#include", "candidates are self-contained; the prelude is supplied by the library"),
    (r"<<<", "a kernel launch from device code", "work launched by the candidate escapes the runner's timing"),
    (r"\bcudaStream\w*|\bcudaGraph\w*|\bcudaLaunch\w*", "a stream, graph or launch API",
     "only the runner launches work, on its own stream"),
    (r"\bcuda[A-Z]\w*\s*\(|\bcu[A-Z][a-z]\w*\s*\(", "a CUDA runtime or driver API call", "device code only: no host APIs"),
    (r"\b(cublas|cusparse|cusparseLt|cutlass|cub|thrust)\w*", "a library", "the candidate must do the work itself"),
    (r"\bprintf\s*\(|\bvprintf\b", "printf", "output is only through the declared output buffer"),
    (r"__trap\s*\(|\btrap\s*;|__brkpt\s*\(|\bexit\s*;|\basm\s*(volatile\s*)?\(\s*\"\s*exit", "a trap or early exit",
     "a kernel that aborts hides its results"),
    (r"\b(malloc|free|realloc|calloc)\s*\(|\bnew\s+\w|\bdelete\b", "device heap allocation", "buffers come from the declared workspace"),
    (r"__host__|\bint\s+main\s*\(", "host code", "the source may only hold device code"),
    (r"\bclock(64)?\s*\(|%globaltimer|__nanosleep\s*\(", "a clock read or sleep", "timing-dependent behaviour is not allowed"),
    (r"\b__managed__\b|\bcudaMallocManaged\b", "managed memory", "inputs and outputs are the runner's buffers"),
)
_COMMENTS_AND_STRINGS = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def _blank(match: re.Match[str]) -> str:
    """Blank comments (keeping line numbers); keep literals, so that inline PTX such as asm("trap;") is checked."""
    text = match.group(0)
    return text if text[0] in "\"'" else re.sub(r"[^\n]", " ", text)


def check_source(source: str) -> list[Feedback]:
    """One failed 'static' feedback per forbidden construct found, each with its line; empty when clean."""
    code = _COMMENTS_AND_STRINGS.sub(_blank, source)
    if "__global__" not in code:
        return [Feedback(stage="static", status="failed", error_type="forbidden_construct",
                         message="no __global__ entry point in the source",
                         suggestion='define each launched kernel as extern "C" __global__')]
    findings = []
    for pattern, what, why in _FORBIDDEN:
        for m in re.finditer(pattern, code):
            line = code.count("\n", 0, m.start()) + 1
            findings.append(Feedback(
                stage="static", status="failed", error_type="forbidden_construct",
                message=f"{what} ({m.group(0).strip()!r}) is not allowed: {why}", location=f"line {line}",
                evidence={"construct": m.group(0).strip(), "line": line},
                suggestion="remove it; the kernel contract allows device code only",
            ))
            break
    return findings

"""Static check of a candidate's source: device code only, nothing that reaches the host or the timer.

A candidate is data under the kernel contract. Its source may define device functions and
`extern "C" __global__` entry points; it may not call host or library APIs, launch kernels from the
device (work outside the runner's launch sequence escapes the timer), print, trap or spin on clocks.
It may include only header-only device libraries: CUDA's device headers and CUTLASS/CuTe (INCLUDE_ALLOWED).
The check runs on the candidate's own text with its comments removed, never on the headers' contents
(CuTe holds printf in its debug paths): what the headers bring in is judged in the compiled code.
"""

from __future__ import annotations

import re

from sparseditto.tools.results import Feedback
from sparseditto.tools.sass import disassemble, forbidden_instructions

# Headers a candidate may include: exact paths, and folders (ending in '/') whose headers it may include.
# cuda.h gives types only (CUtensorMap for a tensor-map argument): the compiler supplies a stand-in.
INCLUDE_ALLOWED: tuple[str, ...] = (
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "mma.h", "cuda/barrier", "cuda/pipeline",
    "cooperative_groups.h", "cooperative_groups/", "cuda.h", "cute/", "cutlass/",
)
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b[ \t]*(?:<([^<>\n]*)>|\"([^\"\n]*)\")?", re.M)


def include_allowed(path: str) -> bool:
    """Whether `#include <path>` is on the allow-list (a plain relative path, no '..')."""
    if not path or path.startswith("/") or "\\" in path or ".." in path.split("/"):
        return False
    return any(path.startswith(allowed) and len(path) > len(allowed) if allowed.endswith("/") else path == allowed
               for allowed in INCLUDE_ALLOWED)


# (pattern, what it is, why it is refused)
_FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (r"<<<", "a kernel launch from device code", "work launched by the candidate escapes the runner's timing"),
    (r"\bcudaStream\w*|\bcudaGraph\w*|\bcudaLaunch\w*", "a stream, graph or launch API",
     "only the runner launches work, on its own stream"),
    (r"\bcuda[A-Z]\w*\s*\(|\bcu[A-Z][a-z]\w*\s*\(", "a CUDA runtime or driver API call", "device code only: no host APIs"),
    (r"\b(cublas|cusparse|cusparseLt|cub|thrust)\w*", "a library", "the candidate must do the work itself"),
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


def _refused_includes(code: str) -> list[Feedback]:
    findings = []
    for m in _INCLUDE.finditer(code):
        path = m.group(1) if m.group(1) is not None else m.group(2)
        if path is not None and include_allowed(path.strip()):
            continue
        line = code.count("\n", 0, m.start()) + 1
        shown = m.group(0).strip()
        findings.append(Feedback(
            stage="static", status="failed", error_type="forbidden_construct",
            message=f"{shown!r} is not allowed: only header-only device libraries may be included",
            location=f"line {line}", evidence={"construct": shown, "line": line},
            suggestion=f"include only {', '.join(INCLUDE_ALLOWED)} (folders end in '/')",
        ))
    return findings


def check_source(source: str) -> list[Feedback]:
    """One failed 'static' feedback per refused include and per forbidden construct found, each with its
    line; empty when clean."""
    code = _COMMENTS_AND_STRINGS.sub(_blank, source)
    if "__global__" not in code:
        return [Feedback(stage="static", status="failed", error_type="forbidden_construct",
                         message="no __global__ entry point in the source",
                         suggestion='define each launched kernel as extern "C" __global__')]
    findings = _refused_includes(code)
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


def check_cubin(cubin: bytes, timeout_s: float = 60.0) -> list[Feedback] | str:
    """The same contract on the compiled code (whatever the included headers brought in): one failed 'static'
    feedback per refused kind of SASS instruction; or a one-line reason why the check could not run."""
    try:
        listing = disassemble(cubin, timeout_s)
    except RuntimeError as exc:
        return str(exc)
    return [Feedback(
        stage="static", status="failed", error_type="forbidden_construct",
        message=f"the compiled code holds {f.what} ({f.instruction!r}); the kernel contract refuses it",
        location=f"function {f.function}", evidence={"instruction": f.instruction, "function": f.function},
        suggestion="remove it from the source, and any header call that brings it in (cute::print, assert)",
    ) for f in forbidden_instructions(listing)]

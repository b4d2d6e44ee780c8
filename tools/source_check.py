"""Static check of a candidate: device code only, nothing that reaches the host or the timer.

A candidate is data under the kernel contract. Its source may define device functions and
`extern "C" __global__` entry points; it may not call host or library APIs, launch kernels from the
device (work outside the runner's launch sequence escapes the timer), print, trap or spin on clocks,
or keep state in device memory between calls. It may include only header-only device libraries:
CUDA's device headers and CUTLASS/CuTe (INCLUDE_ALLOWED).

Two layers. `check_source` is a first filter on the candidate's own text, read the way the compiler's first
phases read it (line splices joined, comments gone, digraphs mapped, adjacent literals joined), never on the
headers' contents (CuTe holds printf in its debug paths); it refuses token pasting and stringizing, which
hide names from any text check. `check_compiled` is the judge: the PTX and the SASS that came out of the
compiler, whatever spelled them.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from sparseditto.tools.compiler import CompileResult
from sparseditto.tools.ptx_check import check_ptx
from sparseditto.tools.results import Feedback
from sparseditto.tools.sass import disassemble, forbidden_instructions, wgmma_register_hazards

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


# (pattern, what it is, why it is refused); string literals are part of the text, so inline PTX is checked too
_FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (r"<<<", "a kernel launch from device code", "work launched by the candidate escapes the runner's timing"),
    (r"\bcudaStream\w*|\bcudaGraph\w*|\bcudaLaunch\w*", "a stream, graph or launch API",
     "only the runner launches work, on its own stream"),
    (r"\bcuda[A-Z]\w*\s*\(|\bcu[A-Z][a-z]\w*\s*\(", "a CUDA runtime or driver API call", "device code only: no host APIs"),
    (r"\b(cublas|cusparse|cusparseLt|cub|thrust)\w*", "a library", "the candidate must do the work itself"),
    (r"\bprintf\s*\(|\bvprintf\b", "printf", "output is only through the declared output buffer"),
    (r"__trap\s*\(|__builtin_trap\s*\(|\btrap\s*;|__brkpt\s*\(|\bbrkpt\s*;|\bexit\s*;|\basm\s*(volatile\s*)?\(\s*\"\s*exit",
     "a trap or early exit", "a kernel that aborts hides its results"),
    (r"\b(malloc|free|realloc|calloc)\s*\(|\bnew\s+\w|\bdelete\b", "device heap allocation", "buffers come from the declared workspace"),
    (r"__host__|\bint\s+main\s*\(", "host code", "the source may only hold device code"),
    (r"\bclock(64)?\s*\(|%clock(64|_hi)?\b|%globaltimer|%pm\d|\bpmevent\b|__nanosleep\s*\(|\bnanosleep\b",
     "a clock read or sleep", "timing-dependent behaviour is not allowed"),
    (r"\b__managed__\b|\bcudaMallocManaged\b", "managed memory", "inputs and outputs are the runner's buffers"),
)
_DEFINE_BODY = re.compile(r"^[ \t]*#[ \t]*define[ \t]+[A-Za-z_$][\w$]*(?:\([^)\n]*\))?([^\n]*)", re.M)
_DIGRAPHS = (("%:%:", "##"), ("%:", "#"), ("<%", "{"), ("%>", "}"), ("<:", "["), (":>", "]"))
_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")
_ENCODING_PREFIXES = ("u8", "u", "U", "L")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_PP_NUMBER = re.compile(r"\.?\d(?:[eEpP][+-]|'[\w]|[\w.])*")
_RAW_OPENING = re.compile(r'"([^()\\\s"]{0,16})\(')
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]+|[0-7]{1,3}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f", "a": "\a", "b": "\b"}


def _splice(source: str) -> tuple[str, list[int]]:
    """The source with backslash-newline continuations joined (translation phase 2), and each character's
    original line. NVRTC joins only a backslash right before the newline (with spaces between, it warns and
    does not)."""
    text: list[str] = []
    lines: list[int] = []
    physical_lines = source.split("\n")
    for number, physical in enumerate(physical_lines, start=1):
        content = physical.removesuffix("\r")
        if content.endswith("\\") and number < len(physical_lines):
            piece = content[:-1]
        else:
            piece = physical + ("\n" if number < len(physical_lines) else "")
        text.append(piece)
        lines.extend([number] * len(piece))
    return "".join(text), lines


def _decode(body: str) -> str:
    """An ordinary literal's characters with escapes decoded: "tr\\x61p;" is checked as "trap;"."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e[0] in "xuU" and len(e) > 1:
            return chr(min(int(e[1:], 16), 0x10FFFF))
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _SIMPLE_ESCAPES.get(e, e)
    return _ESCAPE.sub(one, body)


@dataclass
class LexedSource:
    """The candidate's text as the compiler's first phases see it: splices joined, comments replaced by a space
    (keeping their newlines), digraphs mapped, each run of adjacent string literals one literal with its escapes
    decoded. `lines` maps each character to its line in the original source; `literals` are the (start, end)
    spans of the literals, where preprocessor punctuation means nothing."""

    code: str
    lines: list[int]
    literals: list[tuple[int, int]]

    def line_at(self, position: int) -> int:
        return self.lines[min(position, len(self.lines) - 1)] if self.lines else 1

    def in_literal(self, position: int) -> bool:
        i = bisect.bisect_right(self.literals, (position, float("inf"))) - 1
        return i >= 0 and self.literals[i][0] <= position < self.literals[i][1]


class _Lexer:
    """One pass over spliced text; adjacent string literals are held until a token that is not one arrives."""

    def __init__(self, text: str, lines: list[int]) -> None:
        self.text, self.src_lines = text, lines
        self.out: list[str] = []
        self.out_lines: list[int] = []
        self.literals: list[tuple[int, int]] = []
        self.pending: list[str] | None = None  # parts of the literal being joined
        self.pending_line = 0
        self.gap: list[tuple[str, int]] = []  # whitespace and comments after it, dropped if another literal follows

    def emit(self, piece: str, line: int) -> None:
        if self.pending is not None:
            self.flush()
        self._write(piece, line)

    def _write(self, piece: str, line: int) -> None:
        self.out.append(piece)
        self.out_lines.extend([line] * len(piece))

    def blank(self, piece: str, line: int) -> None:
        """Whitespace or a comment: one space, and its newlines."""
        spacing = " " + "\n" * piece.count("\n")
        if self.pending is not None:
            self.gap.append((spacing, line))
        else:
            self._write(spacing, line)

    def literal(self, content: str, line: int) -> None:
        if self.pending is None:
            self.pending, self.pending_line = [], line
        self.pending.append(content)
        self.gap = []

    def flush(self) -> None:
        start = len(self.out_lines)
        self._write('"' + "".join(self.pending or []).replace("\n", " ") + '"', self.pending_line)
        self.literals.append((start, len(self.out_lines)))
        self.pending = None
        for spacing, line in self.gap:
            self._write(spacing, line)
        self.gap = []

    def run(self) -> LexedSource:
        text, i = self.text, 0
        while i < len(text):
            i = self.step(i)
        if self.pending is not None:
            self.flush()
        return LexedSource(code="".join(self.out), lines=self.out_lines, literals=self.literals)

    def step(self, i: int) -> int:
        """Lex the token at `i`; the position after it."""
        text, line = self.text, self.src_lines[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            return self._skip(i, len(text) if end < 0 else end)
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            return self._skip(i, len(text) if end < 0 else end + 2)
        if text[i].isspace():
            end = i + 1
            while end < len(text) and text[end].isspace():
                end += 1
            return self._skip(i, end)
        if m := _IDENTIFIER.match(text, i):
            return self.after_identifier(m.group(0), m.end(), line)
        if m := _PP_NUMBER.match(text, i):
            self.emit(m.group(0), line)
            return m.end()
        if text[i] in "\"'":
            return self.quoted(i, line)
        for digraph, token in _DIGRAPHS:
            if text.startswith(digraph, i) and not (digraph == "<:" and self._template_colons(i)):
                self.emit(token, line)
                return i + len(digraph)
        self.emit(text[i], line)
        return i + 1

    def _skip(self, start: int, end: int) -> int:
        self.blank(self.text[start:end], self.src_lines[start])
        return end

    def _template_colons(self, i: int) -> bool:
        """`<::` not followed by ':' or '>' is '<' then '::' (C++11), as in `Tile<::cute::Int<4>>`."""
        return self.text.startswith("<::", i) and self.text[i + 3:i + 4] not in (":", ">")

    def after_identifier(self, word: str, end: int, line: int) -> int:
        """An identifier, or the encoding prefix of the literal right after it."""
        following = self.text[end:end + 1]
        if word in _RAW_PREFIXES and following == '"' and (m := _RAW_OPENING.match(self.text, end)):
            terminator = ")" + m.group(1) + '"'
            closing = self.text.find(terminator, m.end())
            closing = len(self.text) if closing < 0 else closing
            self.literal(self.text[m.end():closing], line)
            return min(closing + len(terminator), len(self.text))
        if word in _ENCODING_PREFIXES and following in ("\"", "'"):
            return self.quoted(end, line)
        self.emit(word, line)
        return end

    def quoted(self, i: int, line: int) -> int:
        """An ordinary string or character literal (ends at its closing quote or, unterminated, the line's end)."""
        text, quote, end = self.text, self.text[i], i + 1
        while end < len(text) and text[end] not in (quote, "\n"):
            end += 2 if text[end] == "\\" else 1
        end = min(end, len(text))
        body = text[i + 1:end]
        if end < len(text) and text[end] == quote:
            end += 1
        if quote == '"':
            self.literal(_decode(body), line)
        else:
            self.emit(text[i:end], line)
        return end


def lex(source: str) -> LexedSource:
    """The candidate's text as the compiler's first translation phases see it (see LexedSource)."""
    return _Lexer(*_splice(source)).run()


def _refusal(what: str, construct: str, line: int, why: str, suggestion: str) -> Feedback:
    return Feedback(stage="static", status="failed", error_type="forbidden_construct",
                    message=f"{what} ({construct!r}) is not allowed: {why}", location=f"line {line}",
                    evidence={"construct": construct, "line": line}, suggestion=suggestion)


def _refused_includes(lexed: LexedSource) -> list[Feedback]:
    findings = []
    for m in _INCLUDE.finditer(lexed.code):
        path = m.group(1) if m.group(1) is not None else m.group(2)
        if path is not None and include_allowed(path.strip()):
            continue
        line = lexed.line_at(m.start())
        shown = m.group(0).strip()
        findings.append(Feedback(
            stage="static", status="failed", error_type="forbidden_construct",
            message=f"{shown!r} is not allowed: only header-only device libraries may be included",
            location=f"line {line}", evidence={"construct": shown, "line": line},
            suggestion=f"include only {', '.join(INCLUDE_ALLOWED)} (folders end in '/')",
        ))
    return findings


def _preprocessor_operators(lexed: LexedSource) -> list[Feedback]:
    """Token pasting anywhere, and the stringizing '#' in a #define body: both build names (asm text, function
    names) that no check of the text can see, and an honest kernel needs neither."""
    why = "it builds names that the text check cannot see"
    suggestion = "write the names and asm strings out in full"
    findings = []
    pasting = next((m.start() for m in re.finditer("##", lexed.code) if not lexed.in_literal(m.start())), None)
    if pasting is not None:
        findings.append(_refusal("token pasting", "##", lexed.line_at(pasting), why, suggestion))
    stringizing = next((define.start(1) + m.start() for define in _DEFINE_BODY.finditer(lexed.code)
                        for m in re.finditer(r"(?<!#)#(?!#)", define.group(1))
                        if not lexed.in_literal(define.start(1) + m.start())), None)
    if stringizing is not None:
        findings.append(_refusal("the stringizing operator", "#", lexed.line_at(stringizing), why, suggestion))
    return findings


def check_source(source: str) -> list[Feedback]:
    """One failed 'static' feedback per refused include and per forbidden construct found, each with its
    line; empty when clean."""
    lexed = lex(source)
    if not re.search(r"\b__global__\b", lexed.code):
        return [Feedback(stage="static", status="failed", error_type="forbidden_construct",
                         message="no __global__ entry point in the source",
                         suggestion='define each launched kernel as extern "C" __global__')]
    findings = [*_refused_includes(lexed), *_preprocessor_operators(lexed)]
    for pattern, what, why in _FORBIDDEN:
        if m := re.search(pattern, lexed.code):
            findings.append(_refusal(what, m.group(0).strip(), lexed.line_at(m.start()), why,
                                     "remove it; the kernel contract allows device code only"))
    return findings


def check_cubin(cubin: bytes, timeout_s: float = 60.0) -> list[Feedback] | str:
    """The contract on the machine code: one failed 'static' feedback per refused kind of SASS instruction and
    per function that writes a register a warpgroup MMA in flight reads; or a one-line reason why the
    disassembler could not run."""
    try:
        listing = disassemble(cubin, timeout_s)
    except RuntimeError as exc:
        return str(exc)
    races = {h.function: h for h in reversed(wgmma_register_hazards(listing))}  # each function's first
    return [*(Feedback(
        stage="static", status="failed", error_type="register_race",
        message=(f"the compiled code writes registers {', '.join(f'R{r}' for r in h.registers)} ({h.instruction!r}) "
                 "while a warpgroup MMA that reads them (sparse metadata or A fragments) may still be in flight"),
        location=f"function {h.function}",
        evidence={"layer": "sass", "instruction": h.instruction, "function": h.function, "registers": h.registers},
        suggestion="wait for the group (wgmma.wait_group) before loading the next metadata words or A fragments "
                   "into registers; the compiler does not always see the hazard across a loop's back edge",
    ) for h in races.values()), *(Feedback(
        stage="static", status="failed", error_type="forbidden_construct",
        message=f"the compiled code holds {f.what} ({f.instruction!r}); the kernel contract refuses it",
        location=f"function {f.function}",
        evidence={"layer": "sass", "instruction": f.instruction, "function": f.function},
        suggestion="remove it from the source, and any header call that brings it in (cute::print, assert)",
    ) for f in forbidden_instructions(listing))]


def check_compiled(result: CompileResult, timeout_s: float = 60.0,
                   early: Mapping[str, Collection[int]] | None = None) -> list[Feedback] | str:
    """The contract on what the compiler produced, whatever the source and its headers spelled: the PTX check
    and the SASS check, their findings together; when a layer could not run and the other found nothing, a
    one-line reason instead (never an empty list, which means checked and clean). `early`: the entries launched
    early, which must wait for the launches before them (check_ptx); without PTX to check that on, refused."""
    if result.ptx is None and early:
        return [Feedback(stage="static", status="failed", error_type="early_launch",
                         message=f"{', '.join(sorted(early))} launched early, and the compiler gave no PTX to check "
                                 "that they wait for the launches before them",
                         suggestion="compile to PTX as well, or drop `early` from the launch")]
    ptx = check_ptx(result.ptx, early) if result.ptx is not None else "PTX check not executed: the compiler gave no PTX"
    sass = check_cubin(result.cubin, timeout_s) if result.cubin else "SASS check not executed: the compiler gave no cubin"
    findings = [*(ptx if isinstance(ptx, list) else []), *(sass if isinstance(sass, list) else [])]
    reasons = [r for r in (ptx, sass) if isinstance(r, str)]
    return findings if findings or not reasons else "; ".join(reasons)

"""The kernel contract checked on the PTX that NVRTC produced: what the compiler made, whatever spelled it.

The text check reads the candidate's source; macros, literal concatenation and inline asm can spell a trap, a
timer read or a printf that no pattern over the text sees. The PTX is where every spelling has become the same
instruction, special register, call or variable, so this check parses it by opcode and operand tokens (never by
substrings: a function `exit_loop` or a register `%r_clock` is not refused) and refuses:

- `trap`, `brkpt`, `exit` (NVVM ends functions with `ret`: an `exit` comes from inline asm), `nanosleep`, `pmevent`;
- reads of the clock, global timer and performance-monitor special registers;
- every function declared `.extern .func`: the device runtime (vprintf, malloc, free, __assertfail, device-side
  launches) or anything else outside the module;
- `.global` variables that the code uses (at module scope, or declared by inline asm in a function): state kept
  in device memory between calls is how a kernel memoises results or counts calls to be lazy when timed. Under
  the kernel contract all state lives in the runner's workspaces, which it refills with garbage before every
  call. `.const` data cannot be written;
- an entry launched early (programmatic dependent launch) without a `griddepcontrol.wait` in its own code.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from sparseditto.tools.results import Feedback

# opcode (before its first '.') -> what it is
_FORBIDDEN_OPCODES = {
    "trap": "a trap", "brkpt": "a breakpoint", "exit": "an early exit (inline asm)",
    "nanosleep": "a sleep", "pmevent": "a performance-monitor event",
}
_SPECIAL_REGISTERS = {
    **dict.fromkeys(("%clock", "%clock_hi", "%clock64"), "a clock read"),
    **dict.fromkeys(("%globaltimer", "%globaltimer_lo", "%globaltimer_hi"), "a global timer read"),
    **{f"%pm{i}{wide}": "a performance-monitor counter read" for i in range(8) for wide in ("", "_64")},
}
# what a known device-runtime function is, for the message; any other external function is refused all the same
_RUNTIME_FUNCTIONS = (
    (re.compile(r"vprintf$"), "printf"),
    (re.compile(r"(malloc|free)$"), "device heap allocation"),
    (re.compile(r"__assertfail$"), "assert"),
    (re.compile(r"cuda(LaunchDevice|GetParameterBuffer)\w*$"), "a kernel launch from device code"),
)

# comments, strings, and the directives that end without ';' (module header, and the line tables of -lineinfo)
_NOT_STATEMENTS = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:[^\"\\\n]|\\.)*\""
    r"|\.version\s+\d+\.\d+|\.target\s+\w+(?:\s*,\s*\w+)*|\.address_size\s+\d+"
    r"|\.file\s+\d+\s+\"(?:[^\"\\\n]|\\.)*\"(?:\s*,\s*\d+)*"
    r"|\.loc\s+\d+\s+\d+\s+\d+(?:\s*,\s*function_name\s+[\w$]+(?:\s*\+\s*\d+)?\s*,\s*inlined_at\s+\d+\s+\d+\s+\d+)?",
    re.S)
# `= {...}` of a variable: its braces are data, not a function body
_BRACED_INITIALIZER = re.compile(r"=\s*\{[^;]*\}")
_LABELS = re.compile(r"^(?:\s*[\w$]+\s*:)+")
_INSTRUCTION = re.compile(r"(?:@!?%?[\w$]+\s+)?([a-z][\w.:]*)")
_FUNCTION_HEADER = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
_EXTERN_FUNCTION = re.compile(r"\.extern\s+\.func\s+(?:\([^)]*\)\s*)?([\w$]+)")
_GLOBAL_VARIABLE = re.compile(r"(?:\.(?:visible|extern|weak|common)\s+)*\.global\b.*?([\w$]+)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?$",
                              re.S)
_CALL_TARGET = re.compile(r"(?:@!?%?[\w$]+\s+)?call(?:\.\w+)*\s+(?:\([^)]*\)\s*,\s*)?([\w$%]+)")
_IDENTIFIER = re.compile(r"(?<![\w$.%])[A-Za-z_$][\w$]*")
_REGISTER = re.compile(r"%[\w$]+")


@dataclass(frozen=True)
class Statement:
    """One PTX statement (a directive or an instruction) with its labels removed."""

    text: str
    line: int
    function: str | None  # the function whose body holds it; None at module scope


def _blank(match: re.Match[str]) -> str:
    """Blank a comment, string or initializer, keeping its newlines so that line numbers stay right."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _code(ptx: str) -> str:
    """The PTX without comments, strings (`// begin inline asm` markers and `.file` names say nothing) and the
    directives that have no ';', so that what is left splits into statements at ';', '{' and '}'."""
    return _NOT_STATEMENTS.sub(_blank, ptx)


def statements(code: str) -> Iterator[Statement]:
    """The statements of comment-free PTX, split at ';', '{' and '}', each with its line and function."""
    code = _BRACED_INITIALIZER.sub(_blank, code)
    depth, function, start, line = 0, None, 0, 1
    for m in re.finditer(r"[;{}]", code):
        chunk = code[start:m.start()]
        text = _LABELS.sub("", chunk)
        if text.strip():
            leading = chunk[:len(chunk) - len(text.lstrip())]
            yield Statement(text=text.strip(), line=line + leading.count("\n"), function=function if depth else None)
        if m.group(0) == "{":
            if depth == 0:  # a function's body, or a debug section's data
                function = header.group(1) if (header := _FUNCTION_HEADER.search(chunk)) else None
            depth += 1
        elif m.group(0) == "}":
            depth = max(depth - 1, 0)
        line += chunk.count("\n")
        start = m.end()


def _refusal(what: str, construct: str, s: Statement, why: str, suggestion: str) -> Feedback:
    where = f"PTX line {s.line}" + (f", function {s.function}" if s.function else "")
    return Feedback(stage="static", status="failed", error_type="forbidden_construct",
                    message=f"the compiled code (PTX) holds {what} ({construct!r}): {why}", location=where,
                    evidence={"layer": "ptx", "construct": construct, "ptx_line": s.line, "function": s.function,
                              "statement": " ".join(s.text.split())[:200]},
                    suggestion=suggestion)


def _runtime_function(name: str) -> str:
    return next((what for pattern, what in _RUNTIME_FUNCTIONS if pattern.match(name)), "a function outside the module")


def _call_target(s: Statement) -> str | None:
    """The function a direct `call` names; None for any other statement and for a call through a register."""
    m = _CALL_TARGET.match(s.text) if s.function is not None else None
    return m.group(1) if m and not m.group(1).startswith("%") else None


def _instruction_refusals(program: list[Statement]) -> list[Feedback]:
    """Refused opcodes and special registers: the first statement of each."""
    found: dict[str, Feedback] = {}
    for s in program:
        if s.function is None or not (m := _INSTRUCTION.match(s.text)):
            continue
        opcode = m.group(1).split(".")[0]
        if opcode in _FORBIDDEN_OPCODES and opcode not in found:
            found[opcode] = _refusal(_FORBIDDEN_OPCODES[opcode], opcode, s, "the kernel contract refuses it",
                                     "remove it from the source, inline asm included")
        for register in _REGISTER.findall(s.text):
            if register in _SPECIAL_REGISTERS and register not in found:
                found[register] = _refusal(_SPECIAL_REGISTERS[register], register, s,
                                           "timing-dependent behaviour is not allowed", "remove the clock or counter read")
    return list(found.values())


def _external_function_refusals(program: list[Statement]) -> list[Feedback]:
    """Each `.extern .func`: refused at its first direct call, or at its declaration when only its address is taken."""
    declarations = {m.group(1): s for s in program if (m := _EXTERN_FUNCTION.match(s.text))}
    first_call: dict[str, Statement] = {}
    for s in program:
        if (name := _call_target(s)) in declarations:
            first_call.setdefault(name, s)
    return [_refusal(f"a call to {_runtime_function(name)}", name, first_call.get(name, declared),
                     "device code may use only functions defined in the module",
                     "remove it, and any header call that brings it in (cute::print, assert)")
            for name, declared in declarations.items()]


def _global_variable_refusals(program: list[Statement], code: str) -> list[Feedback]:
    """`.global` variables that anything in the module names besides their own declaration.

    NVRTC declares every namespace-scope constexpr object (CCCL's and CuTe's traits, 4019 of them in the CuTe
    fixture, and a candidate's own `constexpr int kTile`) as a `.global` variable that nothing uses: dead data
    that cannot carry state, so only a variable that the code (or another variable's initializer) names is
    refused."""
    uses = Counter(_IDENTIFIER.findall(code))
    return [_refusal("a device variable in global memory", m.group(1), s,
                     "state kept in device memory between calls is not allowed; all state lives in the declared "
                     "workspaces, which the runner refills before every call",
                     "use a declared workspace for scratch, __constant__ for read-only tables, registers or "
                     "__shared__ for per-call state")
            for s in program if (m := _GLOBAL_VARIABLE.fullmatch(s.text)) and uses[m.group(1)] > 1]


def _missing_waits(program: list[Statement], early_entries: Collection[str]) -> list[Feedback]:
    """Each entry launched early whose own code holds no `griddepcontrol.wait`: it could read what the launch
    before it has not yet written."""
    waits = {s.function for s in program
             if s.function is not None and (m := _INSTRUCTION.match(s.text)) and m.group(1) == "griddepcontrol.wait"}
    return [Feedback(stage="static", status="failed", error_type="forbidden_construct",
                     message=f"{entry} is launched early (programmatic dependent launch) but its code never executes "
                             "griddepcontrol.wait: it could read results the launch before it has not written yet",
                     location=f"function {entry}", evidence={"layer": "ptx", "entry": entry},
                     suggestion="execute griddepcontrol.wait (cudaGridDependencySynchronize) before the first read of "
                                "anything an earlier launch of the sequence writes, or drop `early` from the launch")
            for entry in sorted(early_entries) if entry not in waits]


def check_ptx(ptx: str, early_entries: Collection[str] = ()) -> list[Feedback]:
    """One failed 'static' feedback per refused construct in the PTX (its first occurrence), and one per entry
    launched early without a wait (`early_entries`); empty when clean."""
    code = _code(ptx)
    program = list(statements(code))
    return [*_instruction_refusals(program), *_external_function_refusals(program),
            *_global_variable_refusals(program, code), *_missing_waits(program, early_entries)]

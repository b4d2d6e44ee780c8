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
- an entry launched early (programmatic dependent launch) with a path to its exit that does not pass a
  `griddepcontrol.wait`, or a global write, or a load through a pointer to what earlier launches write, before it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
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
    """One PTX statement (a directive or an instruction), its labels apart."""

    text: str
    line: int
    function: str | None  # the function whose body holds it; None at module scope
    labels: tuple[str, ...] = ()  # the labels that name it (branch targets); a label alone gives text ""


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
        labels = tuple(re.findall(r"([\w$]+)\s*:", chunk[:len(chunk) - len(text)]))
        if text.strip() or labels:
            leading = chunk[:len(chunk) - len(text.lstrip())]
            yield Statement(text=text.strip(), line=line + leading.count("\n"), function=function if depth else None,
                            labels=labels)
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


# instructions that end or redirect a thread's path
_BRANCH = re.compile(r"(@!?%?[\w$]+\s+)?bra(?:\.uni)?\s+([\w$]+)$")
_PARAM_LOAD = re.compile(r"ld\.param\.\w+\s+(%[\w$]+)\s*,\s*\[([\w$]+)_param_(\d+)\]")
_OWN_SPACES = {"shared", "local", "param", "const"}  # the block's, the thread's and the launch's own memory
WAIT = "griddepcontrol.wait"


def _opcode(s: Statement) -> list[str]:
    """The statement's opcode split at its dots (`ld.global.nc.f32` -> ld, global, nc, f32), [] for a directive."""
    m = _INSTRUCTION.match(s.text) if s.text else None
    return m.group(1).split(".") if m else []


def _way_out(s: Statement, branch: re.Match[str] | None, where: Mapping[str, list[int]]) -> str | None:
    """What makes `s` (a branch when `branch`) leave the walk without a wait: a return, an indirect branch, or a
    branch out of the entry."""
    root = _opcode(s)[:1]
    if root == ["ret"]:
        return "a return"
    if root == ["brx"]:
        return "an indirect branch"
    if branch and branch.group(2) not in where:
        return "a branch out of the entry"
    return None


def _before_wait(body: list[Statement]) -> tuple[set[int], tuple[Statement | None, str] | None]:
    """The statements some thread may execute before an unpredicated wait, and a way out that passes none (the
    statement, or None for the end of the code, and what it is), if there is one: every path from the entry's
    start. A label that several inlined copies of inline asm define is followed to every definition."""
    where: dict[str, list[int]] = {}
    for i, s in enumerate(body):
        for label in s.labels:
            where.setdefault(label, []).append(i)
    seen: set[int] = set()
    paths = [0]
    while paths:
        i = paths.pop()
        while i < len(body) and i not in seen:
            seen.add(i)
            if body[i].text == WAIT:
                break
            branch = _BRANCH.match(body[i].text)
            if what := _way_out(body[i], branch, where):
                return seen, (body[i], what)
            if branch:
                paths.extend(where[branch.group(2)])
                if not branch.group(1):  # unconditional: this path goes on at the target only
                    break
            i += 1
        else:
            if i >= len(body):
                return seen, (None, "the end of its code")
    return seen, None


def _derived_registers(body: list[Statement], entry: str, guarded: Collection[int]) -> set[str]:
    """The registers whose value may come from one of the `guarded` parameters (pointers to what earlier launches
    write), through any chain of register operations: flow-insensitive, so a superset (a pointer spilled to local
    memory and loaded back is not followed)."""
    tainted = {m.group(1) for s in body if (m := _PARAM_LOAD.match(s.text)) and m.group(2) == entry
               and int(m.group(3)) in guarded}
    grown = True
    while grown:
        grown = False
        for s in body:
            if not (m := _INSTRUCTION.match(s.text)) or _opcode(s)[0] in ("st", "bra", "ret", "red"):
                continue
            operands = s.text[m.end():]
            dest, _, sources = operands.partition("}") if operands.lstrip().startswith("{") else operands.partition(",")
            written = set(_REGISTER.findall(dest))
            if written - tainted and tainted & set(_REGISTER.findall(sources)):
                tainted |= written
                grown = True
    return tainted


def _early_access(s: Statement, tainted: set[str]) -> str | None:
    """What `s` does before the wait that an early entry may not: a call (not followed), a bulk copy, a write to
    global (or generic) memory, or a read through a pointer derived from a guarded parameter."""
    parts = _opcode(s)
    if not parts:
        return None
    root, spaces = parts[0], {p.split("::")[0] for p in parts[1:]}
    if root == "call":
        return "a call (its callee is not checked)"
    if root.startswith("cp") and "async" in parts and "bulk" in parts:
        return "a bulk copy"
    addressed = tainted & set(_REGISTER.findall(s.text.partition("[")[2]))
    if root == "cp" and "async" in parts:  # cp.async.ca/cg.shared.global: reads global memory
        return "a read of an output or workspace" if addressed else None
    if spaces & _OWN_SPACES:
        return None
    if root in ("st", "atom", "red"):
        return "a write to global memory"
    if root in ("ld", "ldu") and addressed:
        return "a read of an output or workspace"
    return None


def _early_refusals(program: list[Statement], early: Mapping[str, Collection[int]]) -> list[Feedback]:
    """Each entry launched early must wait (griddepcontrol.wait) on every path before it exits, and do none of
    `_early_access` before it (`early`: entry -> the indices of its parameters that point to what earlier
    launches write)."""
    out = []
    for entry, guarded in sorted(early.items()):
        body = [s for s in program if s.function == entry]
        if not body:
            problem, at = "its code is not in the PTX", None
        else:
            seen, exit_unwaited = _before_wait(body)
            tainted = _derived_registers(body, entry, guarded)
            access = next(((body[i], what) for i in sorted(seen) if (what := _early_access(body[i], tainted))), None)
            if exit_unwaited:
                at, what = exit_unwaited
                problem = f"a path reaches {what} without griddepcontrol.wait: it may end before the launch before it"
            elif access:
                at, what = access
                problem = f"it makes {what} before griddepcontrol.wait ({' '.join(at.text.split())[:80]!r})"
            else:
                continue
        out.append(Feedback(
            stage="static", status="failed", error_type="early_launch",
            message=f"{entry} is launched early (programmatic dependent launch), but {problem}",
            location=f"function {entry}" + (f", PTX line {at.line}" if at else ""),
            evidence={"layer": "ptx", "entry": entry, "ptx_line": at.line if at else None},
            suggestion="in the entry itself, execute griddepcontrol.wait (sd_wait_earlier_launches) in every thread "
                       "before it writes global memory, reads what an earlier launch of the sequence writes, calls a "
                       "function or returns; or drop `early` from the launch"))
    return out


def check_ptx(ptx: str, early: Mapping[str, Collection[int]] | None = None) -> list[Feedback]:
    """One failed 'static' feedback per refused construct in the PTX (its first occurrence), and one per entry
    launched early that does not wait first (`early`: entry -> the indices of its parameters that point to what
    earlier launches write); empty when clean."""
    code = _code(ptx)
    program = list(statements(code))
    return [*_instruction_refusals(program), *_external_function_refusals(program),
            *_global_variable_refusals(program, code), *_early_refusals(program, early or {})]

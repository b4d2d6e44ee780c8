"""SASS instruction mix of a compiled candidate, read with nvdisasm: works without a GPU.

What the reviewer wants to know from the machine code without running it: are tensor cores used,
are global loads 128-bit wide, does anything go through local memory (spills or stack arrays),
how many barriers and shuffles there are; and whether the machine code holds what the kernel contract
refuses, wherever it came from (the candidate's text, or a header it included: CuTe can print).
"""

from __future__ import annotations

import functools

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

_TENSOR = ("HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BMMA", "BGMMA", "DMMA", "OMMA")
_FUNCTION = re.compile(r"^\s*\.text\.(\w+):")
# an instruction line: its predicate (if any), opcode and operands (text up to the semicolon)
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?P<predicate>@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)\s*(?P<operands>[^;]*)")


# (instruction pattern, what it is): refused in any candidate's machine code
_FORBIDDEN = (
    (re.compile(r"\bCALL\.ABS\b"), "a call into the CUDA device runtime (printf, malloc, assert or a launch)"),
    (re.compile(r"\bBPT\b"), "a trap or breakpoint"),
    (re.compile(r"\bSR_(?:CLOCK|GLOBALTIMER|PM)\w*"), "a clock, timer or performance-counter read"),
    (re.compile(r"\bNANOSLEEP\b"), "a sleep"),
    (re.compile(r"\bPMTRIG\b"), "a performance-monitor event"),
)


class SassCounts(BaseModel):
    """Instruction counts of one entry point (static counts, not executed counts)."""

    instructions: int = 0
    tensor_core: int = 0
    global_loads: int = 0
    global_loads_128: int = 0
    global_stores: int = 0
    global_stores_128: int = 0
    local_loads: int = 0
    local_stores: int = 0
    shared_loads: int = 0
    shared_stores: int = 0
    async_copies: int = 0
    barriers: int = 0
    shuffles: int = 0
    # warp-level synchronisation and votes (__syncwarp, __ballot_sync, __match_*_sync, __reduce_*_sync)
    warp_syncs: int = 0


def find_disassembler() -> str | None:
    """nvdisasm on PATH, else the one the nvidia-cuda-nvdisasm wheel installs next to this Python."""
    if found := shutil.which("nvdisasm"):
        return found
    for root in sys.path:
        for candidate in Path(root).glob("nvidia/cu*/bin/nvdisasm"):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _count(counts: SassCounts, op: str) -> None:
    base = op.split(".")[0]
    counts.instructions += 1
    wide = ".128" in op
    if base in _TENSOR:
        counts.tensor_core += 1
    elif base == "LDG":
        counts.global_loads += 1
        counts.global_loads_128 += wide
    elif base == "STG":
        counts.global_stores += 1
        counts.global_stores_128 += wide
    elif base == "LDL":
        counts.local_loads += 1
    elif base == "STL":
        counts.local_stores += 1
    elif base in ("LDS", "LDSM"):
        counts.shared_loads += 1
    elif base in ("STS", "STSM"):
        counts.shared_stores += 1
    elif base in ("LDGSTS", "UBLKCP", "UTMALDG", "UTMASTG", "UTMAPF"):
        counts.async_copies += 1
    elif base in ("BAR", "SYNCS"):
        counts.barriers += 1
    elif base == "SHFL":
        counts.shuffles += 1
    elif base in ("WARPSYNC", "VOTE", "MATCH", "REDUX"):
        counts.warp_syncs += 1


def parse_sass(listing: str) -> dict[str, SassCounts]:
    """Per-function counts from `nvdisasm -c` output."""
    out: dict[str, SassCounts] = {}
    current: SassCounts | None = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), SassCounts())
        elif current is not None and (m := _INSTRUCTION.search(line)):
            _count(current, m.group("op"))
    return out


class ForbiddenInstruction(BaseModel):
    """The first instruction of one refused kind, and the function that holds it."""

    function: str | None
    instruction: str
    what: str


def forbidden_instructions(listing: str) -> list[ForbiddenInstruction]:
    """Each refused kind of instruction found in `nvdisasm -c` output (its first occurrence); empty when clean."""
    found = []
    for pattern, what in _FORBIDDEN:
        function = None
        for line in listing.splitlines():
            if m := _FUNCTION.match(line):
                function = m.group(1)
            elif (m := _INSTRUCTION.search(line)) and pattern.search(line):
                found.append(ForbiddenInstruction(function=function, instruction=line[m.start("op"):].split(";")[0].strip(),
                                                  what=what))
                break
    return found


_LABEL = re.compile(r"^(\.L_x_\d+):")
_REGISTER = re.compile(r"^R(\d+)$")
_NO_DESTINATION = ("ST", "STS", "STG", "STL", "RED", "BRA", "BAR", "EXIT", "RET", "WARPGROUP", "DEPBAR", "SYNCS",
                   "BSSY", "BSYNC", "WARPSYNC", "NOP", "FENCE", "MEMBAR", "UTMALDG", "UTMASTG", "LDGSTS", "CCTL")


class WgmmaHazard(BaseModel):
    """An instruction that may write a register a warpgroup MMA still in flight reads."""

    function: str | None
    instruction: str
    registers: list[int]


def _written(op: str, operands: list[str]) -> set[int]:
    """The general registers a non-MMA instruction writes: its first operand, as wide as its suffix says."""
    base = op.split(".")[0]
    if base in _NO_DESTINATION or base.startswith("U") or not operands or not (m := _REGISTER.match(operands[0])):
        return set()
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def _gmma_inputs(operands: list[str]) -> set[int]:
    """A warpgroup MMA's register inputs other than its accumulators: A fragments (four registers, when A comes
    from registers) and the sparse metadata word."""
    regs: set[int] = set()
    for i, operand in enumerate(operands[1:], start=1):
        if (m := _REGISTER.match(operand)) and operand != operands[0]:
            regs |= set(range(int(m.group(1)), int(m.group(1)) + (4 if i == 1 else 1)))
    return regs


def wgmma_register_hazards(listing: str) -> list[WgmmaHazard]:
    """Where the code may write a register that a warpgroup MMA in flight still reads (sparse metadata, A
    fragments): the MMA reads them asynchronously, so such a write races with it, and ptxas does not always see it
    (session 7: one group kept in flight across a loop's back edge). A dataflow over each function's branches:
    every register of the open group or of a committed one is in flight until a WARPGROUP.DEPBAR leaves fewer
    newer groups than its age. Conservative where paths join (the youngest age wins)."""
    hazards: list[WgmmaHazard] = []
    functions: dict[str | None, list[tuple[str | None, str, str, list[str]]]] = {}
    labels: dict[str | None, dict[str, int]] = {}
    function = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            function = m.group(1)
        elif m := _LABEL.match(line):
            labels.setdefault(function, {})[m.group(1)] = len(functions.setdefault(function, []))
        elif m := _INSTRUCTION.search(line):
            operands = [o.strip() for o in m.group("operands").split(",") if o.strip()]
            functions.setdefault(function, []).append((m.group("predicate"), m.group("op"),
                                                       line[m.start("op"):].split(";")[0].strip(),
                                                       operands))
    for function, code in functions.items():
        if not any("GMMA" in op for _, op, _, _ in code):
            continue
        targets = labels.get(function, {})
        # state before each instruction: register -> age (-1: the open group, 0: the newest committed one)
        before: list[dict[int, int] | None] = [None] * len(code)
        before[0] = {} if code else None
        work = [0] if code else []
        found: dict[int, set[int]] = {}
        while work:
            i = work.pop()
            state = dict(before[i])
            predicate, op, text, operands = code[i]
            base = op.split(".")[0]
            if "GMMA" in base:
                state.update({r: -1 for r in _gmma_inputs(operands)})  # -1: in the open group
                if "gsb0" in operands:  # the open group is committed (age 0); older groups age
                    state = {r: a + 1 for r, a in state.items()}
            elif op.startswith("WARPGROUP.DEPBAR") and (m := re.search(r"0x([0-9a-f]+)$", operands[-1])):
                state = {r: a for r, a in state.items() if a < int(m.group(1), 16)}
            elif hit := _written(op, operands) & set(state):
                found.setdefault(i, set()).update(hit)
            succ = []
            if base == "BRA" and (t := re.search(r"\((\.L_x_\d+)\)", text)) and t.group(1) in targets:
                succ.append(targets[t.group(1)])
            if not (base in ("BRA", "EXIT", "RET") and predicate is None) and i + 1 < len(code):
                succ.append(i + 1)
            for j in succ:
                old = before[j]
                merged = dict(state) if old is None else {r: min(a, old.get(r, a)) for r, a in {**old, **state}.items()}
                if merged != old:
                    before[j] = merged
                    work.append(j)
        hazards += [WgmmaHazard(function=function, instruction=code[i][2], registers=sorted(regs))
                    for i, regs in sorted(found.items())]
    return hazards


@functools.lru_cache(maxsize=4)
def disassemble(cubin: bytes, timeout_s: float = 60.0) -> str:
    """The `nvdisasm -c` listing; raises RuntimeError with a one-line reason when it cannot be made (a failure is
    not cached). Cached: the contract check and the instruction mix read the same cubin's listing."""
    tool = find_disassembler()
    if tool is None:
        raise RuntimeError("not executed: nvdisasm not found (install nvidia-cuda-nvdisasm)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {proc.stderr.strip()[:200]}")
    return proc.stdout


def analyse_cubin(cubin: bytes, timeout_s: float = 60.0) -> dict[str, SassCounts] | str:
    """Counts per entry point, or a one-line reason why the analysis could not run."""
    try:
        return parse_sass(disassemble(cubin, timeout_s))
    except RuntimeError as exc:
        return str(exc)

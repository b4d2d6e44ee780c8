"""Compilation with NVRTC (through CuPy's bindings): works without a GPU and keeps ptxas's report."""

from __future__ import annotations

import re
import struct
import time

from pydantic import BaseModel

DTYPE_CODES = {"fp32": 0, "fp16": 1, "bf16": 2}


class KernelResources(BaseModel):
    """What ptxas reported for one entry point."""

    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


class CompileResult(BaseModel):
    ok: bool
    arch: str
    seconds: float
    log: str
    resources: dict[str, KernelResources] = {}
    cubin: bytes | None = None
    options: list[str] = []

    model_config = {"ser_json_bytes": "base64", "val_json_bytes": "base64"}


def nvrtc_available() -> str | None:
    """NVRTC's version as 'major.minor', or None when the library cannot be loaded."""
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - any load failure means "not available"
        return None


def parse_ptxas(log: str) -> dict[str, KernelResources]:
    """Per-entry registers, shared memory, stack frame and spills from `--ptxas-options=-v` output."""
    out: dict[str, KernelResources] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = m.group(1)
            out[current] = KernelResources()
        elif current is None:
            continue
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            out[current] = out[current].model_copy(
                update={"stack_bytes": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3))}
            )
        elif m := re.search(r"Used (\d+) registers", line):
            smem = re.search(r"(\d+) bytes smem", line)
            out[current] = out[current].model_copy(
                update={"registers": int(m.group(1)), "shared_bytes": int(smem.group(1)) if smem else 0}
            )
    return out


def complete_elf(image: bytes) -> bytes:
    """The cubin padded to the size its ELF headers declare.

    CuPy's getCUBIN drops the image's last byte (a zero); the driver loads it anyway, but the
    disassembler rejects a truncated file.
    """
    if len(image) < 64 or image[:4] != b"\x7fELF":
        return image
    phoff, shoff = struct.unpack_from("<QQ", image, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 0x36)
    declared = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    return image + b"\x00" * (declared - len(image)) if declared > len(image) else image


def compile_source(source: str, arch: str, options: list[str], name: str = "candidate.cu") -> CompileResult:
    """Compile to a cubin for `arch` (e.g. sm_90). A compile error is a result, not an exception."""
    from cupy.cuda import nvrtc

    opts = [f"--gpu-architecture={arch}", "--std=c++17", "--ptxas-options=-v", *options]
    start = time.perf_counter()
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
            ok = True
        except nvrtc.NVRTCError:
            ok = False
        log = nvrtc.getProgramLog(prog)
        cubin = complete_elf(nvrtc.getCUBIN(prog)) if ok else None
    finally:
        nvrtc.destroyProgram(prog)
    return CompileResult(
        ok=ok,
        arch=arch,
        seconds=time.perf_counter() - start,
        log=log.strip(),
        resources=parse_ptxas(log) if ok else {},
        cubin=cubin,
        options=opts,
    )

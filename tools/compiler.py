"""Compilation with NVRTC (through CuPy's bindings): works without a GPU and keeps ptxas's report.

Candidates may include CUDA's device headers, CCCL (cuda/barrier, cuda/pipeline, cuda/std) and
CUTLASS/CuTe. Their include folders come from pinned wheels (nvidia-cuda-runtime, nvidia-cuda-crt,
nvidia-cuda-cccl, nvidia-cutlass) found through this interpreter's import path, never from a local CUDA
toolkit, so that a machine with no toolkit compiles exactly what the GPU machine compiles.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import struct
import time
from functools import cache
from pathlib import Path

from pydantic import BaseModel


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
    ptx: str | None = None  # what NVVM made before ptxas: the compiled-code check reads it (tools/ptx_check.py)
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


# NVRTC cannot parse the wheel's cuda.h (it starts with host C headers), so `#include <cuda.h>` gets this
# instead: the driver types a kernel may name in its parameters, and nothing else.
DRIVER_TYPES_HEADER = """\
#pragma once
// SparseDitto: device-side stand-in for cuda.h; types only (no driver API under the kernel contract).
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;
// An encoded TMA descriptor (128 bytes, 64-byte aligned), built by the runner and passed by value.
typedef struct CUtensorMap_st {
    alignas(64) cuuint64_t opaque[16];
} CUtensorMap;
"""
# `-default-device`: CuTe and CUTLASS headers declare some helpers without __host__/__device__; device code
# only is compiled here, so unannotated functions are device functions.
BASE_OPTIONS = ("--std=c++17", "--ptxas-options=-v", "-default-device")


class DeviceHeaders(BaseModel):
    """Include folders of the header wheels, each None when its wheel is not installed."""

    cuda: str | None = None  # cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, mma.h (+ crt/), cooperative_groups
    cccl: str | None = None  # cuda/barrier, cuda/pipeline, cuda/std (CuTe needs these under NVRTC)
    cutlass: str | None = None  # cute/, cutlass/

    @property
    def include_dirs(self) -> list[str]:
        # CCCL's own headers include each other both as <cuda/std/...> and as <cccl/cuda/std/...>: its folder and
        # the folder above it (the two wheels may sit in different site folders)
        cccl_parent = str(Path(self.cccl).parent) if self.cccl else None
        return list(dict.fromkeys(d for d in (self.cuda, self.cccl, cccl_parent, self.cutlass) if d))


def _nvidia_include(folder: str, marker: str) -> str | None:
    """The folder `nvidia/cu*/<folder>` of an installed wheel when it holds the file `marker`."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for found in sorted(Path(root).glob(f"cu*/{folder}")):
            if (found / marker).is_file():
                return str(found)
    return None


@cache
def device_headers() -> DeviceHeaders:
    """Where the device headers are; found once per process."""
    cutlass = None
    if spec := importlib.util.find_spec("cutlass_library"):  # located, not imported
        folder = Path(spec.origin).parent / "source" / "include"
        cutlass = str(folder) if (folder / "cute" / "tensor.hpp").is_file() else None
    return DeviceHeaders(cuda=_nvidia_include("include", "cuda_fp16.h"),
                         cccl=_nvidia_include("include/cccl", "cuda/std/version"),
                         cutlass=cutlass)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def toolchain() -> dict[str, str | None]:
    """What compiles candidates on this machine, for `sparseditto doctor`: each component with its version
    and folder, or None when missing (then sources that need it fail to compile, with the reason)."""
    headers = device_headers()

    def found(distribution: str, folder: str | None) -> str | None:
        return f"{_version(distribution) or '?'} ({folder})" if folder else None

    return {
        "NVRTC": nvrtc_available(),
        "CUDA device headers": found("nvidia-cuda-runtime", headers.cuda),
        "CCCL headers": found("nvidia-cuda-cccl", headers.cccl),
        "CUTLASS/CuTe headers": found("nvidia-cutlass", headers.cutlass),
    }


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
    """Compile to a cubin for `arch` (e.g. sm_90a), keeping the PTX it was assembled from, with the device header
    folders on the include path. A compile error is a result, not an exception."""
    from cupy.cuda import nvrtc

    includes = [f"-I{d}" for d in device_headers().include_dirs]
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *includes, *options]
    start = time.perf_counter()
    prog = nvrtc.createProgram(source, name, [DRIVER_TYPES_HEADER.encode()], [b"cuda.h"])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
            ok = True
        except nvrtc.NVRTCError:
            ok = False
        log = nvrtc.getProgramLog(prog)
        cubin = complete_elf(nvrtc.getCUBIN(prog)) if ok else None
        ptx = nvrtc.getPTX(prog).decode() if ok else None
    finally:
        nvrtc.destroyProgram(prog)
    return CompileResult(
        ok=ok,
        arch=arch,
        seconds=time.perf_counter() - start,
        log=log.strip(),
        resources=parse_ptxas(log) if ok else {},
        cubin=cubin,
        ptx=ptx,
        options=opts,
    )

"""What GPU tooling this machine has, found once per process and without creating a CUDA context here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import cache

from pydantic import BaseModel

from sparseditto.tools.profiler import find_ncu
from sparseditto.tools.sanitizer import find_sanitizer

_PROBE = (
    "import json, cupy as cp\n"
    "n = cp.cuda.runtime.getDeviceCount()\n"
    "p = cp.cuda.runtime.getDeviceProperties(0)\n"
    "name = p['name'].decode() if isinstance(p['name'], bytes) else p['name']\n"
    "print(json.dumps({'name': name, 'arch': f\"sm_{p['major']}{p['minor']}\", 'count': n, 'sms': p['multiProcessorCount']}))\n"
)


class DeviceFacts(BaseModel):
    gpu: dict | None
    gpu_error: str | None = None
    nvcc: str | None = None
    ncu: str | None = None
    compute_sanitizer: str | None = None


@cache
def detect() -> DeviceFacts:
    """Probe the GPU in a subprocess (a broken driver must not take this process down).

    Blocking (the probe may take up to a minute, the first time in a process): async code calls it, and
    make_verifier, in a worker thread (`asyncio.to_thread`), as the graph's nodes do; the LangGraph server
    (`langgraph dev`) refuses blocking calls on its event loop."""
    gpu, error = None, None
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            gpu = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            error = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        error = f"probe failed: {exc}"
    return DeviceFacts(
        gpu=gpu,
        gpu_error=error,
        nvcc=shutil.which("nvcc"),
        ncu=find_ncu(),
        compute_sanitizer=find_sanitizer(),
    )

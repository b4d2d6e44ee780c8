"""The kernel contract: what a candidate is. A candidate is data, never host code.

Device source with `extern "C" __global__` entry points, integer template parameters (compiled in as
`-D` macros), compile options from an allow-list, and a declarative launch sequence whose grid, block
and shared memory are expressions over problem symbols and parameters. The runner, not the candidate,
prepares inputs, allocates workspaces and launches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sparseditto.tools.expr import evaluate
from sparseditto.tools.families.base import VALUE_BYTES

_OPTION_PATTERNS = (
    re.compile(r"^-lineinfo$"),
    re.compile(r"^--extra-device-vectorization$"),
    re.compile(r"^--maxrregcount=\d{2,3}$"),
    re.compile(r"^-D[A-Z_][A-Z0-9_]*=-?\d+$"),
)
_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_THREADS_PER_BLOCK = 1024


# the most dynamic shared memory one block may opt in to, by compute capability (CUDA programming guide)
_MAX_SHARED_KIB = {80: 163, 86: 99, 87: 163, 89: 99, 90: 227}


def max_shared_bytes_per_block(arch: str) -> int:
    """The per-block shared-memory limit of an architecture (sm_90a counts as sm_90); 99 KiB when unknown."""
    return _MAX_SHARED_KIB.get(int(re.sub(r"\D", "", arch)), 99) * 1024


def runner_symbols(dtype: str, sms: int) -> dict[str, int]:
    """Symbols the runner adds to every family's: the value size and the device's multiprocessor count."""
    return {"value_bytes": VALUE_BYTES[dtype], "num_sms": sms}


class KernelLaunch(BaseModel):
    """One launch of the sequence: entry point, geometry expressions and argument names, in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    entry: str = Field(pattern=_IDENT)
    grid: tuple[str, str, str]
    block: tuple[str, str, str]
    shared_bytes: str = "0"
    args: tuple[str, ...]


class Workspace(BaseModel):
    """A scratch buffer the runner allocates (uninitialised: the kernels must write before reading)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: Literal["fp32", "int32", "value"]
    size: str


class Geometry(BaseModel):
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


class KernelCandidate(BaseModel):
    """A compilable, launchable kernel for one problem family."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    family: str
    source: str
    parameters: dict[str, int] = {}
    compile_options: tuple[str, ...] = ()
    kernels: tuple[KernelLaunch, ...]
    workspace: dict[str, Workspace] = {}
    preparation: str | None = None
    origin: str = "reference"

    @field_validator("compile_options")
    @classmethod
    def _allowed_options(cls, options: tuple[str, ...]) -> tuple[str, ...]:
        for opt in options:
            if not any(p.match(opt) for p in _OPTION_PATTERNS):
                raise ValueError(f"compile option {opt!r} is not allowed; allowed: -lineinfo, --extra-device-vectorization, --maxrregcount=N, -DNAME=int")
        return options

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, params: dict[str, int]) -> dict[str, int]:
        for name in params:
            if not re.match(r"^[A-Z][A-Z0-9_]*$", name):
                raise ValueError(f"parameter {name!r}: names are upper-case identifiers")
        return params

    def label(self) -> str:
        """Name plus parameters, the way reports and logs show a candidate."""
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.parameters.items()))
        return f"{self.name}({params})"

    def defines(self, dtype_code: int) -> list[str]:
        """The -D options that fix the parameters and the value type at compile time."""
        return [f"-DSD_DTYPE={dtype_code}"] + [f"-D{k}={v}" for k, v in sorted(self.parameters.items())]

    def geometry(self, symbols: Mapping[str, int]) -> list[Geometry]:
        """Evaluate every launch's expressions; raises ExpressionError or ValueError on bad geometry."""
        env = {**symbols, **self.parameters}
        out = []
        for k in self.kernels:
            grid = tuple(evaluate(e, env) for e in k.grid)
            block = tuple(evaluate(e, env) for e in k.block)
            smem = evaluate(k.shared_bytes, env)
            threads = block[0] * block[1] * block[2]
            if min(grid) < 1 or min(block) < 1 or threads > MAX_THREADS_PER_BLOCK or smem < 0:
                raise ValueError(f"{k.entry}: invalid launch grid={grid} block={block} shared={smem}")
            if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
                raise ValueError(f"{k.entry}: grid {grid} exceeds the device limits")
            out.append(Geometry(entry=k.entry, grid=grid, block=block, shared_bytes=smem))
        return out

    def workspace_sizes(self, symbols: Mapping[str, int]) -> dict[str, int]:
        env = {**symbols, **self.parameters}
        return {name: evaluate(w.size, env) for name, w in self.workspace.items()}

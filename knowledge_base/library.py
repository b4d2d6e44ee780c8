"""The reference-kernel library: one `.cu` file per kernel, its metadata in a leading YAML comment block.

Both the planner's strategy choices and the coder's templates come from here, so adding a kernel file
with its metadata makes it available to the offline policies without code changes.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from sparseditto.tools.contract import KernelCandidate, KernelLaunch, Workspace

KERNEL_DIR = Path(__file__).parent / "kernels"
PRELUDE_FILE = KERNEL_DIR / "prelude.cuh"
_FRONT = re.compile(r"^/\*---\n(.*?)\n---\*/\n", re.S)


class Measured(BaseModel):
    """One measured result of the kernel on a GPU, with the file that holds the evidence."""

    model_config = ConfigDict(frozen=True)
    spec: str
    gpu: str
    params: dict[str, int]
    median_us: float
    best_baseline: str
    best_baseline_us: float
    speedup: float
    source: str


class ReferenceKernel(BaseModel):
    """A reference kernel and what it is for; `instantiate` turns it into a candidate."""

    model_config = ConfigDict(frozen=True)
    name: str
    family: str
    operation: str
    format: str
    dtypes: tuple[str, ...]
    archs: tuple[str, ...]
    strategy: str
    summary: str
    parameters: dict[str, tuple[int, ...]]
    kernels: tuple[KernelLaunch, ...]
    workspace: dict[str, Workspace] = {}
    preparation: str | None = None
    measured: tuple[Measured, ...] = ()
    body: str
    path: Path

    def instantiate(self, params: dict[str, int], origin: str = "reference") -> KernelCandidate:
        """A candidate with the given parameters, each checked against its allowed values."""
        missing = set(self.parameters) - set(params)
        if missing:
            raise ValueError(f"{self.name}: missing parameters {sorted(missing)}")
        for key, value in params.items():
            if key not in self.parameters:
                raise ValueError(f"{self.name}: unknown parameter {key}")
            if value not in self.parameters[key]:
                raise ValueError(f"{self.name}: {key}={value} not in {list(self.parameters[key])}")
        return KernelCandidate(
            name=self.name,
            family=self.family,
            source=prelude() + "\n" + self.body,
            parameters=dict(params),
            kernels=self.kernels,
            workspace=self.workspace,
            preparation=self.preparation,
            origin=origin,
        )


@cache
def prelude() -> str:
    return PRELUDE_FILE.read_text()


def _parse(path: Path) -> ReferenceKernel:
    text = path.read_text()
    match = _FRONT.match(text)
    if not match:
        raise ValueError(f"{path}: missing the /*--- metadata ---*/ block")
    meta = yaml.safe_load(match.group(1))
    return ReferenceKernel(**meta, body=text[match.end():], path=path)


@cache
def reference_kernels() -> tuple[ReferenceKernel, ...]:
    """Every reference kernel, sorted by name."""
    return tuple(sorted((_parse(p) for p in KERNEL_DIR.glob("*.cu")), key=lambda k: k.name))


def arch_number(arch: str) -> int:
    """sm_90a -> 90, sm_100 -> 100."""
    return int(re.sub(r"\D", "", arch))


def runs_on(arch: str, archs: tuple[str, ...] | list[str]) -> bool:
    """Whether code written for any of `archs` (minimum architectures) runs on `arch`."""
    return any(arch_number(arch) >= arch_number(a) for a in archs)


def kernels_for(family: str, dtype: str | None = None, arch: str | None = None) -> list[ReferenceKernel]:
    """Reference kernels of a family, filtered by dtype and architecture when given."""
    return [k for k in reference_kernels()
            if k.family == family and (not dtype or dtype in k.dtypes) and (not arch or runs_on(arch, k.archs))]


def get_kernel(name: str) -> ReferenceKernel:
    for k in reference_kernels():
        if k.name == name:
            return k
    raise KeyError(name)

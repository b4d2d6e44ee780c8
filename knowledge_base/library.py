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


def kernels_for(family: str, dtype: str | None = None, arch: str | None = None) -> list[ReferenceKernel]:
    """Reference kernels of a family, filtered by dtype and architecture when given."""
    out = []
    for k in reference_kernels():
        if k.family != family or (dtype and dtype not in k.dtypes):
            continue
        if arch and not any(arch.startswith(a) or int(arch[3:5]) >= int(a[3:5]) for a in k.archs):
            continue
        out.append(k)
    return out


def get_kernel(name: str) -> ReferenceKernel:
    for k in reference_kernels():
        if k.name == name:
            return k
    raise KeyError(name)

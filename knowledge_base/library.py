"""The reference-kernel library: one `.cu` file per kernel in its family's kernels folder, its metadata in a
leading YAML comment block (parameters and their values, the constraints between them, dtypes, archs, launches).

Both the planner's strategy choices and the coder's templates come from here, so adding a kernel file
with its metadata makes it available to the offline policies without code changes.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from sparseditto.tools.contract import AccumulateType, KernelCandidate, KernelLaunch, TensorMap, Workspace
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.expr import ExpressionError, holds
from sparseditto.tools.families import families

PRELUDE_FILE = Path(__file__).parent / "kernels" / "prelude.cuh"
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
    # expressions over the parameters, the problem symbols and value_bytes that every valid choice satisfies
    constraints: tuple[str, ...] = ()
    kernels: tuple[KernelLaunch, ...]
    workspace: dict[str, Workspace] = {}
    streams: tuple[str, ...] = ()
    tensor_maps: dict[str, TensorMap] = {}
    accumulate: AccumulateType = "fp32"
    preparation: str | None = None
    measured: tuple[Measured, ...] = ()
    body: str
    path: Path

    def violated(self, params: dict[str, int], symbols: dict[str, int], dtype: str) -> str | None:
        """The first declared constraint these parameters break for this problem and dtype, else None."""
        env = {**symbols, **params, "value_bytes": dtype_info(dtype).bytes}
        for rule in self.constraints:
            try:
                if not holds(rule, env):
                    return rule
            except ExpressionError as exc:
                return f"{rule} ({exc})"
        return None

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
            source=prelude() + "\n" + family_prelude(self.path.parent) + self.body,
            parameters=dict(params),
            kernels=self.kernels,
            workspace=self.workspace,
            tensor_maps=self.tensor_maps,
            accumulate=self.accumulate,
            preparation=self.preparation,
            streams=self.streams,
            origin=origin,
            arch_specific=any(a.endswith("a") for a in self.archs),
        )


@cache
def prelude() -> str:
    return PRELUDE_FILE.read_text()


@cache
def family_prelude(kernels_dir: Path) -> str:
    """What a family's kernels share (`prelude.cuh` in its kernels folder), or nothing: written once, put in front
    of each of its kernels after the project prelude, so every candidate stays one self-contained source."""
    path = kernels_dir / "prelude.cuh"
    return path.read_text() + "\n" if path.is_file() else ""


def _split(path: Path) -> tuple[dict, str]:
    """(metadata, code) of a kernel file."""
    text = path.read_text()
    match = _FRONT.match(text)
    if not match:
        raise ValueError(f"{path}: missing the /*--- metadata ---*/ block")
    return yaml.safe_load(match.group(1)), text[match.end():]


def _parse(path: Path, family: str) -> ReferenceKernel:
    """A kernel file; one whose metadata names `body_from` (another kernel file of the folder, without `.cu`) holds
    no code of its own: it declares other launches, parameters or dtypes for that file's code, which tells the two
    apart by the compile-time definitions (e.g. SD_DTYPE)."""
    meta, body = _split(path)
    if meta.setdefault("family", family) != family:
        raise ValueError(f"{path}: declares family {meta['family']!r} but lies in {family}'s kernels folder")
    if source := meta.pop("body_from", None):
        if body.strip():
            raise ValueError(f"{path}: takes its code from {source}.cu (body_from) and must hold none of its own")
        origin = path.parent / f"{source}.cu"
        origin_meta, body = _split(origin) if origin.is_file() else (None, "")
        if origin_meta is None or "body_from" in origin_meta:
            raise ValueError(f"{path}: body_from names {source}, which is no kernel file with code in {path.parent}")
    return ReferenceKernel(**meta, body=body, path=path)


@cache
def _kernels_of(folders: tuple[tuple[str, Path], ...]) -> tuple[ReferenceKernel, ...]:
    found = [_parse(p, family) for family, folder in folders for p in sorted(folder.glob("*.cu"))]
    return tuple(sorted(found, key=lambda k: k.name))


def reference_kernels() -> tuple[ReferenceKernel, ...]:
    """Every registered family's reference kernels, sorted by name."""
    return _kernels_of(tuple(sorted((f.name, f.kernels_dir) for f in families().values())))


def arch_number(arch: str) -> int:
    """sm_90a -> 90, sm_100 -> 100."""
    return int(re.sub(r"\D", "", arch))


def runs_on(arch: str, archs: tuple[str, ...] | list[str]) -> bool:
    """Whether code written for any of `archs` runs on `arch`: a plain one (sm_80) is a minimum, an arch-specific
    one (sm_90a) runs on that compute capability only."""
    return any(arch_number(arch) == arch_number(a) if a.endswith("a") else arch_number(arch) >= arch_number(a)
               for a in archs)


def kernels_for(family: str, dtype: str | None = None, arch: str | None = None) -> list[ReferenceKernel]:
    """Reference kernels of a family, filtered by dtype and architecture when given."""
    return [k for k in reference_kernels()
            if k.family == family and (not dtype or dtype in k.dtypes) and (not arch or runs_on(arch, k.archs))]


def get_kernel(name: str) -> ReferenceKernel:
    for k in reference_kernels():
        if k.name == name:
            return k
    raise KeyError(name)

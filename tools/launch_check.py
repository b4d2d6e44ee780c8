"""Every resource of a candidate's launch sequence, checked before anything launches.

Pure (no GPU): the verifier runs it on the spec's tiny instance before the candidate goes to the GPU,
and the runner on every instance before its first launch. Each failure is a `LaunchRejected` with its
own error type, never another exception: expressions that do not evaluate, grid, block and cluster
shapes, static plus dynamic shared memory, registers times threads, workspace sizes, arguments the
runner cannot provide, tensor maps the driver would refuse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sparseditto.tools.compiler import KernelResources
from sparseditto.tools.contract import Geometry, KernelCandidate, ScalarArg
from sparseditto.tools.dtypes import DTYPES
from sparseditto.tools.expr import ExpressionError
from sparseditto.tools.results import ErrorType
from sparseditto.tools.tensormap import ArrayInfo, TensorMapError, TensorMapPlan, plan_tensor_map

# The most workspace one candidate may ask for, all buffers together. Workspaces are scratch (split-K
# partials, reorderings), a few times an operand at most; 8 GiB is about 8x the largest operand of the
# suites (a 16384 x 16384 fp32 matrix is 1 GiB) and a fifth of the smallest data-centre GPU's memory
# (A100 40 GB), so a runaway size expression (M * N * K) is refused before it exhausts the device.
MAX_WORKSPACE_BYTES = 8 << 30
MAX_CLUSTER_SIZE = 8  # the portable cluster size; larger ones need an opt-in that few GPUs grant
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
REGISTERS_PER_BLOCK = 65536
REGISTER_ALLOCATION_UNIT = 256  # registers are handed to warps in units of 256
# the most shared memory (static plus dynamic) one block may have after opting in, by compute capability
# (CUDA programming guide, "Technical Specifications per Compute Capability"); 99 KiB when unknown
_MAX_SHARED_KIB = {70: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 120: 99}
_INT32 = (-(2**31), 2**31 - 1)

ArgKind = Literal["pointer", "int32", "int64", "float32", "tensor_map"]


def arch_number(arch: str) -> int:
    """sm_90a -> 90, sm_100 -> 100."""
    return int(re.sub(r"\D", "", arch))


def max_shared_bytes_per_block(arch: str) -> int:
    """The per-block shared-memory limit of an architecture (sm_90a counts as sm_90)."""
    return _MAX_SHARED_KIB.get(arch_number(arch), 99) * 1024


@dataclass(frozen=True)
class DeviceLimits:
    """The limits launches are checked against: the architecture's, or the device's own when it runs."""

    arch: str
    shared_bytes_per_block: int

    @classmethod
    def for_arch(cls, arch: str) -> "DeviceLimits":
        return cls(arch=arch, shared_bytes_per_block=max_shared_bytes_per_block(arch))

    @property
    def has_clusters(self) -> bool:
        """Thread-block clusters, TMA tensor maps and programmatic dependent launch came with sm_90."""
        return arch_number(self.arch) >= 90


class LaunchRejected(Exception):
    """A launch that must not run; the stage reports it as launch feedback with this error type."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


@dataclass(frozen=True)
class KernelArg:
    """One argument as the runner passes it: a device pointer or tensor map by name, or a scalar's value."""

    name: str
    kind: ArgKind
    value: int | float | None = None


@dataclass(frozen=True)
class LaunchPlan:
    geometries: list[Geometry]
    args: list[list[KernelArg]]
    workspace_sizes: dict[str, int]
    workspace_dtypes: dict[str, str]
    tensor_maps: dict[str, TensorMapPlan]


def plan_launch(candidate: KernelCandidate, symbols: Mapping[str, int], scalars: Mapping[str, float],
                arrays: Mapping[str, ArrayInfo], value_dtype: str, limits: DeviceLimits,
                resources: Mapping[str, KernelResources] | None = None) -> LaunchPlan:
    """Check every launch of `candidate` on one instance; raises LaunchRejected, nothing else.

    `symbols`: the problem's, the preparation's and the runner's; `arrays`: inputs, preparation's arrays
    and outputs (workspaces are added here); `resources`: ptxas's report, when there is one."""
    env = candidate.environment(symbols)
    geometries, sizes, dtypes = _sizes(candidate, symbols, value_dtype, limits, resources)
    all_arrays = {**arrays, **{name: ArrayInfo((sizes[name],), dtypes[name], DTYPES[dtypes[name]].bytes) for name in sizes}}
    maps = _plan_tensor_maps(candidate, all_arrays, env, limits)
    args = [[_argument(a, launch.entry, env, scalars, all_arrays, maps) for a in launch.args] for launch in candidate.kernels]
    return LaunchPlan(geometries=geometries, args=args, workspace_sizes=sizes, workspace_dtypes=dtypes, tensor_maps=maps)


def check_sizes(candidate: KernelCandidate, symbols: Mapping[str, int], value_dtype: str, limits: DeviceLimits,
                resources: Mapping[str, KernelResources] | None = None) -> list[Geometry]:
    """The checks that need symbols only (geometry and workspaces): for a shape whose arrays were never made. The
    launches' geometries as they would go on this device."""
    return _sizes(candidate, symbols, value_dtype, limits, resources)[0]


def _sizes(candidate: KernelCandidate, symbols: Mapping[str, int], value_dtype: str, limits: DeviceLimits,
           resources: Mapping[str, KernelResources] | None) -> tuple[list[Geometry], dict[str, int], dict[str, str]]:
    try:
        geometries = candidate.geometry(symbols)
        sizes = candidate.workspace_sizes(symbols)
    except ExpressionError as exc:
        raise LaunchRejected("invalid_expression", str(exc)) from None
    if geometries and geometries[0].early:
        raise LaunchRejected("early_launch", f"{geometries[0].entry}: the first launch of a sequence cannot begin "
                             "early: nothing of the same call runs before it, and the previous call's must finish first")
    if not limits.has_clusters:  # no programmatic dependent launch before sm_90: an early launch is an ordinary one
        geometries = [g.model_copy(update={"early": False}) for g in geometries]
    for geo in geometries:
        _check_geometry(geo, limits, (resources or {}).get(geo.entry))
    dtypes = {name: value_dtype if w.dtype == "value" else w.dtype for name, w in candidate.workspace.items()}
    _check_workspace(sizes, dtypes)
    return geometries, sizes, dtypes


def _check_geometry(geo: Geometry, limits: DeviceLimits, resources: KernelResources | None) -> None:
    threads = math.prod(geo.block)
    if min(geo.block) < 1 or any(b > m for b, m in zip(geo.block, MAX_BLOCK)) or threads > MAX_THREADS_PER_BLOCK:
        raise LaunchRejected("block_limit", f"{geo.entry}: block {geo.block} ({threads} threads); each dimension "
                             f"at least 1, at most {MAX_BLOCK}, and at most {MAX_THREADS_PER_BLOCK} threads")
    if min(geo.grid) < 1 or any(g > m for g, m in zip(geo.grid, MAX_GRID)):
        raise LaunchRejected("grid_limit", f"{geo.entry}: grid {geo.grid}; each dimension at least 1 and at most {MAX_GRID}")
    size = math.prod(geo.cluster)
    if min(geo.cluster) < 1 or size > MAX_CLUSTER_SIZE:
        raise LaunchRejected("cluster_shape", f"{geo.entry}: cluster {geo.cluster}; each dimension at least 1 and at "
                             f"most {MAX_CLUSTER_SIZE} blocks in all (the portable cluster size)")
    if size > 1 and not limits.has_clusters:
        raise LaunchRejected("cluster_shape", f"{geo.entry}: thread-block clusters need sm_90 or newer, not {limits.arch}")
    if any(g % c for g, c in zip(geo.grid, geo.cluster)):
        raise LaunchRejected("cluster_shape", f"{geo.entry}: grid {geo.grid} does not divide into clusters {geo.cluster}")
    static = resources.shared_bytes if resources else 0
    if geo.shared_bytes < 0 or static + geo.shared_bytes > limits.shared_bytes_per_block:
        raise LaunchRejected("shared_memory_limit", f"{geo.entry}: {static} bytes static plus {geo.shared_bytes} "
                             f"dynamic shared memory; the per-block limit of {limits.arch} is "
                             f"{limits.shared_bytes_per_block // 1024} KiB")
    if resources and resources.registers:
        per_warp = -(-resources.registers * 32 // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        needed = per_warp * -(-threads // 32)
        if needed > REGISTERS_PER_BLOCK:
            raise LaunchRejected("register_limit", f"{geo.entry}: {resources.registers} registers x {threads} threads "
                                 f"need {needed} registers, more than the {REGISTERS_PER_BLOCK} a block can have "
                                 "(fewer threads, or __launch_bounds__ to cap the registers)")


def _check_workspace(sizes: Mapping[str, int], dtypes: Mapping[str, str]) -> None:
    if negative := [n for n, s in sizes.items() if s < 0]:
        raise LaunchRejected("workspace_limit", f"workspace sizes of {negative} are negative")
    total = sum(s * DTYPES[dtypes[n]].bytes for n, s in sizes.items())
    if total > MAX_WORKSPACE_BYTES:
        raise LaunchRejected("workspace_limit", f"workspaces need {total / 2**30:.1f} GiB, more than the "
                             f"{MAX_WORKSPACE_BYTES >> 30} GiB cap")


def _plan_tensor_maps(candidate: KernelCandidate, arrays: Mapping[str, ArrayInfo], env: Mapping[str, int],
                      limits: DeviceLimits) -> dict[str, TensorMapPlan]:
    if candidate.tensor_maps and not limits.has_clusters:
        raise LaunchRejected("tensor_map_invalid", f"TMA tensor maps need sm_90 or newer, not {limits.arch}")
    plans = {}
    for name, tm in candidate.tensor_maps.items():
        if tm.array not in arrays:
            raise LaunchRejected("tensor_map_invalid", f"tensor map {name}: {tm.array!r} is not an array of the "
                                 f"contract; arrays: {', '.join(sorted(arrays))}")
        try:
            plans[name] = plan_tensor_map(name, tm, arrays[tm.array], env)
        except TensorMapError as exc:
            raise LaunchRejected("tensor_map_invalid", str(exc)) from None
        except ExpressionError as exc:
            raise LaunchRejected("invalid_expression", f"tensor map {name}: {exc}") from None
    return plans


def _argument(arg: str | ScalarArg, entry: str, env: Mapping[str, int], scalars: Mapping[str, float],
              arrays: Mapping[str, ArrayInfo], maps: Mapping[str, TensorMapPlan]) -> KernelArg:
    name = arg if isinstance(arg, str) else arg.name
    if isinstance(arg, str):
        if name in maps:
            return KernelArg(name, "tensor_map")
        if name in arrays:
            return KernelArg(name, "pointer")
        kind = "float32" if name in scalars and name not in env else "int32"
    else:
        kind = arg.type
        if name in arrays or name in maps:
            raise LaunchRejected("argument_type", f"{entry}: {name} is an array or tensor map, not a {kind} scalar")
    if name in env:
        if kind == "float32":
            raise LaunchRejected("argument_type", f"{entry}: {name} is an integer symbol, not a float32 scalar")
    elif name in scalars:
        if kind != "float32":
            raise LaunchRejected("argument_type", f"{entry}: {name} is a float scalar, it cannot be passed as {kind}")
    else:
        known = sorted({*arrays, *maps, *env, *scalars})
        raise LaunchRejected("unknown_argument", f"{entry}: argument {name!r} is not an array, tensor map, symbol or "
                             f"scalar the runner provides; known: {', '.join(known)}")
    if kind == "float32":
        return KernelArg(name, kind, float(scalars[name]))
    value = int(env[name])
    if kind == "int32" and not _INT32[0] <= value <= _INT32[1]:
        raise LaunchRejected("argument_type", f"{entry}: {name} = {value} does not fit an int32: pass it as "
                             f"{{name: {name}, type: int64}}")
    if kind == "int64" and not -(2**63) <= value < 2**63:
        raise LaunchRejected("argument_type", f"{entry}: {name} = {value} does not fit an int64")
    return KernelArg(name, kind, value)

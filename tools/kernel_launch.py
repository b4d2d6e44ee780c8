"""Kernel parameters and the one launch path of every candidate launch: the driver's cuLaunchKernelEx.

`KernelParams` holds a host copy of each argument (device pointers, int32/int64/float32 scalars, the
128 bytes of an encoded tensor map, passed by value) and the array of pointers to them that the driver
reads; building it needs no GPU. `DriverLaunch` launches a function loaded by CuPy (its CUfunction
handle) with the launch configuration built once: grid, block, dynamic shared memory and, for clusters,
the cluster-dimension attribute. `bind_launches` makes them for a checked launch plan (the runner's path), and
`launch_candidate` runs a candidate's sequence on the user's own CuPy arrays (the path of an exported launch.py
whose kernels take tensor maps or run in clusters).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from sparseditto.tools.contract import Geometry, KernelCandidate, runner_symbols
from sparseditto.tools.dtypes import DTYPES
from sparseditto.tools.launch_check import DeviceLimits, KernelArg, LaunchPlan, plan_launch
from sparseditto.tools.tensormap import TENSOR_MAP_BYTES, ArrayInfo, encode

DEFAULT_DYNAMIC_SHARED = 48 * 1024  # above this a function's dynamic shared-memory limit must be raised


class _TensorMapValue(ctypes.Structure):
    """The CUtensorMap type: 128 opaque bytes, 64-byte aligned on the device."""

    _fields_ = [("opaque", ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))]


class KernelParams:
    """The kernelParams array of one launch and the host values it points to (kept alive together)."""

    def __init__(self, args: list[KernelArg], pointers: Mapping[str, int], tensor_maps: Mapping[str, bytes]) -> None:
        self.values: list[Any] = []
        for arg in args:
            if arg.kind == "pointer":
                self.values.append(ctypes.c_void_p(pointers[arg.name]))
            elif arg.kind == "tensor_map":
                self.values.append(_TensorMapValue.from_buffer_copy(tensor_maps[arg.name]))
            else:
                ctype = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float}[arg.kind]
                self.values.append(ctype(arg.value))
        self.pointers = (ctypes.c_void_p * max(len(self.values), 1))(*[ctypes.addressof(v) for v in self.values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers)

    def raw(self, index: int) -> bytes:
        """The bytes the driver copies for argument `index` (what the kernel receives)."""
        value = self.values[index]
        return ctypes.string_at(ctypes.addressof(value), ctypes.sizeof(value))


class DriverLaunch:
    """One kernel of the sequence, ready to launch on the current CuPy stream."""

    def __init__(self, function: Any, geometry: Geometry, params: KernelParams) -> None:
        from cuda.bindings import driver as drv

        self._drv = drv
        self.geometry = geometry
        self.params = params
        self.function = drv.CUfunction(function.kernel.ptr)  # CuPy's RawKernel -> its loaded CUfunction
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = geometry.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = geometry.block
        config.sharedMemBytes = geometry.shared_bytes
        attrs = []
        if geometry.cluster != (1, 1, 1):
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = geometry.cluster
            attrs.append(attr)
        if geometry.early:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        self.config = config

    def __call__(self, stream_ptr: int) -> None:
        self.config.hStream = self._drv.CUstream(stream_ptr)
        (err,) = self._drv.cuLaunchKernelEx(self.config, self.function, self.params.address, 0)
        if err != self._drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{self.geometry.entry}: cuLaunchKernelEx failed ({err.name})")


def bind_launches(module: Any, plan: LaunchPlan, pointers: Mapping[str, int]) -> list[DriverLaunch]:
    """The plan's launches bound to the module's functions and the arrays at `pointers` (workspaces included), its
    tensor maps encoded over them; raises TensorMapError for a map the driver refuses."""
    maps = {name: encode(p, pointers[p.array]) for name, p in plan.tensor_maps.items()}
    launches = []
    for geo, args in zip(plan.geometries, plan.args, strict=True):
        fn = module.get_function(geo.entry)
        if geo.shared_bytes > DEFAULT_DYNAMIC_SHARED:
            fn.max_dynamic_shared_size_bytes = geo.shared_bytes
        launches.append(DriverLaunch(fn, geo, KernelParams(args, pointers, maps)))
    return launches


def workspace_arrays(plan: LaunchPlan) -> dict[str, Any]:
    """The plan's workspaces on the device, uninitialised."""
    import cupy as cp

    return {name: cp.empty(size, dtype=DTYPES[plan.workspace_dtypes[name]].storage)
            for name, size in plan.workspace_sizes.items()}


def launch_candidate(candidate: KernelCandidate, module: Any, arrays: Mapping[str, Any], symbols: Mapping[str, int],
                     scalars: Mapping[str, float], value_dtype: str, array_dtypes: Mapping[str, str]) -> None:
    """One call of the candidate's launch sequence on the current CuPy stream, checked and launched as the harness
    launches it (workspaces allocated, tensor maps encoded, clusters set). `arrays`: CuPy arrays by argument name;
    `array_dtypes`: the value type of those whose storage type does not say it (fp16, bf16 ...)."""
    import cupy as cp

    device = cp.cuda.Device()
    limits = DeviceLimits.for_arch(f"sm_{device.compute_capability}")
    infos = {name: ArrayInfo(tuple(a.shape), array_dtypes.get(name, a.dtype.name), a.dtype.itemsize)
             for name, a in arrays.items()}
    plan = plan_launch(candidate, {**symbols, **runner_symbols(value_dtype, device.attributes["MultiProcessorCount"])},
                       scalars, infos, value_dtype, limits)
    workspaces = workspace_arrays(plan)  # held until the launches are queued on the stream
    pointers = {name: a.data.ptr for name, a in {**arrays, **workspaces}.items()}
    stream = cp.cuda.get_current_stream().ptr
    for launch in bind_launches(module, plan, pointers):
        launch(stream)

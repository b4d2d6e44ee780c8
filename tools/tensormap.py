"""TMA tensor maps: a candidate's declaration checked against the driver's rules, then encoded.

`plan_tensor_map` is pure (tested without a GPU): it evaluates the declaration over one problem's
symbols and array, and refuses what cuTensorMapEncodeTiled would refuse or what would let the copy
engine read past the array. `encode` calls the driver (cuda-bindings) and returns the 128 bytes the
kernel receives by value.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from dataclasses import dataclass

from sparseditto.tools.contract import TensorMap
from sparseditto.tools.expr import evaluate

MAX_RANK = 5
MAX_BOX = 256
MAX_ELEMENT_STRIDE = 8
TENSOR_MAP_BYTES = 128
_SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
# element type of the copy, by operand dtype name or, for a preparation's arrays, NumPy's storage name
_DATA_TYPES = {
    "fp32": "FLOAT32", "float32": "FLOAT32", "fp16": "FLOAT16", "float16": "FLOAT16", "bf16": "BFLOAT16",
    "fp8_e4m3": "UINT8", "fp8_e5m2": "UINT8", "int8": "UINT8", "uint8": "UINT8", "uint16": "UINT16",
    "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64", "float64": "FLOAT64",
}
_FLOAT_TYPES = {"FLOAT32", "FLOAT16", "BFLOAT16", "FLOAT64"}


class TensorMapError(ValueError):
    """A tensor map the driver would refuse, or one that reaches past its array."""


@dataclass(frozen=True)
class ArrayInfo:
    """What the launch checks know of an array: shape, element type name and element size."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class TensorMapPlan:
    """A declaration evaluated and checked: exactly the arguments of cuTensorMapEncodeTiled."""

    name: str
    array: str
    data_type: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dimensions 1 and up
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str


def plan_tensor_map(name: str, tm: TensorMap, array: ArrayInfo, env: Mapping[str, int]) -> TensorMapPlan:
    """Evaluate and check one declaration; raises TensorMapError (or ExpressionError from the expressions)."""
    where = f"tensor map {name} over {tm.array}"
    data_type = _DATA_TYPES.get(array.dtype)
    if data_type is None:
        raise TensorMapError(f"{where}: element type {array.dtype} cannot be copied by TMA")
    rank = len(tm.box)
    box = tuple(evaluate(e, env) for e in tm.box)
    element_strides = tuple(evaluate(e, env) for e in tm.element_strides) if tm.element_strides else (1,) * rank
    if tm.dims is not None:
        dims = tuple(evaluate(e, env) for e in tm.dims)
        strides = tuple(evaluate(e, env) for e in tm.strides or ())
    elif len(array.shape) == rank:
        dims = tuple(reversed(array.shape))
        strides = tuple(array.itemsize * math.prod(dims[:i]) for i in range(1, rank))
    else:
        raise TensorMapError(f"{where}: the box has rank {rank}, the array {len(array.shape)} dimensions; "
                             "give dims and strides")
    if any(not 1 <= d <= 2**32 for d in dims):
        raise TensorMapError(f"{where}: dims {dims} must each be between 1 and 2**32")
    if any(not 1 <= b <= MAX_BOX for b in box):
        raise TensorMapError(f"{where}: box {box} must each be between 1 and {MAX_BOX}")
    if any(not 1 <= s <= MAX_ELEMENT_STRIDE for s in element_strides):
        raise TensorMapError(f"{where}: element strides {element_strides} must each be between 1 and {MAX_ELEMENT_STRIDE}")
    if any(s <= 0 or s % 16 or s >= 2**40 for s in strides):
        raise TensorMapError(f"{where}: global strides {strides} bytes must be positive multiples of 16 below 2**40 "
                             "(pad the rows)")
    inner = box[0] * array.itemsize
    if inner % 16:
        raise TensorMapError(f"{where}: the box's inner dimension spans {inner} bytes, not a multiple of 16")
    span = _SWIZZLE_SPAN[tm.swizzle]
    if span is not None and inner > span:
        raise TensorMapError(f"{where}: the box's inner dimension spans {inner} bytes, more than the {tm.swizzle} swizzle")
    if tm.oob_fill == "nan" and data_type not in _FLOAT_TYPES:
        raise TensorMapError(f"{where}: NaN fill needs a floating-point element type, not {array.dtype}")
    reach = dims[0] * array.itemsize + sum((d - 1) * s for d, s in zip(dims[1:], strides))
    if reach > array.nbytes:
        raise TensorMapError(f"{where}: dims {dims} with strides {strides} reach {reach} bytes into an array of "
                             f"{array.nbytes} bytes")
    return TensorMapPlan(name=name, array=tm.array, data_type=data_type, dims=dims, strides=strides, box=box,
                         element_strides=element_strides, swizzle=tm.swizzle, l2_promotion=tm.l2_promotion,
                         oob_fill=tm.oob_fill)


def encode(plan: TensorMapPlan, address: int) -> bytes:
    """The encoded map (128 bytes) for the array at device `address`; raises TensorMapError."""
    from cuda.bindings import driver as drv

    if address % 16:
        raise TensorMapError(f"tensor map {plan.name}: the array {plan.array} starts at an address not 16-byte aligned")
    swizzle = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[plan.swizzle]
    l2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}[plan.l2_promotion]
    oob = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[plan.oob_fill]
    err, tmap = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{plan.data_type}"), len(plan.dims), address,
        [drv.cuuint64_t(d) for d in plan.dims], [drv.cuuint64_t(s) for s in plan.strides],
        [drv.cuuint32_t(b) for b in plan.box], [drv.cuuint32_t(s) for s in plan.element_strides],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
        getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
        getattr(drv.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{oob}"))
    if err != drv.CUresult.CUDA_SUCCESS:
        raise TensorMapError(f"tensor map {plan.name}: cuTensorMapEncodeTiled refused it ({err.name})")
    return ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)

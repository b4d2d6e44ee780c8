"""Element types of kernel operands: host storage, conversions, sizes and poison patterns.

CuPy has no bf16 or fp8 arrays, so those travel as raw bits (uint16 / uint8); ml_dtypes does the
rounding (round-to-nearest-even, saturation rules of each fp8 format) on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import ml_dtypes
import numpy as np

from sparseditto.tools import chunks

DTypeName = Literal["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int32", "int64"]


@dataclass(frozen=True)
class DType:
    """One operand element type. `code` is the SD_DTYPE value the kernel prelude knows it by (value types only)."""

    name: str
    storage: Any  # the numpy dtype arrays of this type are stored in on host and device
    logical: Any  # the numpy (or ml_dtypes) type the bits mean
    bytes: int
    code: int | None
    # written into outputs before every run: a bit pattern a kernel's arithmetic never produces where the type
    # has NaN payloads (fp32, fp16, bf16, e5m2); for the other types it is only an unlikely value
    poison: int
    is_float: bool


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("fp32", np.float32, np.float32, 4, 0, 0x7FC0DEAD, True),
    DType("fp16", np.float16, np.float16, 2, 1, 0x7E5A, True),
    DType("bf16", np.uint16, ml_dtypes.bfloat16, 2, 2, 0x7FDA, True),
    DType("fp8_e4m3", np.uint8, ml_dtypes.float8_e4m3fn, 1, 3, 0x7F, True),
    DType("fp8_e5m2", np.uint8, ml_dtypes.float8_e5m2, 1, 4, 0x7D, True),
    DType("int8", np.int8, np.int8, 1, 5, -128, False),
    DType("int32", np.int32, np.int32, 4, None, -(2**31), False),
    DType("int64", np.int64, np.int64, 8, None, -(2**63), False),
)}
VALUE_DTYPES = ("fp32", "fp16", "bf16")


def dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


def to_storage(values: np.ndarray, name: str) -> np.ndarray:
    """Values rounded to the type and laid out as its storage (raw bits for bf16 and fp8)."""
    d = dtype(name)
    if not d.is_float:
        return np.asarray(values).astype(d.storage)
    values = np.asarray(values)
    out = np.empty(values.shape, dtype=d.logical)
    flat, out_flat = values.reshape(-1), out.reshape(-1)

    def cast(_: int, start: int, stop: int) -> None:  # rounded to float32 first, then to the type
        out_flat[start:stop] = flat[start:stop].astype(np.float32).astype(d.logical)

    chunks.in_chunks(values.size, cast)
    return out.view(d.storage)


def to_float64(stored: np.ndarray, name: str) -> np.ndarray:
    """Storage arrays (raw bits for bf16 and fp8) as float64."""
    d = dtype(name)
    return np.asarray(stored).view(d.logical).astype(np.float64)


def poison_bits(name: str) -> np.generic:
    """The poison as a scalar of the storage type (reinterpreting the bits for floats)."""
    d = dtype(name)
    bits_type = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[d.bytes]
    return bits_type(d.poison % (1 << (8 * d.bytes)))

"""What every problem family answers, so that the runner, agents and reports treat them alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from sparseditto.spec import Spec
    from sparseditto.tools.baselines import BaselineCall

STORAGE_DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}
VALUE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
# Quiet-NaN bit patterns with a payload, written into outputs before every run. A kernel never
# produces these exact bits (the GPU's own NaN is all ones), so an element that still holds them was
# not written, and any other NaN/Inf was written by the kernel.
POISON_BITS = {"fp32": np.uint32(0x7FC0DEAD), "fp16": np.uint16(0x7E5A), "bf16": np.uint16(0x7FDA)}


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 values rounded to the storage type (bf16 kept as raw bits, round-to-nearest-even)."""
    if dtype == "bf16":
        bits = values.astype(np.float32).view(np.uint32)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)
        return (rounded >> 16).astype(np.uint16)
    return values.astype(STORAGE_DTYPES[dtype])


def to_float64(values: np.ndarray, dtype: str) -> np.ndarray:
    """Storage values (raw bits for bf16) as float64."""
    if dtype == "bf16":
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return values.astype(np.float64)


@dataclass
class Problem:
    """One instance: host arrays in storage types, problem symbols, and the name/shape of the output."""

    dtype: str
    symbols: dict[str, int]
    inputs: dict[str, np.ndarray]
    output_name: str
    output_shape: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict)


class ProblemFamily(Protocol):
    name: str
    operation: str

    def symbols(self, spec: "Spec") -> dict[str, int]:
        """M, K, N and nnz for the spec's main shape (nnz expected, for planning)."""

    def make_problem(self, spec: "Spec", seed: int, shape: dict[str, int] | None = None) -> Problem:
        """Fresh seeded inputs; `shape` overrides M/K/N for held-out shapes."""

    def reference(self, problem: Problem) -> np.ndarray:
        """The exact result in float64 from the (rounded) inputs."""

    def tolerance(self, dtype: str) -> float:
        """Largest allowed ||out - ref|| / ||ref||."""

    def flops(self, symbols: dict[str, int]) -> float: ...

    def min_bytes(self, symbols: dict[str, int], dtype: str) -> float:
        """Each input read once and the output written once: the bandwidth floor's byte count."""

    def held_out_shapes(self, spec: "Spec") -> list[dict[str, int]]:
        """Shapes the coder never sees (not multiples of any tile), used in correctness trials."""

    def baselines(self, device_inputs: dict[str, Any], problem: Problem) -> list["BaselineCall"]: ...

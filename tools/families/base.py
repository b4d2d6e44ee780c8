"""The family seam: everything that depends on the operation and its storage format, behind one interface.

A family is a package (`tools/families/<name>/`, or any folder on `SPARSEDITTO_FAMILY_PATH`) whose
`FAMILY` object subclasses `ProblemFamily`. Its reference kernels live in its `kernels_dir`. The runner,
verifier, agents, graph, reports and evals only ever call the methods below.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from sparseditto.tools.dtypes import DTYPES, to_float64, to_storage
from sparseditto.tools.values import ElementBounds, draw_values, element_bound

if TYPE_CHECKING:
    from sparseditto.spec import SpecBase
    from sparseditto.tools.contract import KernelCandidate

# A one-time format preparation: (problem, parameters) -> (extra arrays passed by name, extra symbols)
Prepared = tuple[dict[str, np.ndarray], dict[str, int]]
Preparation = Callable[["Problem", dict[str, int]], Prepared]


@dataclass(frozen=True)
class Output:
    """One output operand: its shape, element type, the largest allowed ||out - ref|| / ||ref|| (families whose
    outputs are not multilinear in the inputs are judged by it) and the accumulation type the family promises.
    `aligned_sum_bits`: where the tensor-core instructions sum their products in fixed point aligned to the largest
    (e4m3 on Hopper), the bits they keep below it; each element may then also be off by 2^-bits of its condition."""

    shape: tuple[int, ...]
    dtype: str
    tolerance: float
    accumulate: str = "fp32"
    aligned_sum_bits: int | None = None


@dataclass
class Problem:
    """One instance: host arrays in storage types, their element types, problem symbols and the outputs."""

    dtype: str  # the spec's value type: what `value_t` (SD_DTYPE) means in the kernels
    symbols: dict[str, int]
    inputs: dict[str, np.ndarray]
    input_dtypes: dict[str, str]
    outputs: dict[str, Output]
    # float32 scalar arguments (scales, alpha ...) drawn with the inputs
    scalars: dict[str, float] = field(default_factory=dict)

    def float_inputs(self) -> list[str]:
        """The inputs that hold values (not structure): those of a floating-point type."""
        return [name for name in self.inputs if DTYPES[self.input_dtypes.get(name, "int32")].is_float]

    def mapped(self, values: Callable[[str, np.ndarray, str], np.ndarray]) -> "Problem":
        """The same structure with each float input replaced by `values(name, float64 array, dtype)`, rounded to its type."""
        inputs = dict(self.inputs)
        for name in self.float_inputs():
            d = self.input_dtypes[name]
            inputs[name] = to_storage(values(name, to_float64(self.inputs[name], d), d), d).reshape(self.inputs[name].shape)
        return replace(self, inputs=inputs)


@dataclass(frozen=True)
class StrategyStart:
    """One of the family's offline strategies: a reference kernel, its starting parameters and the reason."""

    kernel: str
    start: dict[str, int]
    why: str
    # the family's cost model at this start, in microseconds (None: the family ranks by rules alone)
    predicted_us: float | None = None


class ProblemFamily(ABC):
    """What a family answers. Subclasses set the class attributes and implement the abstract methods."""

    name: ClassVar[str]
    operation: ClassVar[str]
    format: ClassVar[str]
    spec_model: ClassVar[type["SpecBase"]]
    kernels_dir: ClassVar[Path]
    preparations: ClassVar[Mapping[str, Preparation]] = {}
    # the speedup over the best baseline at which the offline reviewer stops searching
    target_speedup: ClassVar[float] = 2.0
    # a small spec of the family that runs in seconds, as a spec file's fields (what Studio and error messages show)
    example_spec: ClassVar[Mapping[str, Any] | None] = None
    # every output element a sum of products of one element of each float input (SpMV, SpMM, GEMM, SDDMM ...):
    # then each element is judged against a bound from its own terms (`error_bounds`), else norm-wise
    multilinear: ClassVar[bool] = False
    # the inputs that get IEEE special values in some trials (None: every float input)
    special_inputs: ClassVar[tuple[str, ...] | None] = None
    # how many times the dense tensor-core rate the family's counted FLOPs may run at: a 2:4 product counted
    # dense-equivalent runs on sparse tensor cores at twice it. The timing floor and the report's peak use it.
    flop_rate_factor: ClassVar[float] = 1.0
    # the version of the family's cost model (StrategyStart.predicted_us): the experience store calibrates a kernel
    # only from measurements taken against the same version, since a factor against another model's prediction
    # would be applied to this one's
    cost_model: ClassVar[str] = ""

    # -- the spec ----------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def claims(cls, data: Mapping[str, Any]) -> bool:
        """Whether a raw spec mapping (native form, before validation) is this family's; no two families
        may claim the same mapping. It is the discriminator of the spec union."""

    @abstractmethod
    def symbols(self, spec: "SpecBase") -> dict[str, int]:
        """The problem symbols of the spec's main shape (launch expressions and int arguments use them)."""

    # -- planning ----------------------------------------------------------------------------------
    @abstractmethod
    def features(self, spec: "SpecBase") -> dict[str, float]:
        """Structural features the planner decides by (and the plan reports)."""

    @abstractmethod
    def strategies(self, spec: "SpecBase", features: Mapping[str, float]) -> list[StrategyStart]:
        """The offline planner's strategies, best first; kernels the spec's dtype or arch rule out are dropped
        by the planner, and starts that break a kernel's declared constraints are refused there."""

    def predicted_us(self, spec: "SpecBase", features: Mapping[str, float], kernel: str,
                     params: Mapping[str, int]) -> float | None:
        """The cost model's time for `kernel` at `params` on this problem (None: the family prices nothing), so that
        a choice from elsewhere, e.g. a similar problem's accepted parameters, is priced as it would run here."""
        return None

    # -- instances ---------------------------------------------------------------------------------
    @abstractmethod
    def make_problem(self, spec: "SpecBase", seed: int, shape: Mapping[str, int] | None = None) -> Problem:
        """Fresh seeded inputs; `shape` overrides the main shape's symbols (held-out and small shapes)."""

    @abstractmethod
    def reference(self, problem: Problem) -> dict[str, np.ndarray]:
        """The exact result of every output, in float64, from the (rounded) inputs."""

    @abstractmethod
    def flops(self, symbols: Mapping[str, int]) -> float: ...

    @abstractmethod
    def min_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        """Each input read once and each output written once: the problem's size, and the bandwidth floor's byte
        count unless `floor_bytes` says less."""

    def floor_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        """The bytes no kernel can avoid moving, whatever layout its preparation makes: the timing floor's count."""
        return self.min_bytes(symbols, dtype)

    def operand_bytes(self, symbols: Mapping[str, int], dtype: str) -> float | None:
        """The dense operands' bytes every layout of the sparse one moves (added to a kernel's streams for its
        format's floor); None: the family has no separate sparse operand."""
        return None

    @abstractmethod
    def tiny_shape(self, spec: "SpecBase") -> dict[str, int]:
        """A small instance that launch checks and contract descriptions are made on."""

    @abstractmethod
    def sanitizer_shape(self, spec: "SpecBase") -> dict[str, int]:
        """compute-sanitizer's instance: small (the tools slow kernels down by large factors), not a multiple
        of any tile."""

    @abstractmethod
    def held_out_shapes(self, spec: "SpecBase", rng: np.random.Generator) -> list[dict[str, int]]:
        """Shapes the coder never sees, drawn per verification, used in correctness trials."""

    def sanitizer_instances(self, spec: "SpecBase", main: Problem, seed: int) -> dict[str, Problem]:
        """compute-sanitizer's instances, named; together they must reach every code path a kernel may have at
        the spec's shapes (tails, and whatever the family's structure makes kernels branch on)."""
        return {"tails": self.make_problem(spec, seed, self.sanitizer_shape(spec))}

    def tool_class(self, main: Problem) -> str | None:
        """The shape class of a main instance: one compiled kernel that passed compute-sanitizer and Nsight Compute
        on an instance of this class need not run them again on another of the same class (an evaluation's many
        specs). None (the default): every spec is its own class."""
        return None

    # -- values and bounds -------------------------------------------------------------------------
    def with_fresh_values(self, problem: Problem, rng: np.random.Generator, specials: bool = False) -> Problem:
        """The same structure with every float input drawn anew (varied magnitudes; IEEE specials on request):
        what the runner copies in place between calls, so that nothing learnt from earlier inputs still holds."""
        chosen = self.special_inputs
        return problem.mapped(lambda name, old, d: draw_values(rng, old.size, d, specials and (chosen is None or name in chosen)))

    def element_terms(self, problem: Problem) -> dict[str, np.ndarray] | None:
        """Each output element's number of terms (the reference on all-ones inputs) for a multilinear family, else
        None: an array of the output's shape, or one that broadcasts to it. It depends on the structure only, so
        instances that differ only in values share it."""
        if not self.multilinear:
            return None
        return self.reference(problem.mapped(lambda name, old, d: np.ones_like(old)))

    def conditions(self, problem: Problem) -> dict[str, np.ndarray]:
        """Each output element's condition, sum |a||b| over its terms: a multilinear family's reference on the
        inputs' magnitudes."""
        return self.reference(problem.mapped(lambda name, old, d: np.abs(old)))

    def error_bounds(self, problem: Problem, refs: Mapping[str, np.ndarray], tolerance: float | None = None,
                     terms: Mapping[str, np.ndarray] | None = None) -> dict[str, ElementBounds] | None:
        """Each output element's allowed error (tools/values.py element_bound), for a multilinear family: its
        condition is the reference on |inputs| and its number of terms `terms` (element_terms of this problem
        or of one with the same structure). None for other families (judged norm-wise by each output's
        tolerance)."""
        if not self.multilinear:
            return None
        conditions = self.conditions(problem)
        terms = terms if terms is not None else self.element_terms(problem)
        return {name: element_bound(refs[name], conditions[name], terms[name], out.accumulate, out.dtype, tolerance,
                                    out.aligned_sum_bits)
                for name, out in problem.outputs.items()}

    # -- artifacts and experience ------------------------------------------------------------------
    @abstractmethod
    def launcher(self, candidate: "KernelCandidate", spec: "SpecBase", arch: str) -> str:
        """`launch.py` for the run folder: runs the kernel sequence with CuPy on the user's own arrays."""

    def experience_key(self, spec: "SpecBase") -> dict[str, Any]:
        """What makes two specs the same problem (never the name, budget or baselines)."""
        return spec.model_dump(mode="json", exclude={"name", "budget", "baselines", "tolerance", "seed", "arch"})

    def carried_params(self, spec: "SpecBase", other: "SpecBase", accepted: Mapping[str, int],
                       start: Mapping[str, int]) -> dict[str, int]:
        """A similar problem's accepted parameters as they carry to this spec (`start`: the planner's start of the
        same kernel here): all of them unless the family ties some to a shape that differs."""
        return dict(accepted)

    def experience_distance(self, spec: "SpecBase", other: "SpecBase") -> float:
        """How far apart two specs of this family are (0: same problem); closest stored kernels come first."""
        a, b = self.symbols(spec), self.symbols(other)
        return sum(abs(math.log(max(a[k], 1) / max(b.get(k, 1), 1))) for k in a)

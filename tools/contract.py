"""The kernel contract (v2): what a candidate is. A candidate is data, never host code.

Device source with `extern "C" __global__` entry points, integer template parameters (compiled in as
`-D` macros), compile options from an allow-list, and a declarative launch sequence: grid, block, cluster,
dynamic shared memory and whether a launch may begin early, as expressions over problem symbols and parameters;
typed arguments (device
arrays, int32/int64/float32 scalars, TMA tensor maps passed by value); workspaces with an element type
and a size expression; tensor maps declared over an array (box, element strides, swizzle); the
accumulation type it promises. The runner, not the candidate, prepares inputs, allocates, encodes the
tensor maps and launches; `sparseditto.tools.launch_check` checks every resource before that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from sparseditto.tools.dtypes import DTYPES
from sparseditto.tools.expr import ExpressionError, evaluate

_OPTION_PATTERNS = (
    re.compile(r"^-lineinfo$"),
    re.compile(r"^--extra-device-vectorization$"),
    re.compile(r"^--maxrregcount=\d{2,3}$"),
    re.compile(r"^-D[A-Z_][A-Z0-9_]*=-?\d+$"),
)
_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"
Identifier = Annotated[str, Field(pattern=_IDENT)]
# An integer expression (tools/expr.py); YAML integers are taken as their text.
Expr = Annotated[str, BeforeValidator(lambda v: str(int(v)) if type(v) in (int, bool) else v)]  # YAML true: "1"
Dims3 = tuple[Expr, Expr, Expr]
ScalarType = Literal["int32", "int64", "float32"]
WorkspaceType = Literal["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int32", "int64", "value"]
AccumulateType = Literal["fp32", "fp16", "bf16", "int32", "fp64"]


def runner_symbols(dtype: str, sms: int) -> dict[str, int]:
    """Symbols the runner adds to every family's: the value size and the device's multiprocessor count."""
    return {"value_bytes": DTYPES[dtype].bytes, "num_sms": sms}


class ScalarArg(BaseModel):
    """A scalar argument with its C type given: a problem symbol or parameter (int32, int64) or a problem
    scalar (float32). A plain name gets int32 for symbols and float32 for scalars."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Identifier
    type: ScalarType


Arg = Identifier | ScalarArg


def arg_name(arg: Arg) -> str:
    return arg if isinstance(arg, str) else arg.name


class KernelLaunch(BaseModel):
    """One launch of the sequence: entry point, geometry expressions and arguments, in order.

    Plain argument names are typed by what they name: an array (input, output, preparation's, workspace)
    is a device pointer, a tensor map is passed by value (`const __grid_constant__ CUtensorMap`), a
    symbol or parameter is an int32, a problem scalar a float32."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    entry: Identifier
    grid: Dims3
    block: Dims3
    # thread-block cluster dimensions (sm_90+); the grid must divide into clusters
    cluster: Dims3 = ("1", "1", "1")
    shared_bytes: Expr = "0"
    # nonzero: this launch may begin while the previous one of the sequence is still running (programmatic
    # dependent launch; on GPUs before sm_90 it is an ordinary launch), so that its launch and the work before its
    # wait overlap that one's tail. Every thread of the entry must pass `griddepcontrol.wait` before it exits, calls,
    # writes global memory or reads an output or workspace (the PTX check walks its paths); the wait returns once
    # the earlier launches have finished and their writes are visible
    early: Expr = "0"
    args: tuple[Arg, ...]


class Workspace(BaseModel):
    """A scratch buffer the runner allocates (filled with 0xFF bytes: the kernels must write before reading).
    `size` counts elements; `value` is the spec's value type."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: WorkspaceType
    size: Expr


class TensorMap(BaseModel):
    """A TMA tensor map over one of the arrays, encoded by the runner (cuTensorMapEncodeTiled).

    Dimensions are listed innermost first, as the driver takes them. By default `dims` are the array's
    shape reversed and `strides` its row-major byte strides (dimensions 1 and up); give both to view a
    flat array (a workspace, a preparation's buffer) as a tensor."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    array: Identifier
    box: Annotated[tuple[Expr, ...], Field(min_length=1, max_length=5)]
    element_strides: tuple[Expr, ...] | None = None
    swizzle: Literal["none", "32B", "64B", "128B"] = "none"
    dims: tuple[Expr, ...] | None = None
    strides: tuple[Expr, ...] | None = None
    oob_fill: Literal["zero", "nan"] = "zero"
    l2_promotion: Literal["none", "64B", "128B", "256B"] = "none"

    @model_validator(mode="after")
    def _ranks_agree(self) -> "TensorMap":
        rank = len(self.box)
        if self.element_strides is not None and len(self.element_strides) != rank:
            raise ValueError(f"element_strides has {len(self.element_strides)} entries, the box {rank}")
        if self.dims is not None and len(self.dims) != rank:
            raise ValueError(f"dims has {len(self.dims)} entries, the box {rank}")
        if self.strides is not None and len(self.strides) != rank - 1:
            raise ValueError(f"strides lists dimensions 1 and up: {rank - 1} entries for rank {rank}")
        if (self.dims is None) != (self.strides is None) and rank > 1:
            raise ValueError("dims and strides are given together (or neither)")
        return self


class Geometry(BaseModel):
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int
    early: bool = False


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
    tensor_maps: dict[str, TensorMap] = {}
    # the type the kernel accumulates in, promised for the per-element error bounds
    accumulate: AccumulateType = "fp32"
    preparation: str | None = None
    # the arrays (argument names) each call reads whole, as the preparation laid them out; "name if condition" counts
    # one only where the condition holds on the problem's symbols. With the dense operands they are the format's
    # bandwidth floor (Measurement.format_floor_us); none declared, no such floor
    streams: tuple[str, ...] = ()
    origin: str = "reference"
    # uses features of one architecture only (sm_90a: wgmma, setmaxnreg): compiled for the device's arch-specific
    # target, which runs on that compute capability and no other
    arch_specific: bool = False

    def compile_arch(self, arch: str) -> str:
        """The target to compile for on a device of `arch`: sm_90 -> sm_90a for an arch-specific kernel."""
        return f"{arch}a" if self.arch_specific and not arch.endswith("a") else arch

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

    @model_validator(mode="after")
    def _distinct_names(self) -> "KernelCandidate":
        for name in [*self.workspace, *self.tensor_maps]:
            if not re.match(_IDENT, name):
                raise ValueError(f"{name!r}: workspace and tensor-map names are identifiers")
        if both := set(self.workspace) & set(self.tensor_maps):
            raise ValueError(f"{sorted(both)}: a name is a workspace or a tensor map, not both")
        return self

    def label(self) -> str:
        """Name plus parameters, the way reports and logs show a candidate."""
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.parameters.items()))
        return f"{self.name}({params})"

    def defines(self, dtype_code: int) -> list[str]:
        """The -D options that fix the parameters and the value type at compile time."""
        return [f"-DSD_DTYPE={dtype_code}"] + [f"-D{k}={v}" for k, v in sorted(self.parameters.items())]

    def environment(self, symbols: Mapping[str, int]) -> dict[str, int]:
        """What the expressions see: the problem's and runner's symbols, then the parameters."""
        return {**symbols, **self.parameters}

    def geometry(self, symbols: Mapping[str, int]) -> list[Geometry]:
        """Every launch's expressions evaluated (raises ExpressionError); the limits are launch_check's."""
        env = self.environment(symbols)
        return [Geometry(entry=k.entry, grid=tuple(evaluate(e, env) for e in k.grid),
                         block=tuple(evaluate(e, env) for e in k.block),
                         cluster=tuple(evaluate(e, env) for e in k.cluster),
                         shared_bytes=evaluate(k.shared_bytes, env), early=evaluate(k.early, env) != 0)
                for k in self.kernels]

    def early_entries(self) -> set[str]:
        """The entries a launch may begin early (`early`), by the parameters alone; an expression that needs the
        problem's symbols counts as early (the PTX check then asks for the wait)."""
        found = set()
        for k in self.kernels:
            try:
                if evaluate(k.early, self.parameters) != 0:
                    found.add(k.entry)
            except ExpressionError:
                found.add(k.entry)
        return found

    def workspace_sizes(self, symbols: Mapping[str, int]) -> dict[str, int]:
        """Elements of each workspace (raises ExpressionError)."""
        env = self.environment(symbols)
        return {name: evaluate(w.size, env) for name, w in self.workspace.items()}

"""The user's request: which sparse operation, on which sparsity pattern, shapes, dtype and budget.

A spec loads from YAML/JSON files and dicts, in the native form below or in the short form used in
the user's documents (`task`, `sparsity_pattern`, `matrix_shape`, `gpu_arch`, `baseline`). Every bad
input raises `SpecError` with one line naming the field and what is allowed.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sparseditto.errors import NotImplementedFamilyError, SpecError


class Operation(str, Enum):
    spmv = "spmv"
    spmm = "spmm"
    spgemm = "spgemm"
    sddmm = "sddmm"
    block_sparse_attention = "block_sparse_attention"
    dynamic_sparse_attention = "dynamic_sparse_attention"
    topk_gradient = "topk_gradient"


IMPLEMENTED_OPERATIONS = {Operation.spmv, Operation.spmm}
DTYPES = ("fp32", "fp16", "bf16")
BASELINES = ("cusparse", "cublas_dense", "cusparselt")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UnstructuredPattern(_Strict):
    """Random nonzeros. Row lengths: equal (`uniform`), heavy-tailed (`power_law`) or near the diagonal (`banded`)."""

    kind: Literal["unstructured"] = "unstructured"
    distribution: Literal["uniform", "power_law", "banded"] = "uniform"
    density: Annotated[float, Field(gt=0, le=1)] | None = None
    nnz_per_row: Annotated[float, Field(gt=0)] | None = None
    power_law_exponent: Annotated[float, Field(gt=1.5, le=4)] = 2.5

    @model_validator(mode="after")
    def _one_density(self) -> "UnstructuredPattern":
        if (self.density is None) == (self.nnz_per_row is None):
            raise ValueError("give exactly one of 'density' (0 < d <= 1) or 'nnz_per_row' (> 0)")
        return self

    def mean_row_length(self, K: int) -> float:
        """Nonzeros per row on average, whichever of density and nnz_per_row was given."""
        return self.nnz_per_row if self.nnz_per_row is not None else self.density * K


class MatrixFilePattern(_Strict):
    """A real matrix: Matrix Market (.mtx) or SciPy sparse (.npz). Its shape sets M and K."""

    kind: Literal["matrix_file"] = "matrix_file"
    path: Path


class BlockSparsePattern(_Strict):
    kind: Literal["block_sparse"] = "block_sparse"
    block_size: tuple[int, int]
    density: Annotated[float, Field(gt=0, le=1)]


class StructuredNMPattern(_Strict):
    kind: Literal["n_m"] = "n_m"
    n: int = 2
    m: int = 4


Pattern = Annotated[
    UnstructuredPattern | MatrixFilePattern | BlockSparsePattern | StructuredNMPattern,
    Field(discriminator="kind"),
]


class Budget(_Strict):
    iterations: Annotated[int, Field(ge=1, le=1000)] = 8
    wall_seconds: Annotated[float, Field(gt=0)] = 1800.0


class Spec(_Strict):
    """One request. M x K is the sparse matrix A; N is the width of the dense operand (1 for SpMV)."""

    name: str = "spec"
    operation: Operation
    pattern: Pattern
    M: Annotated[int, Field(ge=1, le=1 << 30)] | None = None
    K: Annotated[int, Field(ge=1, le=1 << 30)] | None = None
    N: Annotated[int, Field(ge=1, le=1 << 20)] = 1
    dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    arch: Annotated[str, Field(pattern=r"^sm_\d{2,3}a?$")] | None = None
    baselines: tuple[Literal["cusparse", "cublas_dense", "cusparselt"], ...] = ("cusparse", "cublas_dense")
    tolerance: Annotated[float, Field(gt=0, lt=1)] | None = None
    budget: Budget = Budget()
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _default_pattern_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pattern"), dict) and "kind" not in data["pattern"]:
            data = {**data, "pattern": {**data["pattern"], "kind": "unstructured"}}
        return data

    @model_validator(mode="after")
    def _shapes(self) -> "Spec":
        if isinstance(self.pattern, MatrixFilePattern):
            return self
        if self.M is None or self.K is None:
            raise ValueError("M and K are required unless the pattern is a matrix file")
        if self.operation == Operation.spmv and self.N != 1:
            raise ValueError("spmv has N = 1; leave N out or use operation 'spmm'")
        if isinstance(self.pattern, UnstructuredPattern):
            per_row = self.pattern.mean_row_length(self.K)
            if per_row > self.K:
                raise ValueError(f"nnz_per_row {per_row:g} exceeds K = {self.K}")
            if per_row * self.M > 2**31 - 1:
                raise ValueError("more than 2^31-1 nonzeros: int32 CSR indices cannot hold this matrix")
        return self

    @property
    def family(self) -> str:
        """The problem family (operation + storage format) that serves this spec."""
        if isinstance(self.pattern, (UnstructuredPattern, MatrixFilePattern)):
            return f"csr_{self.operation.value}"
        return f"{self.pattern.kind}_{self.operation.value}"


_DOC_TASKS = {
    "sparse_matmul_kernel": "spmm",
    "spmm": "spmm",
    "spmv": "spmv",
    "sparse_matvec_kernel": "spmv",
    "sddmm": "sddmm",
}
_DOC_BASELINES = {"dense_cublas": "cublas_dense", "cublas": "cublas_dense", "cusparse": "cusparse", "cusparselt": "cusparselt"}


def _from_document_form(data: dict[str, Any]) -> dict[str, Any]:
    """Translate the short form of the user's documents into the native fields."""
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in {"task", "sparsity_pattern", "matrix_shape", "gpu_arch", "baseline"}}
    task = data.get("task")
    if task not in _DOC_TASKS:
        raise SpecError(f"task: unknown task {task!r}; allowed: {', '.join(sorted(_DOC_TASKS))}")
    out["operation"] = _DOC_TASKS[task]
    sp = dict(data.get("sparsity_pattern") or {})
    kind = sp.pop("type", "unstructured")
    ratio = sp.pop("sparsity_ratio", None)
    density = sp.pop("density", None)
    if ratio is not None:
        density = 1.0 - float(ratio)
    if kind == "block_sparse":
        out["pattern"] = {"kind": "block_sparse", "block_size": sp.get("block_size", [32, 32]), "density": density}
    elif kind in {"n_m", "2:4", "structured_2_4", "nm"}:
        out["pattern"] = {"kind": "n_m", "n": sp.get("n", 2), "m": sp.get("m", 4)}
    elif kind in {"unstructured", "uniform", "random", "power_law", "banded"}:
        dist = kind if kind in {"power_law", "banded"} else sp.pop("distribution", "uniform")
        out["pattern"] = {"kind": "unstructured", "distribution": dist, "density": density, **sp}
    else:
        raise SpecError(f"sparsity_pattern.type: unknown pattern {kind!r}; allowed: unstructured, power_law, banded, block_sparse, 2:4")
    shape = data.get("matrix_shape")
    if shape is not None:
        if not (isinstance(shape, (list, tuple)) and len(shape) in (2, 3)):
            raise SpecError("matrix_shape: give [M, K] or [M, K, N]")
        out["M"], out["K"] = shape[0], shape[1]
        if len(shape) == 3:
            out["N"] = shape[2]
        elif out["operation"] == "spmm":
            out.setdefault("N", shape[1])
    if "gpu_arch" in data:
        out["arch"] = data["gpu_arch"]
    if "baseline" in data:
        names = data["baseline"] if isinstance(data["baseline"], list) else [data["baseline"]]
        try:
            out["baselines"] = [_DOC_BASELINES[n] for n in names]
        except KeyError as exc:
            raise SpecError(f"baseline: unknown baseline {exc.args[0]!r}; allowed: {', '.join(_DOC_BASELINES)}") from None
    return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in {"unstructured", "matrix_file", "block_sparse", "n_m"}))
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc or 'spec'}: {msg}" + (f" (got {err['input']!r})" if err["type"] not in {"value_error", "missing"} and not isinstance(err.get("input"), dict) else "")


def parse_spec(data: dict[str, Any], *, require_implemented: bool = True) -> Spec:
    """Validate a spec given as a dict, in either form; refuse families that have no implementation."""
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    if "task" in data:
        data = _from_document_form(data)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_first_error(exc)) from None
    if require_implemented:
        check_implemented(spec)
    return spec


def check_implemented(spec: Spec) -> None:
    from sparseditto.tools.families import FAMILIES

    if spec.family not in FAMILIES:
        raise NotImplementedFamilyError(
            f"{spec.family}: this problem family is not implemented yet; implemented: {', '.join(sorted(FAMILIES))}"
        )
    if spec.arch is not None and spec.arch not in {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}:
        raise SpecError(f"arch: {spec.arch} is not supported; allowed: sm_80, sm_86, sm_89, sm_90, sm_90a")


def load_spec(path: str | Path, *, require_implemented: bool = True) -> Spec:
    """Read a spec from a YAML or JSON file. Relative matrix paths resolve against the spec's folder."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such spec file")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
        pat = data.get("pattern")
        if isinstance(pat, dict) and pat.get("kind") == "matrix_file" and not Path(pat.get("path", "")).is_absolute():
            data["pattern"] = {**pat, "path": str(path.parent / pat["path"])}
    return parse_spec(data, require_implemented=require_implemented)

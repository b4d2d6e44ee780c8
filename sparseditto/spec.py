"""The user's request: which sparse operation, on which sparsity pattern, shapes, dtype and budget.

A spec loads from YAML/JSON files and dicts, in the native form below or in the short form used in
the user's documents (`task`, `sparsity_pattern`, `matrix_shape`, `gpu_arch`, `baseline`). Every bad
input raises `SpecError` with one line naming the field and what is allowed.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError

from sparseditto.errors import NotImplementedFamilyError, SpecError


# Operations users ask for; the families registered decide which of them run today.
KNOWN_OPERATIONS = ("spmv", "spmm", "spgemm", "sddmm", "block_sparse_attention", "dynamic_sparse_attention",
                    "topk_gradient")
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(Strict):
    iterations: Annotated[int, Field(ge=1, le=1000)] = 8
    wall_seconds: Annotated[float, Field(gt=0)] = 1800.0


class SpecBase(Strict):
    """The fields every family's spec shares. A family's spec model subclasses it, fixing `family` to its
    name (a Literal with that default) and adding its own fields (shapes, pattern, ...)."""

    family: str
    name: str = "spec"
    operation: str
    dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    arch: Annotated[str, Field(pattern=r"^sm_\d{2,3}a?$")] | None = None
    # library names of the baseline registry; empty: every library registered for the family
    baselines: tuple[str, ...] = ()
    tolerance: Annotated[float, Field(gt=0, lt=1)] | None = None
    budget: Budget = Budget()
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0


# Every module names a spec by this type; the value is always an instance of one family's model.
Spec = SpecBase


_DOC_TASKS = {
    "sparse_matmul_kernel": "spmm",
    "spmm": "spmm",
    "spmv": "spmv",
    "sparse_matvec_kernel": "spmv",
    "sddmm": "sddmm",
}
_DOC_BASELINES = {"dense_cublas": "cublas", "cublas_dense": "cublas", "cublas": "cublas", "cusparse": "cusparse",
                  "cusparselt": "cusparselt"}


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


def _first_error(exc: ValidationError, data: Any) -> str:
    """One line: the field's dotted path (without the union tags pydantic puts in it) and what is wrong."""
    err = exc.errors()[0]
    parts, node, loc_parts = [], data, err["loc"]
    for i, p in enumerate(loc_parts):
        missing_field = err["type"] == "missing" and i == len(loc_parts) - 1
        if isinstance(node, dict) and isinstance(p, str) and p not in node and not missing_field:
            continue  # a union's tag (family, pattern kind), not a field the user wrote
        parts.append(str(p))
        node = node.get(p) if isinstance(node, dict) else node[p] if isinstance(node, list) and isinstance(p, int) and p < len(node) else None
    loc = ".".join(parts)
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc or 'spec'}: {msg}" + (f" (got {err['input']!r})" if err["type"] not in {"value_error", "missing"} and not isinstance(err.get("input"), dict) else "")


def _family_tag(data: Any) -> str | None:
    """The spec union's discriminator: the `family` field when given, else the one family that claims the data."""
    from sparseditto.tools.families import families

    if isinstance(data, SpecBase):
        return data.family
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("family"), str):
        return data["family"]
    return next((f.name for f in families().values() if f.claims(data)), None)


@cache
def _union(names: tuple[str, ...]) -> TypeAdapter:
    from sparseditto.tools.families import families

    members = tuple(Annotated[families()[n].spec_model, Tag(n)] for n in names)
    return TypeAdapter(Annotated[Union[members], Discriminator(_family_tag)])  # noqa: UP007 - built at run time


def spec_union() -> TypeAdapter:
    """The discriminated union of every registered family's spec model (also Studio's input schema)."""
    from sparseditto.tools.families import families

    return _union(tuple(sorted(families())))


def _no_family_error(data: dict[str, Any]) -> SpecError:
    from sparseditto.tools.families import families

    op = data.get("operation")
    registered = ", ".join(sorted(families()))
    if isinstance(data.get("family"), str):
        return SpecError(f"family: {data['family']!r} is not a registered family; registered: {registered}")
    if op not in KNOWN_OPERATIONS:
        return SpecError(f"operation: unknown operation {op!r}; allowed: {', '.join(KNOWN_OPERATIONS)}")
    kind = (data.get("pattern") or {}).get("kind") if isinstance(data.get("pattern"), dict) else None
    return NotImplementedFamilyError(f"{op}{f' on a {kind} pattern' if kind else ''}: this problem family is not "
                                     f"implemented yet; implemented: {registered}")


def parse_spec(data: dict[str, Any] | SpecBase) -> SpecBase:
    """Validate a spec given as a dict (either form) into its family's model; refuse what no family serves."""
    if isinstance(data, SpecBase):
        return data
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    if "task" in data:
        data = _from_document_form(data)
    from sparseditto.tools.families import families

    if _family_tag(data) not in families():
        raise _no_family_error(data)
    try:
        spec = spec_union().validate_python(data)
    except ValidationError as exc:
        raise SpecError(_first_error(exc, data)) from None
    _check_registered(spec)
    return spec


def _check_registered(spec: SpecBase) -> None:
    from sparseditto.tools.baselines import libraries_for

    if spec.arch is not None and spec.arch not in ARCHS:
        raise SpecError(f"arch: {spec.arch} is not supported; allowed: {', '.join(ARCHS)}")
    known = libraries_for(spec.family)
    if unknown := [b for b in spec.baselines if b not in known]:
        raise SpecError(f"baselines: {', '.join(unknown)} not available for {spec.family}; allowed: {', '.join(known)}")


def load_spec(path: str | Path) -> SpecBase:
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
    return parse_spec(data)

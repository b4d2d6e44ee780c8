"""The user's request: which sparse operation, on which sparsity pattern, shapes, dtype and budget.

A spec loads from YAML/JSON files and dicts, in the native form below or in the short form used in
the user's documents (`task`, `sparsity_pattern`, `matrix_shape`, `gpu_arch`, `baseline`). Every bad
input raises `SpecError` with one line naming the field (or the file) and what is allowed; the line
quotes at most a few dozen characters of the input itself.

Files are read with limits: at most 1 MiB, UTF-8 text, YAML without aliases, duplicate keys or nesting
deeper than a spec needs. A valid spec must also fit: its operands, output and the harness's copies of
them (about `HARNESS_COPIES` times the problem's bytes) in this machine's memory and in the memory of the
largest GPU SparseDitto supports.
"""

from __future__ import annotations

import json
import math
import os
import typing
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError, field_validator,
                      model_validator)

from sparseditto.errors import NotImplementedFamilyError, SpecError, clip, clip_path, shown

# Operations users ask for; the families registered decide which of them run today.
KNOWN_OPERATIONS = ("spmv", "spmm", "spgemm", "sddmm", "block_sparse_attention", "dynamic_sparse_attention",
                    "topk_gradient")
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")

# limits of a spec file
MAX_SPEC_BYTES = 64 << 10
MAX_DEPTH = 16
MAX_VALUES = 100_000
# memory: a run holds the operands and output several times (pristine copies, value sets, the float64
# reference on the host); the device limit is the largest GPU supported, since the spec is judged before any
# GPU is looked at (a smaller GPU refuses what does not fit it when the run allocates)
HARNESS_COPIES = 4
DEVICE_MEMORY_BYTES = 141 * 10**9
DEVICE_NAME = "H200, 141 GB"


def _numeric_kind(annotation: Any) -> str | None:
    """'integer' or 'number' when a field's type is an int or a float (possibly optional or annotated)."""
    if annotation is bool:
        return None
    if annotation is int:
        return "integer"
    if annotation is float:
        return "number"
    kinds = {_numeric_kind(a) for a in typing.get_args(annotation) if a is not type(None)} - {None}
    return "number" if "number" in kinds else kinds.pop() if kinds else None


class _Boolean:
    """true/false given where a number goes: pydantic refuses it with a type error at the field's place (it
    would read the boolean itself as 0 or 1)."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


class Strict(BaseModel):
    """A spec model: unknown fields refused, no NaN or infinity, and no true/false where a number goes."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            bad = {k: _Boolean(v) for k, v in data.items()
                   if isinstance(v, bool) and k in cls.model_fields and _numeric_kind(cls.model_fields[k].annotation)}
            if bad:
                data = {**data, **bad}
        return data


class Budget(Strict):
    iterations: Annotated[int, Field(ge=1, le=1000)] = 8
    wall_seconds: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] = 1800.0


class SpecBase(Strict):
    """The fields every family's spec shares. A family's spec model subclasses it, fixing `family` to its
    name (a Literal with that default) and adding its own fields (shapes, pattern, ...)."""

    family: str
    name: Annotated[str, Field(min_length=1, max_length=255)] = "spec"
    operation: str
    dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    arch: Annotated[str, Field(pattern=r"^sm_\d{2,3}a?$")] | None = None
    # library names of the baseline registry; empty: every library registered for the family
    baselines: Annotated[tuple[str, ...], Field(max_length=16)] = ()
    tolerance: Annotated[float, Field(gt=0, lt=1)] | None = None
    budget: Budget = Budget()
    seed: int = 0

    @field_validator("seed", mode="before")
    @classmethod
    def _seed_range(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 2**63:
            raise ValueError(f"must be an integer with 0 <= seed < 2**63 (got {shown(value)})")
        return value


# Every module names a spec by this type; the value is always an instance of one family's model.
Spec = SpecBase


# ---- the short form of the user's documents -------------------------------------------------------------

_DOC_TASKS = {
    "sparse_matmul_kernel": "spmm",
    "spmm": "spmm",
    "spmv": "spmv",
    "sparse_matvec_kernel": "spmv",
    "sddmm": "sddmm",
}
_DOC_BASELINES = {"dense_cublas": "cublas", "cublas_dense": "cublas", "cublas": "cublas", "cusparse": "cusparse",
                  "cusparselt": "cusparselt"}
_DOC_FIELDS = {"task", "sparsity_pattern", "matrix_shape", "gpu_arch", "baseline"}
_DOC_PATTERNS = "unstructured, power_law, banded, block_sparse, 2:4"
# native field -> the document field it came from, for error messages in the user's own words
_DOC_NAMES = {"operation": "task", "pattern": "sparsity_pattern", "M": "matrix_shape", "K": "matrix_shape",
              "N": "matrix_shape", "arch": "gpu_arch", "baselines": "baseline"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _from_document_form(data: dict[str, Any]) -> dict[str, Any]:
    """Translate the short form of the user's documents into the native fields."""
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in _DOC_FIELDS}
    for native, doc in _DOC_NAMES.items():
        shape = data.get("matrix_shape")
        if native in data and doc in data and not (native == "N" and isinstance(shape, list) and len(shape) == 2):
            raise SpecError(f"{native}: given twice, as {native} and in {doc}; give it once", field=native)
    if "pattern" in data:
        raise SpecError("pattern: the document form describes the pattern in sparsity_pattern", field="pattern")
    task = data.get("task")
    if not isinstance(task, str) or task not in _DOC_TASKS:
        raise SpecError(f"task: unknown task {shown(task)}; allowed: {', '.join(sorted(_DOC_TASKS))}", field="task")
    out["operation"] = _DOC_TASKS[task]
    given = data.get("sparsity_pattern")
    if given is not None and not isinstance(given, dict):
        raise SpecError(f"sparsity_pattern: must be a mapping such as {{type: unstructured, sparsity_ratio: 0.95}} "
                        f"(got {shown(given)})", field="sparsity_pattern")
    sp = dict(given or {})
    kind = sp.pop("type", "unstructured")
    ratio = sp.pop("sparsity_ratio", None)
    density = sp.pop("density", None)
    if ratio is not None:
        if not _is_number(ratio) or not 0 <= ratio < 1:
            raise SpecError(f"sparsity_pattern.sparsity_ratio: must be a number with 0 <= ratio < 1, the share of "
                            f"zeros (got {shown(ratio)})", field="sparsity_pattern.sparsity_ratio")
        if density is not None:
            raise SpecError("sparsity_pattern: give sparsity_ratio or density, not both", field="sparsity_pattern")
        density = 1.0 - float(ratio)
    if not isinstance(kind, str):
        raise SpecError(f"sparsity_pattern.type: must be one of {_DOC_PATTERNS} (got {shown(kind)})",
                        field="sparsity_pattern.type")
    if kind == "block_sparse":
        out["pattern"] = {"kind": "block_sparse", "block_size": sp.get("block_size", [32, 32]), "density": density}
    elif kind in {"n_m", "2:4", "structured_2_4", "nm"}:
        out["pattern"] = {"kind": "n_m", "n": sp.get("n", 2), "m": sp.get("m", 4)}
    elif kind in {"unstructured", "uniform", "random", "power_law", "banded"}:
        if density is None and "nnz_per_row" not in sp:
            raise SpecError("sparsity_pattern.sparsity_ratio: required field is missing: give sparsity_ratio (the share "
                            "of zeros, 0 <= ratio < 1), density or nnz_per_row", field="sparsity_pattern.sparsity_ratio")
        dist = kind if kind in {"power_law", "banded"} else sp.pop("distribution", "uniform")
        out["pattern"] = {"kind": "unstructured", "distribution": dist, "density": density, **sp}
    else:
        raise SpecError(f"sparsity_pattern.type: unknown pattern {shown(kind)}; allowed: {_DOC_PATTERNS}",
                        field="sparsity_pattern.type")
    shape = data.get("matrix_shape")
    if shape is not None:
        if not (isinstance(shape, (list, tuple)) and len(shape) in (2, 3)):
            raise SpecError(f"matrix_shape: give [M, K] or [M, K, N] (got {shown(shape)})", field="matrix_shape")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape):
            raise SpecError(f"matrix_shape: the sizes must be positive integers (got {shown(shape)})", field="matrix_shape")
        out["M"], out["K"] = shape[0], shape[1]
        if len(shape) == 3:
            out["N"] = shape[2]
        elif out["operation"] == "spmm":
            out.setdefault("N", shape[1])
    if "gpu_arch" in data:
        out["arch"] = data["gpu_arch"]
    if "baseline" in data:
        names = data["baseline"] if isinstance(data["baseline"], list) else [data["baseline"]]
        if not names:
            raise SpecError(f"baseline: give one or a list of {', '.join(_DOC_BASELINES)}", field="baseline")
        bad = next((n for n in names if not isinstance(n, str) or n not in _DOC_BASELINES), None)
        if bad is not None:
            raise SpecError(f"baseline: unknown baseline {shown(bad)}; allowed: {', '.join(_DOC_BASELINES)}",
                            field="baseline")
        out["baselines"] = [_DOC_BASELINES[n] for n in names]
    return out


# ---- pydantic's errors as one line ----------------------------------------------------------------------

def _what_is_wrong(err: dict[str, Any], model_fields: list[str]) -> str:
    """What is wrong with the value, in the words of a spec (not of pydantic's types)."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field" + (f"; allowed: {', '.join(model_fields)}" if model_fields else "")
    if kind in {"int_type", "int_parsing", "int_parsing_size"}:
        return "must be an integer"
    if kind == "int_from_float":
        return "must be a whole number"
    if kind in {"float_type", "float_parsing"}:
        return "must be a number"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return "must be a mapping of fields"
    if kind in {"tuple_type", "list_type"}:
        return "must be a list"
    if kind in {"path_type", "path_parsing"}:
        return "must be a file path (a string)"
    if kind == "string_type":
        return "must be a string"
    if kind in {"too_long", "string_too_long"}:
        return f"must have at most {ctx.get('max_length')} {'characters' if kind == 'string_too_long' else 'items'}"
    if kind == "string_pattern_mismatch" and err["loc"][-1] == "arch":
        return f"must be an architecture such as {', '.join(ARCHS)}"
    if kind == "union_tag_invalid":
        return f"unknown {ctx.get('discriminator', 'kind').strip(chr(39))} {shown(ctx.get('tag'))}; allowed: {ctx.get('expected_tags')}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        bound = next(iter(ctx.values()), "?")
        words = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        return f"must be {words} {bound}"
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return msg.replace("Input should be", "must be", 1).replace("String should", "must", 1)


def _first_error(exc: ValidationError, data: Any, renames: dict[str, str] | None = None) -> SpecError:
    """One line: the field's dotted path (without the union tags pydantic puts in it, and in the document
    form's own names) and what is wrong, quoting at most a few dozen characters of the input."""
    err = exc.errors()[0]
    parts, node, loc_parts = [], data, err["loc"]
    for i, p in enumerate(loc_parts):
        missing_field = err["type"] == "missing" and i == len(loc_parts) - 1
        if isinstance(node, dict) and isinstance(p, str) and p not in node and not missing_field:
            continue  # a union's tag (family, pattern kind), not a field the user wrote
        parts.append(clip(str(p), 40))
        node = node.get(p) if isinstance(node, dict) else node[p] if isinstance(node, list) and isinstance(p, int) and p < len(node) else None
    if parts and renames and parts[0] in renames:
        parts[0] = renames[parts[0]]
    loc = ".".join(parts)
    allowed: list[str] = []
    if err["type"] == "extra_forbidden" and len(parts) == 1:
        from sparseditto.tools.families import families

        model = families().get(_family_tag(data) or "")
        allowed = [f for f in model.spec_model.model_fields if f != "family"] if model else []
    msg = _what_is_wrong(err, allowed)
    value = err.get("input")
    if isinstance(value, _Boolean):
        msg += ", not true or false"
    quote = (err["type"] not in {"value_error", "assertion_error", "missing", "extra_forbidden"}
             and not isinstance(value, dict) and "(got " not in msg)
    if loc and msg.startswith(f"{loc}:"):
        msg = msg[len(loc) + 1:].lstrip()
    if not loc and ":" in msg.split(" ", 1)[0]:  # a model-level check that names its field itself ("pattern.density: ...")
        loc, msg = (s.strip() for s in msg.split(":", 1))
    return SpecError(f"{loc or 'spec'}: {msg}" + (f" (got {shown(value)})" if quote else ""), field=loc or None)


# ---- the union of the families' specs -------------------------------------------------------------------

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
        return SpecError(f"family: {shown(data['family'])} is not a registered family; registered: {registered}", field="family")
    if "family" in data:
        return SpecError(f"family: must be a family name such as {registered} (got {shown(data['family'])})", field="family")
    if "operation" not in data:
        return SpecError(f"operation: required field is missing; allowed: {', '.join(KNOWN_OPERATIONS)}", field="operation")
    if not isinstance(op, str) or op not in KNOWN_OPERATIONS:
        return SpecError(f"operation: unknown operation {shown(op)}; allowed: {', '.join(KNOWN_OPERATIONS)}", field="operation")
    for family in (f for f in families().values() if f.operation == op):
        missing = [n for n, info in family.spec_model.model_fields.items() if info.is_required() and n not in data
                   and n != "family"]
        if missing:
            return SpecError(f"{missing[0]}: required field is missing (for {op})", field=missing[0])
    pattern = data.get("pattern")
    kind = pattern.get("kind") if isinstance(pattern, dict) else None
    if "pattern" in data and not isinstance(pattern, dict):
        return SpecError(f"pattern: must be a mapping of fields such as {{distribution: uniform, density: 0.01}} "
                         f"(got {shown(pattern)})", field="pattern")
    if kind is not None and not isinstance(kind, str):
        return SpecError(f"pattern.kind: must be a name such as unstructured or matrix_file (got {shown(kind)})", field="pattern.kind")
    return NotImplementedFamilyError(f"{op}{f' on a {clip(kind)} pattern' if kind else ''}: this problem family is not "
                                     f"implemented yet; implemented: {registered}", field="pattern.kind" if kind else "operation")


def _check_plain(data: Any) -> None:
    """A spec is a tree of mappings with string keys, lists and scalars: a few levels deep, never a cycle, and
    not more than `MAX_VALUES` lists and mappings in all (shared references from the Python API counted each time)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        node, where, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise SpecError(f"spec: more than {MAX_VALUES} nested lists and mappings; a spec is a few fields")
        if depth > MAX_DEPTH:
            raise SpecError(f"{clip(where, 60) if where else 'spec'}: nested more than {MAX_DEPTH} levels deep",
                            field=clip(where, 60) or None)
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise SpecError(f"{clip(where, 60) or 'spec'}: the key {shown(key)} is not a field name (field names "
                                    "are strings)", field=clip(where, 60) or None)
                if isinstance(value, (dict, list, tuple)):
                    stack.append((value, f"{where}.{clip(key, 40)}" if where else clip(key, 40), depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((value, f"{where}.{i}", depth + 1) for i, value in enumerate(node)
                         if isinstance(value, (dict, list, tuple)))


def parse_spec(data: dict[str, Any] | SpecBase) -> SpecBase:
    """Validate a spec given as a dict (either form) into its family's model; refuse what no family serves
    and what cannot fit in memory."""
    if isinstance(data, SpecBase):
        return data
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    _check_plain(data)
    renames: dict[str, str] = {}
    if "task" in data:
        renames = {native: doc for native, doc in _DOC_NAMES.items()
                   if native not in data and (doc in data or native in {"operation", "pattern"})}
        data = _from_document_form(data)
    from sparseditto.tools.families import families

    if _family_tag(data) not in families():
        raise _no_family_error(data)
    try:
        spec = spec_union().validate_python(data)
    except ValidationError as exc:
        raise _first_error(exc, data, renames) from None
    except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:  # a family validator's bug, not the user's
        raise SpecError(f"spec: could not be validated ({type(exc).__name__}: {clip(str(exc))})") from None
    try:
        _check_registered(spec)
        check_resources(spec)
    except SpecError as exc:
        field = exc.field or ""
        if field in renames and str(exc).startswith(f"{field}:"):
            raise SpecError(renames[field] + str(exc)[len(field):], field=renames[field]) from None
        raise
    return spec


def _check_registered(spec: SpecBase) -> None:
    from sparseditto.tools.baselines import libraries_for

    if spec.arch is not None and spec.arch not in ARCHS:
        raise SpecError(f"arch: {spec.arch} is not supported; allowed: {', '.join(ARCHS)}", field="arch")
    known = libraries_for(spec.family)
    if unknown := [b for b in spec.baselines if b not in known]:
        raise SpecError(f"baselines: {clip(', '.join(unknown))} not available for {spec.family}; allowed: {', '.join(known)}",
                        field="baselines")


# ---- memory ---------------------------------------------------------------------------------------------

def host_memory_bytes() -> int | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def describe_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def resource_estimate(spec: SpecBase) -> dict[str, float]:
    """Bytes of the problem (its operands and output, each once) and what a run takes of them on the device
    and on the host (`HARNESS_COPIES` times that: pristine copies, fresh value sets, the float64 reference)."""
    from sparseditto.tools.families import get_family

    family = get_family(spec.family)
    problem = float(family.min_bytes(family.symbols(spec), spec.dtype))
    return {"problem": problem, "device": HARNESS_COPIES * problem, "host": HARNESS_COPIES * problem}


def check_resources(spec: SpecBase) -> None:
    """Refuse a spec whose run cannot fit this machine's memory or the largest supported GPU's."""
    from sparseditto.tools.families import get_family

    symbols = get_family(spec.family).symbols(spec)
    need = resource_estimate(spec)
    pattern = getattr(spec, "pattern", None)
    sizes = ", ".join(f"{k}={v}" for k, v in symbols.items())
    if getattr(pattern, "kind", None) == "matrix_file":
        where, what = "pattern.path", f"pattern.path: {clip(Path(pattern.path).name)} ({sizes})"
    else:
        fields = [k for k in symbols if k in type(spec).model_fields]
        where, what = ", ".join(fields) or "spec", f"sizes {sizes}"
    if not math.isfinite(need["device"]) or need["device"] > DEVICE_MEMORY_BYTES:
        raise SpecError(f"{what}: the operands and output take {describe_bytes(need['problem'])}; a run needs about "
                        f"{HARNESS_COPIES}x that ({describe_bytes(need['device'])}) on the GPU, more than the largest "
                        f"GPU supported ({DEVICE_NAME}) holds; make the problem smaller", field=where)
    memory = host_memory_bytes()
    if memory and need["host"] > memory:
        raise SpecError(f"{what}: the operands and output take {describe_bytes(need['problem'])}; a run needs about "
                        f"{HARNESS_COPIES}x that ({describe_bytes(need['host'])}) in host memory, more than this "
                        f"machine's {describe_bytes(memory)}; make the problem smaller", field=where)


# ---- files ----------------------------------------------------------------------------------------------

class _Refused(yaml.MarkedYAMLError):
    """YAML that is valid but not accepted in a spec file (aliases, duplicate keys, deep nesting)."""


# libyaml's parser where PyYAML was built with it (about 20 times faster than the pure-Python one)
_YAML_BASE = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


def _scan_events(text: str) -> None:
    """Refuse aliases (an alias bomb expands to gigabytes once walked) and deep nesting from the parser's events,
    before any node is built."""
    depth = 0
    for event in yaml.parse(text, Loader=_YAML_BASE):
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(None, None, f"the alias *{clip(str(event.anchor), 30)} is not allowed: a spec file may not "
                           "use YAML anchors and aliases", event.start_mark)
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


class _SpecLoader(_YAML_BASE):  # type: ignore[misc,valid-type]
    """The safe loader with unique string keys (after `_scan_events` has refused aliases and deep nesting)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise _Refused(None, None, "expected a mapping", node.start_mark)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                raise _Refused(None, None, f"the key {shown(key)} is not a field name (quote it if it is one)", key_node.start_mark)
            if key in mapping:
                raise _Refused(None, None, f"duplicate key {shown(key)}", key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _yaml_problem(exc: Exception) -> str:
    """A YAML error as 'line L, column C: problem', clipped."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if isinstance(exc, yaml.reader.ReaderError):
        return f"position {exc.position}: character #x{exc.character if isinstance(exc.character, int) else ord(exc.character):04x} is not allowed in YAML"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + clip(str(problem or exc).split("\n")[0], 100)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {shown(key)}")
        out[key] = value
    return out


def read_spec_file(path: str | Path) -> Any:
    """The parsed contents of a spec file (YAML, or JSON by suffix), read with the limits above."""
    path = Path(path)
    where = clip_path(path)
    try:
        if not path.is_file():
            raise SpecError(f"{where}: no such spec file")
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except (OSError, ValueError) as exc:  # unreadable, a name with a NUL byte
        raise SpecError(f"{where}: cannot read the spec file ({clip(getattr(exc, 'strerror', None) or str(exc))})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{where}: larger than {MAX_SPEC_BYTES >> 10} KiB; a spec file is a few lines of YAML or JSON")
    if b"\x00" in raw:
        raise SpecError(f"{where}: not a text file (it holds NUL bytes); a spec is YAML or JSON text")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{where}: not UTF-8 text (byte {exc.start} is {raw[exc.start:exc.start + 1]!r}); a spec is "
                        "YAML or JSON text in UTF-8") from None
    is_json = path.suffix == ".json"
    try:
        if is_json:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        _scan_events(text)
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader
    except _Refused as exc:
        raise SpecError(f"{where}: {_yaml_problem(exc)}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where}: not valid JSON: line {exc.lineno}, column {exc.colno}: {clip(exc.msg, 100)}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise SpecError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, OverflowError, TypeError) as exc:  # a number too long to convert, a duplicate JSON key
        problem = str(exc).split("\n")[0]
        if "integer string conversion" in problem:
            problem = "it holds a number of more than 4300 digits"
        raise SpecError(f"{where}: not a valid spec file: {clip(problem, 100)}") from None


def load_spec(path: str | Path) -> SpecBase:
    """Read a spec from a YAML or JSON file. Relative matrix paths resolve against the spec's folder."""
    path = Path(path)
    data = read_spec_file(path)
    if data is None:
        raise SpecError(f"{clip_path(path)}: the spec file is empty")
    if not isinstance(data, dict):
        raise SpecError(f"{clip_path(path)}: expected a mapping of fields (`name: value` lines), got {type(data).__name__}")
    if isinstance(data, dict):
        _check_plain(data)
        data.setdefault("name", path.stem)
        pat = data.get("pattern")
        if (isinstance(pat, dict) and pat.get("kind") == "matrix_file" and isinstance(pat.get("path"), str)
                and "\x00" not in pat["path"] and not Path(pat["path"]).is_absolute()):
            data["pattern"] = {**pat, "path": str(path.parent / pat["path"])}
    return parse_spec(data)

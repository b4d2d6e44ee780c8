"""Pattern suites: YAML files naming specs by id, with tags, and `include:`s of other suites.

A suite is found by name in evals/suites/ or given as a path. Every spec is validated while the suite
loads, so a typo stops the evaluation before anything runs, with one line naming the suite and spec id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sparseditto.errors import EvalError, SparseDittoError
from sparseditto.spec import parse_spec

SUITES_DIR = Path(__file__).resolve().parent / "suites"


class SuiteEntry(BaseModel):
    """One spec of a suite file: a unique id, free tags, and the spec in the format of examples/*.yaml."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    tags: list[str] = []
    spec: dict[str, Any]


class SuiteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    include: list[str] = []
    specs: list[SuiteEntry] = []

    @field_validator("specs")
    @classmethod
    def _unique_ids(cls, specs: list[SuiteEntry]) -> list[SuiteEntry]:
        ids = [s.id for s in specs]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"spec ids must be unique; repeated: {', '.join(dup)}")
        return specs


class SuiteSpec(BaseModel):
    """A spec ready to run: the suite file that defines it, its id and tags, and the validated spec as a dict."""

    suite: str
    id: str
    tags: list[str]
    spec: dict[str, Any]


class Suite(BaseModel):
    name: str
    description: str
    specs: list[SuiteSpec]


def available_suites() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def _locate(ref: str, base: Path) -> Path:
    """A suite reference: a name in evals/suites/, else a path (relative to the including file's folder)."""
    if (SUITES_DIR / f"{ref}.yaml").is_file() and "/" not in ref and not ref.endswith((".yaml", ".yml")):
        return SUITES_DIR / f"{ref}.yaml"
    path = Path(ref) if Path(ref).is_absolute() else base / ref
    if not path.is_file():
        raise EvalError(f"suite {ref!r}: no such suite; known suites: {', '.join(available_suites())}, or give a YAML path")
    return path


def _read(path: Path) -> SuiteFile:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise EvalError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    try:
        return SuiteFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "suite"
        raise EvalError(f"{path}: {where}: {err['msg'].removeprefix('Value error, ')}") from None


def _entries(path: Path, seen: tuple[Path, ...]) -> list[SuiteSpec]:
    if path in seen:
        raise EvalError(f"{path}: includes itself (through {' -> '.join(p.stem for p in seen)})")
    suite = _read(path)
    out: list[SuiteSpec] = []
    for ref in suite.include:
        out += _entries(_locate(ref, path.parent).resolve(), (*seen, path))
    for entry in suite.specs:
        try:
            spec = parse_spec({"name": entry.id, **entry.spec})
        except SparseDittoError as exc:
            raise EvalError(f"suite {suite.name}, spec {entry.id}: {exc}") from None
        out.append(SuiteSpec(suite=suite.name, id=entry.id, tags=entry.tags, spec=spec.model_dump(mode="json")))
    return out


def load_suite(ref: str) -> Suite:
    """Load a suite by name or path, with its includes flattened; spec ids are unique across the whole suite."""
    path = _locate(ref, Path.cwd()).resolve()
    specs = _entries(path, ())
    ids = [s.id for s in specs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise EvalError(f"suite {ref}: spec ids repeated across its includes: {', '.join(dup)}")
    head = _read(path)
    return Suite(name=head.name, description=head.description, specs=specs)

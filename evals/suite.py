"""Pattern suites: YAML files naming specs by id, with tags, and `include:`s of other suites; and the suite of
a folder of the user's matrix files (`folder_suite`).

A suite is found by name in evals/suites/ or given as a path. Every spec is validated while the suite
loads, so a typo stops the evaluation before anything runs, with one line naming the suite and spec id.
A folder's specs are validated when they run instead: a file that cannot be used fails its own specs only.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sparseditto.errors import EvalError, SparseDittoError, clip, clip_path
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
    """A spec ready to run: the suite file that defines it, its id and tags, and the spec as a dict (validated
    while a suite file loads; a folder suite's specs are validated when they run)."""

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


# ---- a suite from a folder of the user's matrix files ---------------------------------------------------

# the files `folder_suite` takes for matrices (case as written: what tools/matrices reads)
MATRIX_FILE_SUFFIXES = (".mtx", ".mtx.gz", ".npz")


class FolderSuite(BaseModel):
    """A folder's matrix files as a suite, with what the scan found on the way: dense (array-format) Matrix
    Market files it skipped, and files whose header already says that they cannot be used, with the reason (their
    specs stay in the suite and are recorded as errors, with the same one-line reason, when they run)."""

    suite: Suite
    files: list[Path]
    skipped: list[tuple[Path, str]] = []
    refused: list[tuple[Path, str]] = []


def matrix_ops() -> list[str]:
    """The operations some registered family runs on a matrix file (in the order of KNOWN_OPERATIONS: spmv first)."""
    from sparseditto.spec import KNOWN_OPERATIONS
    from sparseditto.tools.families import families

    ops = {f.operation for f in families().values()
           if f.claims({"operation": f.operation, "pattern": {"kind": "matrix_file", "path": "m.mtx"}})}
    return sorted(ops, key=lambda op: (KNOWN_OPERATIONS.index(op) if op in KNOWN_OPERATIONS else len(KNOWN_OPERATIONS), op))


def takes_n(op: str) -> bool:
    """Whether N (the dense operand's columns) is a spec field the user chooses for the operation: a family of it
    accepts its example spec with N = 2 (spmv's N is 1). A folder suite has one spec per N given for such ones."""
    from sparseditto.errors import SpecError
    from sparseditto.spec import parse_spec
    from sparseditto.tools.families import families

    for family in families().values():
        if family.operation == op and family.example_spec:
            try:
                parse_spec({**family.example_spec, "N": 2})
                return True
            except SpecError:
                pass
    return False


def _is_matrix_file(name: str) -> bool:
    return name.endswith(MATRIX_FILE_SUFFIXES) and not name.startswith(".")


def find_matrix_files(folder: Path, exclude: Sequence[Path] = ()) -> list[Path]:
    """The matrix files under `folder` and all its subfolders, sorted by relative path; hidden files and folders
    (a leading '.') and the folders in `exclude` (output folders inside it) are left out. Symbolic links to files
    are followed, to folders not (no cycles)."""
    found: list[Path] = []
    skip = {p.expanduser().resolve() for p in exclude}
    for root, dirs, names in os.walk(folder, followlinks=False):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and (not skip or (here / d).resolve() not in skip))
        found += [here / n for n in sorted(names) if _is_matrix_file(n) and (here / n).is_file()]
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _id_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip("._-") or "matrix"


def _matrix_stem(path: Path) -> str:
    name = path.name
    return name[: -len(next(s for s in MATRIX_FILE_SUFFIXES if name.endswith(s)))]


def matrix_keys(folder: Path, files: list[Path]) -> dict[Path, str]:
    """A short, unique, id-safe name per file: its stem (`bcsstk01` of `bcsstk01/bcsstk01.mtx`); where stems
    clash (a.mtx and a.npz, or two folders' a.mtx), the relative path with its suffix (`x_a.mtx`); `_2`, `_3`
    after whatever still clashes."""
    stems = {p: _id_part(_matrix_stem(p)) for p in files}
    counts = Counter(stems.values())
    keys = {p: k if counts[k] == 1 else _id_part(p.relative_to(folder).as_posix().replace("/", "_")) for p, k in stems.items()}
    seen: Counter[str] = Counter()
    out: dict[Path, str] = {}
    for p in files:
        key = keys[p]
        seen[key] += 1
        out[p] = key if seen[key] == 1 else f"{key}_{seen[key]}"
    return out


def _header_tags(path: Path) -> tuple[list[str], str | None, str | None]:
    """(tags from the file's header, why it is skipped (a dense Matrix Market file), why it cannot be used)."""
    import scipy.io

    from sparseditto.tools.matrices import matrix_file_header

    tags = ["npz" if path.name.endswith(".npz") else "mtx"]
    try:
        rows, cols, _ = matrix_file_header(path)
    except SparseDittoError as exc:
        return tags, None, str(exc)
    if rows != cols:
        tags.append("rectangular")
    if tags[0] == "mtx":
        try:
            _, _, _, fmt, field, symmetry = scipy.io.mminfo(path)
        except Exception as exc:  # noqa: BLE001 - matrix_file_header read the same header a moment ago
            return tags, None, f"pattern.path: {clip(path.name)}: not a readable Matrix Market file ({type(exc).__name__})"
        if fmt == "array":
            return tags, "a dense (array-format) Matrix Market file, not a sparse matrix", None
        tags += [t for t in (field if field != "real" else None, symmetry if symmetry != "general" else None) if t]
    return tags, None, None


def folder_suite(folder: str | Path, ops: list[str], dtypes: list[str], ns: list[int], *,
                 exclude: Sequence[Path] = ()) -> FolderSuite:
    """Every matrix file under `folder` (see `find_matrix_files`) as specs, one per operation, dtype and (for an
    operation with a dense operand of N columns) N: `pattern: {kind: matrix_file, path: ...}`, id
    `<file key>-<op>-<dtype>[-n<N>]`. Only the files' headers are read here; each spec is validated when it runs
    (reading every matrix up front would read each file twice), so a file that cannot be read or that the spec
    checks refuse fails its own specs, each recorded as an error with its one-line reason, and nothing else."""
    root = Path(folder).expanduser()
    if root.is_file():
        raise EvalError(f"--matrices {clip_path(root)}: a file, not a folder; give the folder that holds the matrix "
                        "files (or run one matrix with a spec whose pattern is {kind: matrix_file, path: ...})")
    if not root.is_dir():
        raise EvalError(f"--matrices {clip_path(root)}: no such folder")
    root = root.resolve()
    files = find_matrix_files(root, exclude)
    name = f"matrices-{_id_part(root.name)}"
    keys = matrix_keys(root, files)
    specs: list[SuiteSpec] = []
    skipped: list[tuple[Path, str]] = []
    refused: list[tuple[Path, str]] = []
    for path in files:
        tags, skip, why = _header_tags(path)
        if skip:
            skipped.append((path, skip))
            continue
        if why:
            refused.append((path, why))
        for op in ops:
            for dtype in dtypes:
                for n in (ns if takes_n(op) else [None]):
                    spec_id = f"{keys[path]}-{op}-{dtype}" + (f"-n{n}" if n is not None else "")
                    spec: dict[str, Any] = {"name": spec_id, "operation": op, "dtype": dtype,
                                            "pattern": {"kind": "matrix_file", "path": str(path)}}
                    if n is not None:
                        spec["N"] = n
                    specs.append(SuiteSpec(suite=name, id=spec_id, tags=["matrix_file", op, dtype, *tags], spec=spec))
    if not files or not specs:
        kinds = ", ".join(MATRIX_FILE_SUFFIXES)
        why = f" ({len(skipped)} dense Matrix Market files skipped)" if skipped else ""
        raise EvalError(f"--matrices {clip_path(root)}: no matrix files ({kinds}) in it or its subfolders{why}")
    description = (f"matrix files in {root}: {', '.join(ops)}; {', '.join(dtypes)}"
                   + (f"; N {', '.join(map(str, ns))}" if any(takes_n(op) for op in ops) else ""))
    return FolderSuite(suite=Suite(name=name, description=description, specs=specs), files=files,
                       skipped=skipped, refused=refused)

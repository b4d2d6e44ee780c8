"""The experience store: every kernel a run accepted on a GPU, in SQLite, for later runs to start from.

An entry holds the spec, the kernel's source, the choice (reference kernel + parameters), the
measurement and the GPU (name, arch). Its key is the spec's canonical problem — operation, pattern,
shapes, dtype and target arch, not its name, budget or baselines — plus the GPU name: a later run with
the same key re-validates the stored kernel instead of searching. Entries of the same family and
dtype with another shape or density are "similar": their kernel becomes the first reference.
Only accepted GPU runs are stored; a compile-only run measured nothing and is never stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from sparseditto.agents.schemas import Choice, measured_times, step_key
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.settings import Settings
from sparseditto.errors import SparseDittoError
from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.families import get_family

log = structlog.get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accepted (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    problem_key TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    gpu_arch TEXT NOT NULL,
    family TEXT NOT NULL,
    dtype TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    kernel TEXT NOT NULL,
    params_json TEXT NOT NULL,
    source TEXT NOT NULL,
    measurement_json TEXT NOT NULL,
    checks_json TEXT NOT NULL DEFAULT '{}',
    run_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS accepted_key ON accepted (problem_key, gpu_name);
CREATE INDEX IF NOT EXISTS accepted_family ON accepted (family, dtype);
CREATE TABLE IF NOT EXISTS measured (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    family TEXT NOT NULL,
    kernel TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    dtype TEXT NOT NULL,
    predicted_us REAL NOT NULL,
    measured_us REAL NOT NULL,
    run_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    cost_model TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS measured_family ON measured (family, gpu_name);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    family TEXT NOT NULL,
    kernel TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    dtype TEXT NOT NULL,
    param TEXT NOT NULL,
    from_value INTEGER NOT NULL,
    to_value INTEGER NOT NULL,
    ratio REAL NOT NULL,
    run_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_family ON steps (family, gpu_name, dtype);
CREATE TABLE IF NOT EXISTS tools_passed (
    cubin_sha256 TEXT NOT NULL,
    tool_class TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (cubin_sha256, tool_class, gpu_name)
);
"""
# steps: the latest measured pairs per step that count
STEP_WINDOW = 20
# calibration: the prior (factor 1) counts as this many measurements, so one odd run moves a factor only halfway
PRIOR_WEIGHT = 1.0
CALIBRATION_WINDOW = 50  # the latest measurements per kernel that count


class Experience(BaseModel):
    """One accepted kernel and the problem it was accepted for."""

    id: int
    problem_key: str
    gpu_name: str
    gpu_arch: str
    spec: dict[str, Any]
    choice: Choice
    source: str
    measurement: dict[str, Any]
    # each verification stage's status when it was accepted (sanitizer: passed / not_executed ...)
    checks: dict[str, str] = {}
    run_id: str
    created_at: float


def experience_path(runs_dir: str) -> Path:
    """The setting `experience_db` (env SPARSEDITTO_EXPERIENCE_DB), else <runs_dir>/experience.sqlite."""
    return Path(Settings().experience_db or Path(runs_dir) / "experience.sqlite")


def canonical_problem(spec: Spec, gpu_arch: str) -> dict[str, Any]:
    """What makes two specs the same problem (the family says), on which architecture."""
    return {**get_family(spec.family).experience_key(spec), "family": spec.family, "arch": spec.arch or gpu_arch}


def problem_key(spec: Spec, gpu_arch: str) -> str:
    return hashlib.sha256(json.dumps(canonical_problem(spec, gpu_arch), sort_keys=True).encode()).hexdigest()


def calibration_factors(rows: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Per kernel, from (kernel, predicted us, measured us) rows newest first: the geometric mean of measured over
    predicted of its latest CALIBRATION_WINDOW rows, pulled toward 1 by PRIOR_WEIGHT."""
    logs: dict[str, list[float]] = {}
    for kernel, predicted, measured in rows:
        if len(logs.setdefault(kernel, [])) < CALIBRATION_WINDOW:
            logs[kernel].append(math.log(measured / predicted))
    return {k: math.exp(sum(v) / (len(v) + PRIOR_WEIGHT)) for k, v in logs.items()}


class ExperienceStore:
    """One SQLite file; each call opens its own connection, so runs in several processes can share it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        conn.executescript(_SCHEMA)
        if "checks_json" not in {row[1] for row in conn.execute("PRAGMA table_info(accepted)")}:  # a store from before
            conn.execute("ALTER TABLE accepted ADD COLUMN checks_json TEXT NOT NULL DEFAULT '{}'")
        if "cost_model" not in {row[1] for row in conn.execute("PRAGMA table_info(measured)")}:  # its rows: version ''
            conn.execute("ALTER TABLE measured ADD COLUMN cost_model TEXT NOT NULL DEFAULT ''")
        return conn

    def record(self, spec: Spec, choice: Choice, source: str, measurement: dict[str, Any], gpu: dict[str, Any],
               run_id: str, checks: dict[str, str] | None = None) -> int:
        with closing(self._connect()) as conn, conn:
            cur = conn.execute(
                "INSERT INTO accepted (problem_key, gpu_name, gpu_arch, family, dtype, spec_json, kernel, params_json,"
                " source, measurement_json, checks_json, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (problem_key(spec, gpu["arch"]), gpu["name"], gpu["arch"], spec.family, spec.dtype,
                 spec.model_dump_json(), choice.kernel, json.dumps(choice.params, sort_keys=True), source,
                 json.dumps(measurement), json.dumps(checks or {}), run_id, time.time()))
        log.info("experience_recorded", kernel=choice.kernel, gpu=gpu["name"], run_id=run_id)
        return int(cur.lastrowid)

    def _rows(self, where: str, args: tuple[Any, ...]) -> list[Experience]:
        if not self.path.exists():
            return []
        with closing(self._connect()) as conn:
            rows = conn.execute(f"SELECT * FROM accepted WHERE {where} ORDER BY created_at DESC", args).fetchall()
        return [Experience(id=r["id"], problem_key=r["problem_key"], gpu_name=r["gpu_name"], gpu_arch=r["gpu_arch"],
                           spec=json.loads(r["spec_json"]),
                           choice=Choice(kernel=r["kernel"], params=json.loads(r["params_json"])),
                           source=r["source"], measurement=json.loads(r["measurement_json"]),
                           checks=json.loads(r["checks_json"]), run_id=r["run_id"],
                           created_at=r["created_at"]) for r in rows]

    # the verifier's ToolsRecord: compute-sanitizer and Nsight Compute passes kept across runs and sessions
    def tools_note(self, cubin_sha256: str, tool_class: str, gpu_name: str) -> str | None:
        """Where this compiled kernel passed both tools on a problem of this shape class on a GPU of this name."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT note FROM tools_passed WHERE cubin_sha256 = ? AND tool_class = ? AND gpu_name = ?",
                               (cubin_sha256, tool_class, gpu_name)).fetchone()
        return row["note"] if row else None

    def record_tools(self, cubin_sha256: str, tool_class: str, gpu_name: str, note: str) -> None:
        with closing(self._connect()) as conn, conn:
            conn.execute("INSERT OR IGNORE INTO tools_passed VALUES (?, ?, ?, ?, ?)",
                         (cubin_sha256, tool_class, gpu_name, note, time.time()))

    def exact(self, spec: Spec, gpu: dict[str, Any]) -> Experience | None:
        """The fastest kernel accepted for this very problem on a GPU of this name."""
        found = self._rows("problem_key = ? AND gpu_name = ?", (problem_key(spec, gpu["arch"]), gpu["name"]))
        return min(found, key=lambda e: e.measurement.get("median_us", math.inf), default=None)

    def similar(self, spec: Spec, gpu: dict[str, Any] | None, limit: int = 3) -> list[Experience]:
        """Kernels accepted for the same family and dtype on other problems, closest first.

        Same GPU before other GPUs; then by the family's distance between the two problems.
        """
        key = problem_key(spec, gpu["arch"]) if gpu else None
        found = [e for e in self._rows("family = ? AND dtype = ?", (spec.family, spec.dtype))
                 if not (key and e.problem_key == key and e.gpu_name == gpu["name"])]

        family = get_family(spec.family)

        def distance(e: Experience) -> tuple[int, float]:
            try:
                gap = family.experience_distance(spec, parse_spec(e.spec))
            except SparseDittoError:  # an entry whose spec no longer validates (a moved matrix file ...) comes last
                gap = math.inf
            return (0 if gpu and e.gpu_name == gpu["name"] else 1, gap)

        return sorted(found, key=distance)[:limit]

    def record_measured(self, family: str, dtype: str, gpu_name: str, rows: list[tuple[str, float, float]],
                        run_id: str) -> None:
        """(kernel, predicted us, measured us) of each correct candidate that ran at a start the cost model priced,
        with the version of the family's cost model that priced it."""
        if not rows:
            return
        now, model = time.time(), get_family(family).cost_model
        with closing(self._connect()) as conn, conn:
            conn.executemany("INSERT INTO measured (family, kernel, gpu_name, dtype, predicted_us, measured_us, run_id,"
                             " created_at, cost_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(family, k, gpu_name, dtype, p, m, run_id, now, model) for k, p, m in rows])

    def calibration(self, family: str, gpu_name: str) -> dict[str, float]:
        """Per kernel, measured over predicted time on this GPU: the geometric mean of the latest ratios against the
        family's current cost model, pulled toward 1 by PRIOR_WEIGHT. Kernels never measured here are absent
        (factor 1)."""
        if not self.path.exists():
            return {}
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT kernel, predicted_us, measured_us FROM measured WHERE family = ? AND gpu_name = ?"
                                " AND cost_model = ? AND predicted_us > 0 AND measured_us > 0 ORDER BY created_at DESC",
                                (family, gpu_name, get_family(family).cost_model)).fetchall()
        return calibration_factors(rows)

    def record_steps(self, family: str, dtype: str, gpu_name: str, rows: list[tuple[str, str, int, int, float]],
                     run_id: str) -> None:
        """(kernel, parameter, from value, to value, time after / time before) of each pair of correct candidates of
        one run that differ in that one parameter."""
        if not rows:
            return
        now = time.time()
        with closing(self._connect()) as conn, conn:
            conn.executemany("INSERT INTO steps (family, kernel, gpu_name, dtype, param, from_value, to_value, ratio,"
                             " run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(family, k, gpu_name, dtype, p, a, b, r, run_id, now) for k, p, a, b, r in rows])

    def step_ratios(self, family: str, dtype: str, gpu_name: str) -> dict[str, float]:
        """Per one-parameter step (`step_key`), the best time ratio its latest STEP_WINDOW measurements on this GPU
        and dtype gave, each pair read in both directions: what the step has been worth at its best."""
        if not self.path.exists():
            return {}
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT kernel, param, from_value, to_value, ratio FROM steps WHERE family = ? AND"
                                " gpu_name = ? AND dtype = ? AND ratio > 0 ORDER BY created_at DESC",
                                (family, gpu_name, dtype)).fetchall()
        seen: dict[str, list[float]] = {}
        for kernel, param, a, b, ratio in rows:
            for key, r in ((step_key(kernel, param, a, b), ratio), (step_key(kernel, param, b, a), 1.0 / ratio)):
                if len(seen.setdefault(key, [])) < STEP_WINDOW:
                    seen[key].append(r)
        return {k: min(v) for k, v in seen.items()}

    def count(self) -> int:
        if not self.path.exists():
            return 0
        with closing(self._connect()) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM accepted").fetchone()[0])


def record_accepted(store: ExperienceStore, spec: Spec, iteration: dict[str, Any], run_id: str) -> int | None:
    """Store an accepted iteration if it was measured on a GPU; returns the new entry's id, else None."""
    report = iteration["report"]
    device = report.get("device") or {}
    if iteration.get("backend") != "gpu" or not report.get("measurement") or not device.get("name"):
        return None
    choice = Choice.model_validate(iteration["choice"])
    written = iteration.get("kernel") or {}  # the verified candidate itself (a model may have written new source)
    source = written.get("source") or get_kernel(choice.kernel).instantiate(choice.params).source
    return store.record(spec, choice, source, report["measurement"],
                        {"name": device["name"], "arch": device.get("arch") or spec.arch or "unknown"}, run_id,
                        checks={f["stage"]: f["status"] for f in report["feedback"]})


def _gpu_name(gpu_iterations: list[dict[str, Any]]) -> str | None:
    """The GPU the run's iterations were measured on (None when none reached a device)."""
    return next((it["report"]["device"].get("name") for it in gpu_iterations if it["report"].get("device")), None)


def record_steps(store: ExperienceStore, spec: Spec, iterations: list[dict[str, Any]], run_id: str) -> int:
    """Every pair of correct GPU candidates of the run with the same kernel and one parameter apart (the same matrix
    and inputs, so their ratio is the step's worth there). Returns how many were recorded."""
    gpu_iterations = [it for it in iterations if it.get("backend") == "gpu"]
    measured = measured_times(gpu_iterations)
    rows = []
    choices = sorted(measured)
    for n, (kernel, params) in enumerate(choices):
        for other_kernel, other_params in choices[n + 1:]:
            a, b = dict(params), dict(other_params)
            differ = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
            if other_kernel == kernel and len(differ) == 1 and differ[0] in a and differ[0] in b:
                ratio = measured[(other_kernel, other_params)] / measured[(kernel, params)]
                rows.append((kernel, differ[0], a[differ[0]], b[differ[0]], ratio))
    gpu = _gpu_name(gpu_iterations)
    if not rows or not gpu:
        return 0
    store.record_steps(spec.family, spec.dtype, gpu, rows, run_id)
    return len(rows)


def record_measured(store: ExperienceStore, spec: Spec, plan: dict[str, Any], iterations: list[dict[str, Any]],
                    run_id: str) -> int:
    """Calibrate the cost model: every correct GPU iteration that ran a strategy's start with a prediction.
    Returns how many were recorded."""
    gpu_iterations = [it for it in iterations if it.get("backend") == "gpu"]
    measured = measured_times(gpu_iterations)
    rows = [(s["kernel"], s["predicted_us"], measured[key]) for s in plan.get("strategies", [])
            if s.get("predicted_us") and (key := Choice(kernel=s["kernel"], params=s["start"]).key()) in measured]
    gpu = _gpu_name(gpu_iterations)
    if not rows or not gpu:
        return 0
    store.record_measured(spec.family, spec.dtype, gpu, rows, run_id)
    return len(rows)

"""The SpMV cost model against candidates measured on a GPU (`results/issue14_h200/spmv_candidates_measured.json`):
each candidate with the time the model predicts for it, and the offline planner's first candidate on each matrix
with its measured time where it was measured. The matrices are remade from the seeded suite (`matrix_suite.py`),
so their features are the ones the planner saw. `bench/cost_model_check.py` prints the
comparison; `tests/agents/test_cost_model_measured.py` holds the model to it. The model's constants were fitted to
these measurements, so the comparison is in-sample; `cross_validated_picks` estimates how it does on a matrix it was
not fitted to."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from sparseditto.evals.matrix_suite import write_suite
from sparseditto.knowledge_base.experience import calibration_factors
from sparseditto.tools.families.csr_spmv.cost import predicted_us
from sparseditto.tools.structure import matrix_features

MEASURED = Path(__file__).resolve().parent / "results" / "issue14_h200" / "spmv_candidates_measured.json"
Price = Callable[[str, Mapping[str, int], Mapping[str, float], int], float]


def measured_features(folder: Path, measured: Path = MEASURED) -> dict[str, dict[str, float]]:
    """The structural features of every matrix with measured candidates, the matrix written to `folder` first."""
    names = sorted({c["matrix"] for c in json.loads(measured.read_text())["candidates"]})
    write_suite(folder, names=names)
    return {n: matrix_features(sp.load_npz(folder / f"{n}.npz").tocsr(), 4, np.random.default_rng(0)) for n in names}


def priced_candidates(features: Mapping[str, Mapping[str, float]], measured: Path = MEASURED,
                      price: Price = predicted_us) -> list[tuple[dict[str, Any], float]]:
    """(measured candidate, predicted us) for every candidate (fp32 values), its matrix's `features` from
    measured_features."""
    candidates = json.loads(measured.read_text())["candidates"]
    return [(c, price(c["kernel"], c["params"], features[c["matrix"]], 4)) for c in candidates]


def first_candidates(folder: Path, measured: Path = MEASURED) -> list[tuple[str, str, dict[str, int], float | None, float]]:
    """Per matrix written to `folder` by measured_features: the offline plan's first kernel and parameters (a fresh
    store), its measured us when a measured candidate ran at those parameters, and the fastest measured us."""
    from sparseditto.agents.planner import offline_plan
    from sparseditto.spec import parse_spec

    candidates = json.loads(measured.read_text())["candidates"]
    rows = []
    for name in sorted({c["matrix"] for c in candidates}):
        spec = parse_spec({"name": name, "operation": "spmv", "dtype": "fp32",
                           "pattern": {"kind": "matrix_file", "path": str(folder / f"{name}.npz")}})
        first = offline_plan(spec).strategies[0]
        mine = [c for c in candidates if c["matrix"] == name]
        same = [c["us"] for c in mine if c["kernel"] == first.kernel
                and all(c["params"].get(k) == v for k, v in first.start.items() if k in c["params"])]
        rows.append((name, first.kernel, dict(first.start), same[0] if same else None, min(c["us"] for c in mine)))
    return rows


def neutral_price(kernel: str, params: Mapping[str, int], features: Mapping[str, float], value_bytes: int) -> float:
    """predicted_us with every fitted bandwidth efficiency at 1 (the lone-lane factor too): the model's structure
    without the constants fitted to these measurements."""
    return predicted_us(kernel, params, features, value_bytes, fitted=False)


def cross_validated_picks(priced: list[tuple[dict[str, Any], float]]) -> list[tuple[str, dict[str, Any], float, float]]:
    """Leave one matrix out: the other matrices' measured candidates calibrate the model per kernel as the experience
    store does (`calibration_factors`; a kernel measured on no other matrix keeps factor 1), and on the matrix left out the calibrated model picks the fastest of its measured
    candidates, whose own measurements take no part in the pick. Per matrix: (name, the pick, its measured us, the
    fastest measured us)."""
    rows = []
    for matrix in sorted({c["matrix"] for c, _ in priced}):
        factor = calibration_factors((c["kernel"], p, c["us"]) for c, p in priced if c["matrix"] != matrix)
        mine = [(c, p * factor.get(c["kernel"], 1.0)) for c, p in priced if c["matrix"] == matrix]
        pick = min(mine, key=lambda cp: cp[1])[0]
        rows.append((matrix, pick, pick["us"], min(c["us"] for c, _ in mine)))
    return rows

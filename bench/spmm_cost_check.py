"""The SpMM cost model against measurements, no GPU needed: every measured candidate in the given evals'
results.jsonl and explore.json files (suite matrices only, written to a temporary folder), its price at its own
parameters, and measured over predicted per kernel and overall (geometric means).

`python3 bench/spmm_cost_check.py FILE [FILE ...]` (results.jsonl: each spec's accepted kernel; explore.json: every
variant timed)."""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from sparseditto.evals.matrix_suite import SUITE_BY_NAME, write_suite
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family

SPEC_ID = re.compile(r"^(?P<matrix>.+)-spmm-(?P<dtype>fp32|fp16|bf16)-n(?P<n>\d+)")
LABEL = re.compile(r"^(?P<kernel>\w+)\((?P<params>[^)]*)\)$")


def measured_points(paths: list[Path]) -> list[tuple[str, str, int, str, dict[str, int], float]]:
    """(matrix, dtype, N, kernel, params, microseconds) of every correct, timed candidate in the files."""
    rows = []
    for path in paths:
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            rows += [(r["spec_id"], r["candidate"], r["median_us"]) for r in records if r.get("median_us")]
        else:
            rows += [(r["spec"], r["candidate"], r["us"]) for r in json.loads(path.read_text())["rows"]
                     if r["correct"] and r["us"]]
    points = []
    for spec_id, label, us in rows:
        spec, cand = SPEC_ID.match(spec_id), LABEL.match(label)
        if spec and cand and spec["matrix"] in SUITE_BY_NAME:
            params = {k: int(v) for k, v in (p.split("=") for p in cand["params"].split(", "))}
            points.append((spec["matrix"], spec["dtype"], int(spec["n"]), cand["kernel"], params, float(us)))
    return points


def main(paths: list[Path]) -> None:
    points = measured_points(paths)
    family = get_family("csr_spmm")
    ratios: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="spmm_cost_check_") as folder:
        matrices = sorted({p[0] for p in points})
        write_suite(Path(folder), names=matrices)
        features = {}
        for matrix, dtype, n, kernel, params, us in points:
            spec = parse_spec({"name": matrix, "operation": "spmm", "dtype": dtype, "N": n,
                               "pattern": {"kind": "matrix_file", "path": f"{folder}/{matrix}.npz"}})
            f = features.setdefault((matrix, dtype, n), family.features(spec))
            predicted = family.predicted_us(spec, f, kernel, params)
            ratios[kernel].append(us / predicted)
            print(f"{matrix:20s} {dtype} N={n:<4d} {kernel:22s} {us:8.1f} us measured {predicted:8.1f} predicted "
                  f"{us / predicted:5.2f}")

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    every = [r for rs in ratios.values() for r in rs]
    for kernel, rs in sorted(ratios.items()):
        print(f"{kernel:22s} {len(rs):3d} points, measured / predicted {geomean(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})")
    print(f"all {len(every)} points: {geomean(every):.2f} ({min(every):.2f}-{max(every):.2f})")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])

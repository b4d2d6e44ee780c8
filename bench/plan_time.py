"""Planning time on specs of about 30M nonzeros (issue 13: at most 2 s): the offline planner end to end, which
draws the row lengths and estimates the matrix's own features on a sample of row groups; and the time of every
structural feature (tools/structure.py) of a whole 30M-nonzero matrix (issue 14: at most 2 s).

Run: `python bench/plan_time.py OUT.json` (CPU only). Prints a short table; writes every timing to OUT.json.
"""

from __future__ import annotations

import json
import platform
import sys
import time

import numpy as np

from sparseditto.agents.planner import offline_plan
from sparseditto.spec import parse_spec
from sparseditto.tools.matrices import generate_csr
from sparseditto.tools.structure import matrix_features

SPECS = [
    {"operation": "spmm", "pattern": {"distribution": "power_law", "nnz_per_row": 16}, "M": 2_000_000, "K": 2_000_000, "N": 64},
    {"operation": "spmm", "pattern": {"distribution": "uniform", "nnz_per_row": 15}, "M": 2_000_000, "K": 2_000_000, "N": 64},
    {"operation": "spmm", "pattern": {"distribution": "banded", "nnz_per_row": 30}, "M": 1_000_000, "K": 1_000_000, "N": 64},
    {"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 16}, "M": 2_000_000, "K": 2_000_000},
]


def main(out: str) -> None:
    rows = []
    for raw in SPECS:
        spec = parse_spec({"name": f"{raw['operation']}_{raw['pattern']['distribution']}", **raw})
        times = []
        for _ in range(3):
            start = time.perf_counter()
            plan = offline_plan(spec)
            times.append(time.perf_counter() - start)
        rows.append({"spec": raw, "nnz": plan.features["nnz"], "seconds": times, "best_s": min(times),
                     "strategies": [s.kernel for s in plan.strategies], "features": plan.features})
        print(f"{spec.name:16s} nnz {plan.features['nnz']:>12,.0f}  {min(times):5.2f} s (best of 3; {max(times):.2f} s worst)")
    feature_rows = []
    for raw in SPECS[:3]:
        spec = parse_spec({"name": raw["pattern"]["distribution"], **raw})
        matrix = generate_csr(spec.pattern, raw["M"], raw["K"], np.float32, np.random.default_rng(0))
        times = []
        for seed in range(3):
            start = time.perf_counter()
            features = matrix_features(matrix, 4, np.random.default_rng(seed))
            times.append(time.perf_counter() - start)
        feature_rows.append({"matrix": raw, "nnz": matrix.nnz, "seconds": times, "features": features})
        print(f"features {spec.name:9s} nnz {matrix.nnz:>12,}  {len(features)} features  {min(times):5.2f} s best, "
              f"{max(times):.2f} s worst")
    json.dump({"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}", "rows": rows,
               "structural_features": feature_rows}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])

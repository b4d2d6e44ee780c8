"""Planning time on specs of about 30M nonzeros (issue 13: at most 2 s): the offline planner end to end, which
draws the row lengths and estimates the matrix's own features on a sample of row groups.

Run: `python bench/plan_time.py OUT.json` (CPU only). Prints a short table; writes every timing to OUT.json.
"""

from __future__ import annotations

import json
import platform
import sys
import time

from sparseditto.agents.planner import offline_plan
from sparseditto.spec import parse_spec

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
    json.dump({"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}", "rows": rows},
              open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])

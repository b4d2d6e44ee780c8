"""Every SpMV candidate an eval measured, in the form bench/cost_model_check.py --measured reads: per iteration of
each run, the suite matrix, the kernel, its parameters and its median microseconds (fresh inputs, in the pipeline),
plus the planner's price of it where the plan priced that exact start.
`python3 bench/measured_candidates.py "ABOUT" LABEL RUNS_DIR... > candidates.json`"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_candidates(result: dict, label: str) -> list[dict]:
    matrix = result["spec"]["name"].removesuffix("-spmv-fp32")
    priced = {(s["kernel"], json.dumps(s["start"], sort_keys=True)): s.get("predicted_us")
              for s in (result.get("plan") or {}).get("strategies", [])}
    rows = []
    for it in result.get("iterations", []):
        measurement = it["report"].get("measurement") or {}
        if not measurement.get("median_us") or not it.get("choice"):
            continue
        kernel, params = it["choice"]["kernel"], it["choice"]["params"]
        row = {"matrix": matrix, "kernel": kernel, "params": params, "us": round(measurement["median_us"], 1),
               "source": f"{label} / iteration {it['iteration']}"}
        predicted = priced.get((kernel, json.dumps(params, sort_keys=True)))
        if predicted is not None:
            row["planner_predicted_us"] = round(predicted, 1)
        rows.append(row)
    return rows


def main(about: str, label: str, runs_dirs: list[Path]) -> None:
    candidates = []
    for runs in runs_dirs:
        for result in sorted(runs.glob("*/result.json")):
            candidates += run_candidates(json.loads(result.read_text()), label)
    candidates.sort(key=lambda c: (c["matrix"], c["kernel"], json.dumps(c["params"], sort_keys=True)))
    print(json.dumps({"about": about, "candidates": candidates}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [Path(p) for p in sys.argv[3:]])

"""The Hopper 2:4 kernel's time per wave of tiles against the k-tiles per tile, from session 9's committed H200 runs:
a line through 4096^3 (explore) and 5120 x 13824 x 4096 (pipeline), and how far 8192^3 (pipeline) lies from it.
`python3 bench/per_tile_fit.py` (no GPU); see bench/NOTES.md, session 9. A reading of three points, not a
measurement of where the time goes."""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "evals" / "results" / "issue15_h200"
BM, BN, BK, SMS = 256, 128, 128, 132  # the planner's start (256 x 128 x 128) on the H200's 132 SMs
START = "BK=128, BM=256, BN=128, BTMA=1"


def shapes_and_times() -> dict[str, tuple[int, int, int, float]]:
    explore = json.loads((RESULTS / "explore_session9_btma_h200.json").read_text())
    (row,) = [r for r in explore["rows"] if START in r["candidate"]]
    out = {"4096^3": (4096, 4096, 4096, row["us"])}
    for line in (RESULTS / "eval_session9_pipeline_results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if START in (r["candidate"] or ""):
            M, K, N = {"sparse24_fp16_8192": (8192, 8192, 8192), "sparse24_fp16_5120x13824": (5120, 13824, 4096)}[r["spec_id"]]
            out[r["spec_id"].removeprefix("sparse24_fp16_")] = (M, K, N, r["median_us"])
    return out


def main() -> None:
    points = {}
    for name, (M, K, N, us) in shapes_and_times().items():
        waves = math.ceil(math.ceil(M / BM) * math.ceil(N / BN) / SMS)
        points[name] = (K // BK, us / waves)
        print(f"{name:12s} {K // BK:4d} k-tiles per tile, {waves:2d} waves, {us / waves:7.2f} us per wave")
    (k0, t0), (k1, t1) = points["4096^3"], points["5120x13824"]
    per_k = (t1 - t0) / (k1 - k0)
    fixed = t0 - per_k * k0
    k2, t2 = points["8192"]
    dense_eq = 2 * BM * BN * BK / (per_k * 1e-6) * SMS / 1e12
    print(f"line: {per_k:.3f} us per k-tile ({dense_eq:.0f} dense-equivalent TFLOP/s over {SMS} SMs) + {fixed:.2f} us per "
          f"tile; fixed part {fixed / t0:.0%} of a 4096^3 tile, {fixed / t1:.0%} at K = 13824; 8192^3 lies "
          f"{t2 / (fixed + per_k * k2) - 1:+.0%} from the line")


if __name__ == "__main__":
    main()

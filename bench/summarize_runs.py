"""Collects the runs of bench/run_issue_specs.sh into one JSON file and a Markdown summary.

`python bench/summarize_runs.py RUNS_DIR OUT_DIR` writes OUT_DIR/core_pipeline.json (every run's
result.json, whole) and OUT_DIR/core_pipeline.md (one row per spec: status, best kernel, its time,
the best cuSPARSE and cuBLAS configurations measured in the same process, speedups, bandwidth).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _row(result: dict) -> str:
    spec = result["spec"]["name"]
    best_no = result.get("best_iteration")
    best = next((it for it in result["iterations"] if it["iteration"] == best_no), None)
    m = (best or {}).get("report", {}).get("measurement")
    if not best or not m:
        return f"| {spec} | {result['status']} | - | - | - | - | - | - |"
    libs: dict[str, dict] = {}
    for b in best["report"]["baselines"]:
        if b["correct"] and (b["library"] not in libs or b["median_us"] < libs[b["library"]]["median_us"]):
            libs[b["library"]] = b
    cells = []
    for lib in ("cuSPARSE", "cuBLAS"):
        b = libs.get(lib)
        cells.append(f"{b['median_us']:.1f} ({b['name']}), {b['median_us'] / m['median_us']:.2f}x" if b else "-")
    return (f"| {spec} | {result['status']} | `{best['candidate']}` | {m['median_us']:.1f} | {cells[0]} | {cells[1]} | "
            f"{m['bandwidth_fraction']:.0%} | {len(result['iterations'])} |")


def main(runs_dir: str, out_dir: str) -> None:
    results = [json.loads(p.read_text()) for p in sorted(Path(runs_dir).glob("*/result.json"))]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "core_pipeline.json").write_text(json.dumps(results, indent=1))
    device = next((it["report"].get("device") for r in results for it in r["iterations"] if it["report"].get("device")), {})
    lines = [f"# Core pipeline on {device.get('name', '?')} ({device.get('arch', '?')})", "",
             "Offline policy, `sparseditto run SPEC --on-budget approve` for each spec (`bash bench/run_issue_specs.sh OUT`,",
             "budget 6 for SpMM and 3 for SpMV unless given); every time is the median of 30 runs with",
             "L2 flushed, candidate and baselines timed in the same process on the same fresh inputs.", "",
             "| spec | status | best kernel | us | best cuSPARSE us (config), speedup | dense cuBLAS us, speedup | of bandwidth floor | iterations |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in results]
    (out / "core_pipeline.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

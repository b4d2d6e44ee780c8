# Device run: an already-solved spec is solved again from the experience store.
# Runs `sparseditto run` twice on one spec with one fresh runs dir (and so one fresh experience store,
# runs/experience.sqlite): the first run searches and stores its accepted kernel; the second should
# re-validate that kernel instead of searching. Writes experience_rerun.json and experience_rerun.md
# into OUT (both runs' wall time, time to the final status, the ratio, statuses, the reused kernel),
# with each run's report.md.
# Usage on the GPU machine: source bench/device_setup.sh && bash bench/experience_rerun.sh $OUT [SPEC] [BUDGET]
set -u
out=$1; spec=${2:-examples/spmm_fp32_1pct.yaml}; budget=${3:-6}
runs=$(mktemp -d /tmp/sparseditto-rerun.XXXXXX)
mkdir -p "$out"
unset SPARSEDITTO_EXPERIENCE_DB
for n in 1 2; do
  start=$(date +%s.%N)
  timeout 580 sparseditto run "$spec" --budget "$budget" --on-budget approve --runs-dir "$runs" 2>&1 | tail -n 14 | tee "$out/run$n.log"
  echo "$start $(date +%s.%N)" > "$out/run$n.wall"
done
python3 - "$runs" "$out" "$spec" "$budget" <<'PY'
import json, shutil, sys
from pathlib import Path

runs, out = Path(sys.argv[1]), Path(sys.argv[2])
results = sorted((json.loads(p.read_text()) | {"_written": p.stat().st_mtime} for p in runs.glob("*/result.json")),
                 key=lambda r: r["started_at"])
rows = []
for n, r in enumerate(results, 1):
    start, end = map(float, (out / f"run{n}.wall").read_text().split())
    best = next((it for it in r["iterations"] if it["iteration"] == r.get("best_iteration")), None)
    shutil.copy(runs / r["run_id"] / "report.md", out / f"run{n}_report.md")
    rows.append({"run": n, "run_id": r["run_id"], "status": r["status"], "iterations": len(r["iterations"]),
                 "wall_s": round(end - start, 2), "pipeline_s": round(r["_written"] - r["started_at"], 2),
                 "best": best["candidate"] if best else None,
                 "median_us": ((best or {}).get("report", {}).get("measurement") or {}).get("median_us"),
                 "reused": r["plan"].get("reuse"), "last_diagnosis": r["verdicts"][-1]["diagnosis"] if r["verdicts"] else None})
summary = {"spec": results[0]["spec"]["name"] if results else None, "runs": rows}
if len(rows) == 2:
    summary["wall_ratio"] = round(rows[0]["wall_s"] / rows[1]["wall_s"], 2)
    summary["pipeline_ratio"] = round(rows[0]["pipeline_s"] / rows[1]["pipeline_s"], 2)
    summary["target_5x_met"] = summary["pipeline_ratio"] >= 5
(out / "experience_rerun.json").write_text(json.dumps(summary, indent=1))
lines = [f"# Experience reuse: {summary['spec']} run twice on one experience store", "",
         f"Command: `bash bench/experience_rerun.sh OUT {sys.argv[3]} {sys.argv[4]}` (on the GPU machine).", "",
         "wall_s: the `sparseditto run` process; pipeline_s: from the run's start to its result.json.", "",
         "| run | status | iterations | wall s | pipeline s | best kernel | us | reused |", "|---|---|---|---|---|---|---|---|"]
for r in rows:
    reused = f"`{r['reused']['kernel']}{r['reused']['params']}`" if r["reused"] else "-"
    lines.append(f"| {r['run']} | {r['status']} | {r['iterations']} | {r['wall_s']} | {r['pipeline_s']} | `{r['best']}` | {r['median_us']} | {reused} |")
if len(rows) == 2:
    lines += ["", f"Ratio first/second: {summary['wall_ratio']}x wall, {summary['pipeline_ratio']}x pipeline "
              f"(target 5x: {'met' if summary['target_5x_met'] else 'NOT met'}). Second run: {rows[1]['last_diagnosis']}."]
(out / "experience_rerun.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY

"""Where each spec's device time went: per run folder, every iteration's wall seconds, its stage seconds (those a
stage records), the correctness stage's phases, the baselines' seconds (each configuration's too) and how they were
timed, the runner's host seconds, the candidate's one-time preparation (milliseconds, once per instance: about eight
per verification), the runner process's wall, start-up and scrub seconds, whether it was run ahead, and why the
sanitizer did or did not run. `python3 bench/iteration_seconds.py RUNS_DIR > out.json`"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def iteration_row(it: dict) -> dict:
    feedback = {f["stage"]: f for f in it["report"]["feedback"]}
    sanitizer = feedback.get("sanitizer", {})
    correctness = feedback.get("correctness", {}).get("evidence", {})
    benchmark = feedback.get("benchmark", {}).get("evidence", {})
    return {"iteration": it["iteration"], "candidate": it["candidate"], "seconds": round(it["seconds"], 1),
            "stage_seconds": {s: round(f["evidence"]["seconds"], 1) for s, f in feedback.items()
                              if isinstance(f.get("evidence", {}).get("seconds"), (int, float))},
            # the runner's host work made ahead in threads, and whether the result was run ahead beside another
            "host_seconds": correctness.get("host_seconds"), "run_ahead": "run_ahead" in correctness,
            # the correctness stage's seconds by phase, summed over its trials (tools/runner.py check_correctness)
            "correctness_phases": correctness.get("phase_seconds"),
            # the benchmark's seconds spent timing baselines, and which were timed here or carried
            "baseline_seconds": benchmark.get("baseline_seconds"), "baselines_timed": benchmark.get("baselines_timed"),
            # each configuration timed here: built, run once and timed (the rest of baseline_seconds is imports)
            "baseline_config_seconds": {b["name"]: b["seconds"] for b in it["report"].get("baselines", [])
                                        if not b.get("carried") and "seconds" in b},
            "preparation_ms": round((it["report"].get("measurement") or {}).get("preparation_ms") or 0.0, 1),
            # the runner process: its whole wall time (from the parent), its start and imports, the scrub before it
            "process_seconds": {k: correctness[k] for k in ("process_seconds", "startup_seconds", "scrub_seconds")
                                if k in correctness},
            "sanitizer": f"{sanitizer.get('status')}: {sanitizer.get('message')}" if sanitizer else None}


def main(runs_dir: Path) -> None:
    runs = {}
    for result in sorted(runs_dir.glob("*/result.json")):
        data = json.loads(result.read_text())
        runs[result.parent.name] = [iteration_row(it) for it in data.get("iterations", [])]
    print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

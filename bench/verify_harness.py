"""The verification harness on the GPU: the adversarial suite and the reference kernels, with stage times.

Run on the GPU machine: `python3 bench/verify_harness.py OUT_DIR adversarial|reference [SPEC_NAME ...]`. Every case goes
through one GpuVerifier in this one process (so the pipeline's survival of each crash and hang is part
of the test). Raw sanitizer and ncu output is kept under OUT_DIR/tool_output (the parser fixtures).
Writes OUT_DIR/harness_<part>.json and prints a short table last.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from sparseditto.agents.planner import offline_plan
from sparseditto.evals.adversarial_suite import CASES, CORRECT
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import load_spec
from sparseditto.tools.verifier import GpuVerifier

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_SPECS = ("spmm_fp32_1pct", "spmm_fp16_5pct", "spmv_fp32_uniform", "spmv_fp32_powerlaw")


def stage_seconds(report) -> dict[str, float]:
    return {f.stage: round(f.evidence["seconds"], 2) for f in report.feedback if "seconds" in f.evidence}


def first_failure(report):
    return next((f for f in report.feedback if f.status in {"failed", "error"}), None)


def adversarial(verifier: GpuVerifier) -> list[dict]:
    """Every case on its own spec, then the honest kernel on each spec the cases use."""
    rows = []
    specs = {}
    for case in CASES:
        specs.setdefault(case.spec, case.spec())
    honest = [(CORRECT, spec) for spec in specs.values()]
    for case, spec in [*((c, specs[c.spec]) for c in CASES), *honest]:
        start = time.perf_counter()
        report = verifier.verify(case.candidate(), spec)
        fail = first_failure(report)
        got = (fail.stage, fail.error_type) if fail else ("", "")
        rows.append({"case": case.name, "hole": case.hole, "spec": spec.name, "cheat": case.cheat,
                     "expected": [case.stage, case.error_type], "got": list(got),
                     "as_expected": got == (case.stage, case.error_type), "accepted": report.correct,
                     "message": fail.message if fail else "", "seconds": round(time.perf_counter() - start, 2),
                     "stage_seconds": stage_seconds(report)})
        print(f"{case.name:32s} {spec.name:22s} expected {case.stage}/{case.error_type:22s} got {got[0]}/{got[1]}", flush=True)
    return rows


def reference(verifier: GpuVerifier, spec_names: tuple[str, ...] = REFERENCE_SPECS) -> list[dict]:
    rows = []
    for name in spec_names:
        spec = load_spec(ROOT / "examples" / f"{name}.yaml")
        plan = offline_plan(spec)
        for strategy in plan.strategies:
            candidate = get_kernel(strategy.kernel).instantiate(strategy.start)
            start = time.perf_counter()
            report = verifier.verify(candidate, spec)
            m = report.measurement
            profile = report.stage("profile")
            rows.append({"spec": name, "candidate": candidate.label(), "correct": report.correct,
                         "stages": {f.stage: f.status for f in report.feedback},
                         "failure": (first_failure(report).model_dump() if first_failure(report) else None),
                         "median_us": m.median_us if m else None, "speedup_vs_best": m.speedup_vs_best if m else None,
                         "bottleneck": profile.evidence.get("bottleneck") if profile else None,
                         "profile": profile.model_dump() if profile else None,
                         "sanitizer": report.stage("sanitizer").model_dump() if report.stage("sanitizer") else None,
                         "seconds": round(time.perf_counter() - start, 2), "stage_seconds": stage_seconds(report)})
            print(f"{name:20s} {candidate.label():60s} correct={report.correct} {rows[-1]['stages']} "
                  f"{rows[-1]['stage_seconds']}", flush=True)
    return rows


def main(out: Path, part: str, spec_names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    os.environ["SPARSEDITTO_TOOL_OUTPUT_DIR"] = str(out / "tool_output")
    verifier = GpuVerifier(arch="sm_90", trials=3, timeout_s=40 if part == "adversarial" else 300, runs=20, tool_timeout_s=240)
    rows = adversarial(verifier) if part == "adversarial" else reference(verifier, tuple(spec_names) or REFERENCE_SPECS)
    (out / f"harness_{part}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])

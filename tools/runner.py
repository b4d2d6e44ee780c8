"""The candidate runner: executes one candidate on the GPU, in its own process.

`python -m sparseditto.tools.runner JOB.json RESULT.json` loads a compiled candidate, runs the
correctness trials (fresh seeds, held-out shapes, poisoned outputs and workspaces, inputs checked
unchanged), then times the candidate and every baseline configuration side by side. A crash or hang
here ends only this process; the parent turns a missing result into feedback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from sparseditto.spec import Spec
from sparseditto.tools.contract import KernelCandidate
from sparseditto.tools.families import FAMILIES, Problem
from sparseditto.tools.families.base import POISON, VALUE_BYTES
from sparseditto.tools.preparations import PREPARATIONS
from sparseditto.tools.results import BaselineTiming, Feedback, Measurement, Trial
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call


class RunJob(BaseModel):
    candidate: KernelCandidate
    spec: Spec
    cubin_path: str
    seeds: list[int]
    held_out_shapes: list[dict[str, int]]
    timing_seed: int
    warmup: int = 5
    runs: int = 30
    time_baselines: bool = True


class RunResult(BaseModel):
    device: dict[str, Any]
    feedback: list[Feedback]
    trials: list[Trial]
    measurement: Measurement | None = None
    baselines: list[BaselineTiming] = []


def device_info() -> dict[str, Any]:
    import cupy as cp

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    return {
        "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "arch": f"sm_{props['major']}{props['minor']}",
        "sms": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "smem_per_block_optin": props.get("sharedMemPerBlockOptin", 0),
    }


def rel_error(out: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """||out - ref|| / ||ref|| and the number of non-finite (unwritten or NaN) elements."""
    bad = int((~np.isfinite(out)).sum())
    if bad:
        return float("inf"), bad
    denom = float(np.linalg.norm(ref)) or 1.0
    return float(np.linalg.norm(out - ref) / denom), 0


class Launcher:
    """Binds a loaded candidate to one problem instance on the device."""

    def __init__(self, candidate: KernelCandidate, module: Any, problem: Problem, sms: int) -> None:
        import cupy as cp

        self.candidate = candidate
        self.problem = problem
        t0 = time.perf_counter()
        prepared, extra_symbols = ({}, {})
        if candidate.preparation:
            prepared, extra_symbols = PREPARATIONS[candidate.preparation](problem, candidate.parameters)
        self.preparation_ms = (time.perf_counter() - t0) * 1e3
        self.symbols = {**problem.symbols, **extra_symbols, "value_bytes": VALUE_BYTES[problem.dtype], "num_sms": sms}
        self.host = {**problem.inputs, **prepared}
        self.arrays = {name: cp.asarray(arr) for name, arr in self.host.items()}
        storage = problem.inputs["values"].dtype
        self.output = cp.empty(problem.output_shape, dtype=storage)
        self.arrays[problem.output_name] = self.output
        for name, ws in candidate.workspace.items():
            dtype = {"fp32": np.float32, "int32": np.int32, "value": storage}[ws.dtype]
            buf = cp.empty(candidate.workspace_sizes(self.symbols)[name], dtype=dtype)
            buf.view(np.uint8).fill(0xFF)  # garbage, never zeros: reading before writing shows up
            self.arrays[name] = buf
        self.launches = []
        for geo in candidate.geometry(self.symbols):
            fn = module.get_function(geo.entry)
            if geo.shared_bytes > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = geo.shared_bytes
            spec_args = next(k for k in candidate.kernels if k.entry == geo.entry).args
            args = tuple(self._arg(a) for a in spec_args)
            self.launches.append((fn, geo, args))

    def _arg(self, name: str) -> Any:
        if name in self.arrays:
            return self.arrays[name]
        if name in self.symbols:
            return np.int32(self.symbols[name])
        raise KeyError(f"argument {name!r} is neither an array nor a symbol of {self.problem.output_name}'s family")

    def poison(self) -> None:
        self.output.fill(POISON[self.problem.dtype])

    def run(self) -> None:
        for fn, geo, args in self.launches:
            fn(geo.grid, geo.block, args, shared_mem=geo.shared_bytes)

    def inputs_unchanged(self) -> bool:
        return all(np.array_equal(self.arrays[name].get(), arr) for name, arr in self.host.items())

    def result(self) -> np.ndarray:
        from sparseditto.tools.families.base import to_float64

        return to_float64(self.output.get(), self.problem.dtype)


def run_job(job: RunJob) -> RunResult:
    import cupy as cp

    family = FAMILIES[job.spec.family]
    info = device_info()
    module = cp.RawModule(path=job.cubin_path)
    tol = job.spec.tolerance or family.tolerance(job.spec.dtype)
    feedback: list[Feedback] = []
    trials: list[Trial] = []

    shapes = [(None, False)] * len(job.seeds) + [(s, True) for s in job.held_out_shapes]
    seeds = job.seeds + [job.seeds[-1] + 1000 + i for i in range(len(job.held_out_shapes))]
    worst = None
    for seed, (shape, held_out) in zip(seeds, shapes):
        problem = family.make_problem(job.spec, seed, shape)
        launcher = Launcher(job.candidate, module, problem, info["sms"])
        launcher.poison()
        launcher.run()
        cp.cuda.Device().synchronize()
        err, unwritten = rel_error(launcher.result(), family.reference(problem))
        unchanged = launcher.inputs_unchanged()
        trial = Trial(
            seed=seed, shape=problem.symbols, held_out=held_out, rel_error=err if np.isfinite(err) else None,
            unwritten=unwritten, inputs_unchanged=unchanged, passed=err <= tol and unchanged,
        )
        trials.append(trial)
        if not trial.passed and worst is None:
            worst = trial
        del launcher

    if worst is not None:
        if not worst.inputs_unchanged:
            kind, msg = "input_mutation", "the kernel modified one of its inputs"
        elif worst.unwritten:
            kind, msg = "unwritten_output", f"{worst.unwritten} output elements are NaN/Inf or were never written"
        else:
            kind, msg = "wrong_result", f"relative error {worst.rel_error:.3g} exceeds the tolerance {tol:.1g}"
        feedback.append(Feedback(
            stage="correctness", status="failed", error_type=kind, message=msg,
            location=f"shape {worst.shape}{' (held-out)' if worst.held_out else ''}, seed {worst.seed}",
            evidence={"trials": len(trials), "failed": sum(not t.passed for t in trials), "tolerance": tol},
            suggestion="check bounds handling for shapes that are not multiples of the tile" if worst.held_out else None,
        ))
        return RunResult(device=info, feedback=feedback, trials=trials)
    feedback.append(Feedback(
        stage="correctness", status="passed", message=f"{len(trials)} trials within tolerance {tol:.1g}",
        evidence={"max_rel_error": max(t.rel_error or 0.0 for t in trials), "held_out_trials": len(job.held_out_shapes)},
    ))

    flush = L2Flusher()
    copy_bw = device_copy_bandwidth(flush)
    problem = family.make_problem(job.spec, job.timing_seed)
    ref = family.reference(problem)
    launcher = Launcher(job.candidate, module, problem, info["sms"])
    launcher.poison()
    launcher.run()
    cp.cuda.Device().synchronize()
    err, _ = rel_error(launcher.result(), ref)
    if not err <= tol:
        feedback.append(Feedback(stage="benchmark", status="failed", error_type="wrong_result",
                                 message=f"wrong on the timing instance: relative error {err:.3g}"))
        return RunResult(device=info, feedback=feedback, trials=trials)
    timing = time_call(launcher.run, flush, warmup=job.warmup, runs=job.runs)

    baselines: list[BaselineTiming] = []
    if job.time_baselines:
        device_inputs = {k: launcher.arrays[k] for k in problem.inputs}
        for call in family.baselines(device_inputs, problem):
            call.run()
            cp.cuda.Device().synchronize()
            from sparseditto.tools.families.base import to_float64

            b_err, _ = rel_error(to_float64(call.output.get(), problem.dtype), ref)
            t = time_call(call.run, flush, warmup=job.warmup, runs=job.runs)
            baselines.append(BaselineTiming(name=call.name, library=call.library, config=call.config,
                                            median_us=t.median_us, rel_error=b_err, correct=b_err <= max(tol, 1e-2)))
    s = problem.symbols
    nbytes = family.min_bytes(s, problem.dtype)
    floor_us = nbytes / copy_bw * 1e6
    correct_baselines = [b for b in baselines if b.correct]
    best = min(correct_baselines, key=lambda b: b.median_us) if correct_baselines else None
    per_library: dict[str, float] = {}
    for b in correct_baselines:
        per_library[b.library] = min(per_library.get(b.library, float("inf")), b.median_us)
    measurement = Measurement(
        median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us, runs=timing.runs,
        preparation_ms=launcher.preparation_ms, floor_us=floor_us,
        achieved_gbps=nbytes / timing.median_us * 1e-3, achieved_gflops=family.flops(s) / timing.median_us * 1e-3,
        bandwidth_fraction=floor_us / timing.median_us, copy_bandwidth_gbps=copy_bw * 1e-9,
        best_baseline=best.name if best else None, best_baseline_us=best.median_us if best else None,
        speedup_vs_best=best.median_us / timing.median_us if best else None,
        speedups={lib: us / timing.median_us for lib, us in per_library.items()},
    )
    suspect = timing.median_us < 0.9 * floor_us
    feedback.append(Feedback(
        stage="benchmark", status="failed" if suspect else "passed",
        error_type="suspect_timing" if suspect else None,
        message=(f"{timing.median_us:.1f} us is below the bandwidth floor {floor_us:.1f} us: the timing cannot be trusted"
                 if suspect else f"{timing.median_us:.1f} us, {measurement.bandwidth_fraction:.0%} of the bandwidth floor"),
        evidence={"median_us": timing.median_us, "floor_us": floor_us, "best_baseline_us": measurement.best_baseline_us},
    ))
    return RunResult(device=info, feedback=feedback, trials=trials, measurement=measurement, baselines=baselines)


def main(argv: list[str]) -> int:
    job = RunJob.model_validate_json(Path(argv[0]).read_text())
    result = run_job(job)
    Path(argv[1]).write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

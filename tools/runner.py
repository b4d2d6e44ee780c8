"""The candidate runner: executes one candidate on the GPU, in its own process.

`python -m sparseditto.tools.runner JOB.json RESULT.json` loads a compiled candidate and, by the job's mode:
- verify: correctness trials (fresh seeds, held-out shapes, NaN-poisoned outputs and 0xFF workspaces,
  inputs checked unchanged, the library run before the candidate in one trial), then the candidate
  and every baseline configuration timed side by side, and the output checked again after the timed runs;
- sanitize: one small instance with plain cudaMalloc buffers and uninitialised outputs, for compute-sanitizer;
- profile: one launch sequence (or one baseline call) between cudaProfilerStart/Stop, for Nsight Compute.
A crash or hang here ends only this process; the parent turns a missing result into feedback.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from sparseditto.spec import Spec
from sparseditto.tools.contract import KernelCandidate, runner_symbols
from sparseditto.tools.correctness import classify_failure, rel_error
from sparseditto.tools.families import FAMILIES, Problem
from sparseditto.tools.families.base import POISON_BITS, to_float64
from sparseditto.tools.preparations import PREPARATIONS
from sparseditto.tools.results import BaselineTiming, Feedback, Measurement, Trial, fastest_per_library
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call

# Peak arithmetic rates used only to flag impossible timings (the dense tensor-core peaks of an H200 SXM from
# NVIDIA's datasheet, not measured here: the fastest way any kernel could do the FLOPs); a time below the floor
# is a measurement error or a cheat.
PEAK_FLOPS = {"fp32": 495e12, "fp16": 990e12, "bf16": 990e12}


class RunJob(BaseModel):
    candidate: KernelCandidate
    spec: Spec
    cubin_path: str
    seeds: list[int]
    held_out_shapes: list[dict[str, int]]
    timing_seed: int
    warmup: int = 5
    runs: int = 30
    mode: Literal["verify", "sanitize", "profile"] = "verify"
    small_shape: dict[str, int] | None = None
    profile_baseline: str | None = None


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


class Launcher:
    """Binds a loaded candidate to one problem instance on the device."""

    def __init__(self, candidate: KernelCandidate, module: Any, problem: Problem, sms: int, initialise: bool = True) -> None:
        import cupy as cp

        self.candidate = candidate
        self.problem = problem
        t0 = time.perf_counter()
        prepared, extra_symbols = ({}, {})
        if candidate.preparation:
            prepared, extra_symbols = PREPARATIONS[candidate.preparation](problem, candidate.parameters)
        self.preparation_ms = (time.perf_counter() - t0) * 1e3
        self.symbols = {**problem.symbols, **extra_symbols, **runner_symbols(problem.dtype, sms)}
        self.host = {**problem.inputs, **prepared}
        self.arrays = {name: cp.asarray(arr) for name, arr in self.host.items()}
        storage = problem.inputs["values"].dtype
        self.output = cp.empty(problem.output_shape, dtype=storage)
        self.arrays[problem.output_name] = self.output
        bits = POISON_BITS[problem.dtype]
        self._poison_bits = bits
        self._output_bits = self.output.view(bits.dtype)
        for name, ws in candidate.workspace.items():
            dtype = {"fp32": np.float32, "int32": np.int32, "value": storage}[ws.dtype]
            buf = cp.empty(candidate.workspace_sizes(self.symbols)[name], dtype=dtype)
            if initialise:
                buf.view(np.uint8).fill(0xFF)  # garbage, never zeros: reading before writing shows up
            self.arrays[name] = buf
        self.launches = []
        for launch, geo in zip(candidate.kernels, candidate.geometry(self.symbols), strict=True):
            fn = module.get_function(geo.entry)
            if geo.shared_bytes > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = geo.shared_bytes
            args = tuple(self._arg(a) for a in launch.args)
            self.launches.append((fn, geo, args))

    def _arg(self, name: str) -> Any:
        if name in self.arrays:
            return self.arrays[name]
        if name in self.symbols:
            return np.int32(self.symbols[name])
        raise KeyError(f"argument {name!r} is neither an array nor a symbol of {self.problem.output_name}'s family")

    def poison(self) -> None:
        self._output_bits.fill(self._poison_bits)

    def run(self) -> None:
        for fn, geo, args in self.launches:
            fn(geo.grid, geo.block, args, shared_mem=geo.shared_bytes)

    def unwritten(self) -> int:
        return int((self._output_bits == self._poison_bits).sum())

    def inputs_unchanged(self) -> bool:
        return all(np.array_equal(self.arrays[name].get(), arr) for name, arr in self.host.items())

    def result(self) -> np.ndarray:
        return to_float64(self.output.get(), self.problem.dtype)


def _run_library_first(family: Any, launcher: Launcher, problem: Problem) -> None:
    """The library on the same device inputs just before the candidate (the 'reference first' order): preparing
    the baselines runs each once."""
    import cupy as cp

    calls = family.baselines({k: launcher.arrays[k] for k in problem.inputs}, problem)
    cp.cuda.Device().synchronize()
    del calls


def check_correctness(job: RunJob, family: Any, module: Any, sms: int, tol: float) -> tuple[list[Trial], Feedback]:
    import cupy as cp

    shapes = [(None, False)] * len(job.seeds) + [(s, True) for s in job.held_out_shapes]
    seeds = job.seeds + [job.seeds[-1] + 1000 + i for i in range(len(job.held_out_shapes))]
    trials: list[Trial] = []
    outputs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, (seed, (shape, held_out)) in enumerate(zip(seeds, shapes)):
        problem = family.make_problem(job.spec, seed, shape)
        launcher = Launcher(job.candidate, module, problem, sms)
        order = "library_first" if i == 1 and not held_out else "candidate_first"
        if order == "library_first":
            _run_library_first(family, launcher, problem)
        launcher.poison()
        launcher.run()
        cp.cuda.Device().synchronize()
        out, ref = launcher.result(), family.reference(problem)
        unwritten = launcher.unwritten()
        non_finite = int((~np.isfinite(out)).sum()) - unwritten
        err = rel_error(out, ref)
        unchanged = launcher.inputs_unchanged()
        trials.append(Trial(seed=seed, shape=problem.symbols, held_out=held_out, order=order,
                            rel_error=err if np.isfinite(err) else None, unwritten=unwritten, non_finite=non_finite,
                            inputs_unchanged=unchanged, passed=err <= tol and unchanged))
        outputs[i] = (out, ref)
        del launcher
    failed = next((t for t in trials if not t.passed), None)
    if failed is not None:
        kind, msg = classify_failure(trials, failed, outputs, tol)
        out, ref = outputs[trials.index(failed)]
        worst = int(np.argmax(np.where(np.isfinite(out), np.abs(out - ref), np.inf)))
        return trials, Feedback(
            stage="correctness", status="failed", error_type=kind, message=msg,
            location=f"shape {failed.shape}{' (held-out)' if failed.held_out else ''}, seed {failed.seed}, {failed.order}",
            evidence={"trials": len(trials), "failed": sum(not t.passed for t in trials), "tolerance": tol,
                      "rel_error": failed.rel_error,
                      "worst_element": {"index": [int(i) for i in np.unravel_index(worst, out.shape)],
                                        "got": float(out.flat[worst]), "expected": float(ref.flat[worst])}},
            suggestion={"held_out_failure": "handle shapes that are not multiples of the tile (bounds checks on the tail)",
                        "unwritten_output": "every output element must be written by exactly one thread, including tails",
                        "precision_loss": "accumulate in fp32 and keep the inputs' precision in the products",
                        "stale_result": "compute from the inputs on every call; keep no state between launches",
                        "input_mutation": "inputs are read-only; write only the output and the declared workspaces",
                        }.get(kind),
        )
    return trials, Feedback(
        stage="correctness", status="passed",
        message=f"{len(trials)} trials within tolerance {tol:.1g}"
                + (", both run orders" if len({t.order for t in trials}) == 2 else ", candidate first only"),
        evidence={"max_rel_error": max(t.rel_error or 0.0 for t in trials), "held_out_trials": len(job.held_out_shapes)},
    )


def benchmark(job: RunJob, family: Any, module: Any, info: dict[str, Any], tol: float) -> tuple[Feedback, Measurement | None, list[BaselineTiming]]:
    import cupy as cp

    flush = L2Flusher()
    copy_bw = device_copy_bandwidth(flush)
    problem = family.make_problem(job.spec, job.timing_seed)
    ref = family.reference(problem)
    launcher = Launcher(job.candidate, module, problem, info["sms"])
    launcher.poison()
    launcher.run()
    cp.cuda.Device().synchronize()
    err = rel_error(launcher.result(), ref)
    if not err <= tol:
        return Feedback(stage="benchmark", status="failed", error_type="wrong_result",
                        message=f"wrong on the timing instance: relative error {err:.3g}"), None, []

    def before_each() -> None:
        flush()
        launcher.poison()  # each timed run must compute the whole output again

    # a number of timed runs the kernel cannot predict (from the timing seed): counting calls to skip work late does not pay
    runs = job.runs + job.timing_seed % (job.runs // 2 + 1)
    timing = time_call(launcher.run, before_each, warmup=job.warmup, runs=runs)
    after = rel_error(launcher.result(), ref)
    if not after <= tol:
        return Feedback(stage="benchmark", status="failed", error_type="inconsistent_output",
                        message=f"correct when checked, wrong after the timed runs (relative error {after:.3g}): "
                                "the kernel does not compute the result on every call"), None, []

    baselines: list[BaselineTiming] = []
    for call in family.baselines({k: launcher.arrays[k] for k in problem.inputs}, problem):
        cp.cuda.Device().synchronize()  # each call has run once while being prepared: its output is the answer
        b_err = rel_error(to_float64(call.output.get(), problem.dtype), ref)
        t = time_call(call.run, flush, warmup=job.warmup, runs=job.runs)
        baselines.append(BaselineTiming(name=call.name, library=call.library, config=call.config,
                                        median_us=t.median_us, rel_error=b_err, correct=b_err <= max(tol, 1e-2)))
    s = problem.symbols
    nbytes = family.min_bytes(s, problem.dtype)
    bytes_floor_us = nbytes / copy_bw * 1e6
    floor_us = max(bytes_floor_us, family.flops(s) / PEAK_FLOPS[problem.dtype] * 1e6)
    correct_baselines = [b for b in baselines if b.correct]
    best = min(correct_baselines, key=lambda b: b.median_us) if correct_baselines else None
    measurement = Measurement(
        median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us, runs=timing.runs,
        preparation_ms=launcher.preparation_ms, floor_us=floor_us,
        achieved_gbps=nbytes / timing.median_us * 1e-3, achieved_gflops=family.flops(s) / timing.median_us * 1e-3,
        bandwidth_fraction=bytes_floor_us / timing.median_us, copy_bandwidth_gbps=copy_bw * 1e-9,
        best_baseline=best.name if best else None, best_baseline_us=best.median_us if best else None,
        speedup_vs_best=best.median_us / timing.median_us if best else None,
        speedups={lib: b.median_us / timing.median_us for lib, b in fastest_per_library(baselines).items()},
    )
    suspect = timing.median_us < 0.9 * floor_us
    fb = Feedback(
        stage="benchmark", status="failed" if suspect else "passed",
        error_type="suspect_timing" if suspect else None,
        message=(f"{timing.median_us:.1f} us is below the physical floor {floor_us:.1f} us (bytes and FLOPs at the "
                 "device's peak): the timing cannot be trusted" if suspect
                 else f"{timing.median_us:.1f} us, {measurement.bandwidth_fraction:.0%} of the bandwidth floor"),
        evidence={"median_us": timing.median_us, "floor_us": floor_us, "best_baseline_us": measurement.best_baseline_us},
    )
    return fb, measurement, baselines


def run_job(job: RunJob) -> RunResult:
    import cupy as cp

    family = FAMILIES[job.spec.family]
    info = device_info()
    module = cp.RawModule(path=job.cubin_path)
    tol = job.spec.tolerance or family.tolerance(job.spec.dtype)
    trials, correctness = check_correctness(job, family, module, info["sms"], tol)
    if correctness.status != "passed":
        return RunResult(device=info, feedback=[correctness], trials=trials)
    bench, measurement, baselines = benchmark(job, family, module, info, tol)
    return RunResult(device=info, feedback=[correctness, bench], trials=trials, measurement=measurement, baselines=baselines)


def sanitize_job(job: RunJob) -> RunResult:
    """One small instance, plain allocations, nothing initialised that the candidate should write."""
    import cupy as cp

    cp.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the checker knows its true size
    family = FAMILIES[job.spec.family]
    info = device_info()
    module = cp.RawModule(path=job.cubin_path)
    problem = family.make_problem(job.spec, job.seeds[0], job.small_shape)
    launcher = Launcher(job.candidate, module, problem, info["sms"], initialise=False)
    launcher.run()
    cp.cuda.Device().synchronize()
    return RunResult(device=info, feedback=[], trials=[])


def profile_job(job: RunJob) -> RunResult:
    """One launch sequence of the candidate, or one call of the named baseline, inside the profiled range."""
    import cupy as cp

    family = FAMILIES[job.spec.family]
    info = device_info()
    module = cp.RawModule(path=job.cubin_path)
    problem = family.make_problem(job.spec, job.timing_seed)
    launcher = Launcher(job.candidate, module, problem, info["sms"])
    run = launcher.run
    if job.profile_baseline:
        calls = {c.name: c for c in family.baselines({k: launcher.arrays[k] for k in problem.inputs}, problem)}
        run = calls[job.profile_baseline].run
    run()  # warm: module load and first-call setup stay outside the profiled range
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    run()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    return RunResult(device=info, feedback=[], trials=[])


MODES = {"verify": run_job, "sanitize": sanitize_job, "profile": profile_job}


def main(argv: list[str]) -> int:
    job = RunJob.model_validate_json(Path(argv[0]).read_text())
    result = MODES[job.mode](job)
    Path(argv[1]).write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

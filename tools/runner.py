"""The candidate runner: executes one candidate on the GPU, in its own process.

`python -m sparseditto.tools.runner JOB.json RESULT.json` loads a compiled candidate and, by the job's mode:
- verify: correctness trials (fresh seeds, held-out shapes, every output poisoned and 0xFF workspaces,
  inputs checked unchanged, the library run before the candidate in one trial), then the candidate
  and every baseline configuration timed side by side, and every output checked again after the timed runs;
- sanitize: one small instance with plain cudaMalloc buffers and uninitialised outputs, for compute-sanitizer;
- profile: one launch sequence (or one baseline call) between cudaProfilerStart/Stop, for Nsight Compute.
Every instance's launches are checked (tools/launch_check.py) before the first one runs; a rejection is
launch feedback. A crash or hang here ends only this process; the parent turns a missing result into feedback.
It names no family: the spec's family answers for problems, references, preparations and shapes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, SerializeAsAny, field_validator

from sparseditto.spec import SpecBase, parse_spec
from sparseditto.tools.compiler import KernelResources
from sparseditto.tools.contract import KernelCandidate, runner_symbols
from sparseditto.tools.correctness import classify_failure, rel_error
from sparseditto.tools.dtypes import DTYPES, poison_bits, to_float64
from sparseditto.tools.families import Problem, ProblemFamily, get_family
from sparseditto.tools.kernel_launch import DriverLaunch, KernelParams
from sparseditto.tools.launch_check import DeviceLimits, LaunchRejected, max_shared_bytes_per_block, plan_launch
from sparseditto.tools.peaks import peak_flops
from sparseditto.tools.results import BaselineTiming, Feedback, Measurement, Trial, fastest_per_library
from sparseditto.tools.tensormap import ArrayInfo, TensorMapError, encode
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call

DEFAULT_DYNAMIC_SHARED = 48 * 1024  # above this a function's dynamic shared-memory limit must be raised


class RunJob(BaseModel):
    candidate: KernelCandidate
    spec: SerializeAsAny[SpecBase]  # dumped as the family's own model, read back through parse_spec
    cubin_path: str
    resources: dict[str, KernelResources] = {}
    seeds: list[int]
    held_out_shapes: list[dict[str, int]]
    timing_seed: int
    warmup: int = 5
    runs: int = 30
    mode: Literal["verify", "sanitize", "profile"] = "verify"
    small_shape: dict[str, int] | None = None
    profile_baseline: str | None = None

    @field_validator("spec", mode="before")
    @classmethod
    def _family_spec(cls, value: Any) -> SpecBase:
        return parse_spec(value)


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
        "cc": 10 * props["major"] + props["minor"],
        "sms": props["multiProcessorCount"],
        "clock_khz": cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, dev.id),
        "l2_bytes": props["l2CacheSize"],
        "smem_per_block_optin": props.get("sharedMemPerBlockOptin", 0),
    }


def device_limits(info: dict[str, Any]) -> DeviceLimits:
    """The device's own shared-memory limit when it reports one, else its architecture's."""
    return DeviceLimits(arch=info["arch"], shared_bytes_per_block=info["smem_per_block_optin"] or max_shared_bytes_per_block(info["arch"]))


def tolerances(spec: SpecBase, problem: Problem) -> dict[str, float]:
    """Each output's tolerance; the spec's, when given, applies to all."""
    return {name: spec.tolerance or out.tolerance for name, out in problem.outputs.items()}


class Launcher:
    """Binds a loaded candidate to one problem instance on the device; raises LaunchRejected before allocating
    anything when a launch check fails."""

    def __init__(self, candidate: KernelCandidate, module: Any, problem: Problem, family: ProblemFamily,
                 info: dict[str, Any], resources: dict[str, KernelResources], initialise: bool = True) -> None:
        import cupy as cp

        self.candidate = candidate
        self.problem = problem
        t0 = time.perf_counter()
        prepared, extra_symbols = prepare(candidate, family, problem)
        self.preparation_ms = (time.perf_counter() - t0) * 1e3
        self.symbols = {**problem.symbols, **extra_symbols, **runner_symbols(problem.dtype, info["sms"])}
        self.host = {**problem.inputs, **prepared}
        plan = plan_launch(candidate, self.symbols, problem.scalars, array_infos(problem, prepared), problem.dtype,
                           device_limits(info), resources)
        self.arrays: dict[str, Any] = {name: cp.asarray(arr) for name, arr in self.host.items()}
        self.outputs = {name: cp.empty(out.shape, dtype=DTYPES[out.dtype].storage) for name, out in problem.outputs.items()}
        self.arrays.update(self.outputs)
        self._poison = {name: poison_bits(out.dtype) for name, out in problem.outputs.items()}
        for name, size in plan.workspace_sizes.items():
            buf = cp.empty(size, dtype=DTYPES[plan.workspace_dtypes[name]].storage)
            if initialise:
                buf.view(np.uint8).fill(0xFF)  # garbage, never zeros: reading before writing shows up
            self.arrays[name] = buf
        try:
            maps = {name: encode(p, self.arrays[p.array].data.ptr) for name, p in plan.tensor_maps.items()}
        except TensorMapError as exc:
            raise LaunchRejected("tensor_map_invalid", str(exc)) from None
        pointers = {name: arr.data.ptr for name, arr in self.arrays.items()}
        self.launches = []
        for geo, args in zip(plan.geometries, plan.args, strict=True):
            fn = module.get_function(geo.entry)
            if geo.shared_bytes > DEFAULT_DYNAMIC_SHARED:
                fn.max_dynamic_shared_size_bytes = geo.shared_bytes
            self.launches.append(DriverLaunch(fn, geo, KernelParams(args, pointers, maps)))

    def poison(self) -> None:
        for name, out in self.outputs.items():
            out.view(self._poison[name].dtype).fill(self._poison[name])

    def run(self) -> None:
        import cupy as cp

        stream = cp.cuda.get_current_stream().ptr
        for launch in self.launches:
            launch(stream)

    def unwritten(self, name: str) -> np.ndarray:
        """Where output `name` still holds the poison."""
        bits = self._poison[name]
        return (self.outputs[name].view(bits.dtype) == bits).get()

    def inputs_unchanged(self) -> bool:
        return all(np.array_equal(self.arrays[name].get(), arr) for name, arr in self.host.items())

    def results(self) -> dict[str, np.ndarray]:
        return {name: to_float64(out.get(), self.problem.outputs[name].dtype) for name, out in self.outputs.items()}


def prepare(candidate: KernelCandidate, family: ProblemFamily, problem: Problem) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The candidate's one-time preparation on this instance; an unknown or failing one is a rejection."""
    if not candidate.preparation:
        return {}, {}
    step = family.preparations.get(candidate.preparation)
    if step is None:
        raise LaunchRejected("invalid_launch", f"preparation {candidate.preparation!r} is not one of "
                             f"{sorted(family.preparations)} of {family.name}")
    try:
        return step(problem, candidate.parameters)
    except KeyError as exc:
        raise LaunchRejected("invalid_launch", f"preparation {candidate.preparation} needs the parameter {exc.args[0]}") from None


def array_infos(problem: Problem, prepared: dict[str, np.ndarray]) -> dict[str, ArrayInfo]:
    """Shapes and element types of the inputs, the preparation's arrays (by NumPy type) and the outputs."""
    infos = {name: ArrayInfo(arr.shape, problem.input_dtypes.get(name, arr.dtype.name), arr.dtype.itemsize)
             for name, arr in {**problem.inputs, **prepared}.items()}
    infos.update({name: ArrayInfo(out.shape, out.dtype, DTYPES[out.dtype].bytes) for name, out in problem.outputs.items()})
    return infos


def rejection(exc: LaunchRejected) -> Feedback:
    return Feedback(stage="launch", status="failed", error_type=exc.error_type, message=exc.message)


def _baseline_calls(job: RunJob, launcher: Launcher, problem: Problem) -> list:
    from sparseditto.tools.baselines import baseline_calls, libraries_for

    device = {k: launcher.arrays[k] for k in problem.inputs}
    return baseline_calls(job.spec.family, job.spec.baselines or libraries_for(job.spec.family), problem, device)


def _run_library_first(job: RunJob, launcher: Launcher, problem: Problem) -> None:
    """The library on the same device inputs just before the candidate (the 'reference first' order): preparing
    the baselines runs each once."""
    import cupy as cp

    calls = _baseline_calls(job, launcher, problem)
    cp.cuda.Device().synchronize()
    del calls


def _compare(results: dict[str, np.ndarray], refs: dict[str, np.ndarray], tols: dict[str, float]) -> tuple[dict[str, float], str | None]:
    """Each output's relative error and the first output outside its tolerance."""
    errors = {name: rel_error(out, refs[name]) for name, out in results.items()}
    return errors, next((name for name, err in errors.items() if not err <= tols[name]), None)


def check_correctness(job: RunJob, family: ProblemFamily, module: Any, info: dict[str, Any]) -> tuple[list[Trial], Feedback]:
    import cupy as cp

    shapes = [(None, False)] * len(job.seeds) + [(s, True) for s in job.held_out_shapes]
    seeds = job.seeds + [job.seeds[-1] + 1000 + i for i in range(len(job.held_out_shapes))]
    trials: list[Trial] = []
    outputs: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    tols: dict[str, float] = {}
    for i, (seed, (shape, held_out)) in enumerate(zip(seeds, shapes)):
        problem = family.make_problem(job.spec, seed, shape)
        tols = tolerances(job.spec, problem)
        launcher = Launcher(job.candidate, module, problem, family, info, job.resources)
        order = "library_first" if i == 1 and not held_out else "candidate_first"
        if order == "library_first":
            _run_library_first(job, launcher, problem)
        launcher.poison()
        launcher.run()
        cp.cuda.Device().synchronize()
        results, refs = launcher.results(), family.reference(problem)
        unwritten = {name: launcher.unwritten(name) for name in results}
        non_finite = sum(int((~np.isfinite(out) & ~unwritten[name]).sum()) for name, out in results.items())
        errors, failed_output = _compare(results, refs, tols)
        unchanged = launcher.inputs_unchanged()
        worst = max(errors.values())
        trials.append(Trial(seed=seed, shape=problem.symbols, held_out=held_out, order=order,
                            rel_error=worst if np.isfinite(worst) else None,
                            errors={n: e if np.isfinite(e) else None for n, e in errors.items()},
                            failed_output=failed_output, unwritten=sum(int(m.sum()) for m in unwritten.values()),
                            non_finite=non_finite, inputs_unchanged=unchanged,
                            passed=failed_output is None and unchanged))
        outputs[i] = {name: (results[name], refs[name]) for name in results}
        del launcher
    failed = next((t for t in trials if not t.passed), None)
    if failed is not None:
        kind, msg = classify_failure(trials, failed, outputs, tols)
        name = failed.failed_output or next(iter(outputs[trials.index(failed)]))
        out, ref = outputs[trials.index(failed)][name]
        worst = int(np.argmax(np.where(np.isfinite(out), np.abs(out - ref), np.inf)))
        return trials, Feedback(
            stage="correctness", status="failed", error_type=kind, message=msg,
            location=f"output {name}, shape {failed.shape}{' (held-out)' if failed.held_out else ''}, seed {failed.seed}, {failed.order}",
            evidence={"trials": len(trials), "failed": sum(not t.passed for t in trials), "tolerance": tols[name],
                      "rel_error": failed.rel_error, "errors": failed.errors,
                      "worst_element": {"output": name, "index": [int(i) for i in np.unravel_index(worst, out.shape)],
                                        "got": float(out.flat[worst]), "expected": float(ref.flat[worst])}},
            suggestion={"held_out_failure": "handle shapes that are not multiples of the tile (bounds checks on the tail)",
                        "unwritten_output": "every output element must be written by exactly one thread, including tails",
                        "precision_loss": "accumulate in fp32 and keep the inputs' precision in the products",
                        "stale_result": "compute from the inputs on every call; keep no state between launches",
                        "input_mutation": "inputs are read-only; write only the outputs and the declared workspaces",
                        }.get(kind),
        )
    return trials, Feedback(
        stage="correctness", status="passed",
        message=f"{len(trials)} trials, {len(tols)} output{'s' if len(tols) > 1 else ''} within tolerance "
                f"{', '.join(f'{n} {t:.1g}' for n, t in tols.items())}"
                + (", both run orders" if len({t.order for t in trials}) == 2 else ", candidate first only"),
        evidence={"max_rel_error": max(t.rel_error or 0.0 for t in trials), "held_out_trials": len(job.held_out_shapes)},
    )


def benchmark(job: RunJob, family: ProblemFamily, module: Any, info: dict[str, Any]) -> tuple[Feedback, Measurement | None, list[BaselineTiming]]:
    import cupy as cp

    flush = L2Flusher()
    copy_bw = device_copy_bandwidth(flush)
    problem = family.make_problem(job.spec, job.timing_seed)
    refs = family.reference(problem)
    tols = tolerances(job.spec, problem)
    launcher = Launcher(job.candidate, module, problem, family, info, job.resources)
    launcher.poison()
    launcher.run()
    cp.cuda.Device().synchronize()
    errors, failed = _compare(launcher.results(), refs, tols)
    if failed:
        return Feedback(stage="benchmark", status="failed", error_type="wrong_result",
                        message=f"{failed} wrong on the timing instance: relative error {errors[failed]:.3g}"), None, []

    def before_each() -> None:
        flush()
        launcher.poison()  # each timed run must compute every output again

    # a number of timed runs the kernel cannot predict (from the timing seed): counting calls to skip work late does not pay
    runs = job.runs + job.timing_seed % (job.runs // 2 + 1)
    timing = time_call(launcher.run, before_each, warmup=job.warmup, runs=runs)
    errors, failed = _compare(launcher.results(), refs, tols)
    if failed:
        return Feedback(stage="benchmark", status="failed", error_type="inconsistent_output",
                        message=f"correct when checked, wrong after the timed runs ({failed}: relative error "
                                f"{errors[failed]:.3g}): the kernel does not compute the result on every call"), None, []

    # a baseline computes the family's first output
    first = next(iter(problem.outputs))
    baselines: list[BaselineTiming] = []
    for call in _baseline_calls(job, launcher, problem):
        cp.cuda.Device().synchronize()  # each call has run once while being prepared: its output is the answer
        b_err = rel_error(to_float64(call.output.get(), problem.outputs[first].dtype), refs[first])
        t = time_call(call.run, flush, warmup=job.warmup, runs=job.runs)
        baselines.append(BaselineTiming(name=call.name, library=call.library, config=call.config, median_us=t.median_us,
                                        rel_error=b_err, correct=b_err <= max(tols[first], 1e-2)))
    s = problem.symbols
    nbytes = family.min_bytes(s, problem.dtype)
    bytes_floor_us = nbytes / copy_bw * 1e6
    peak = peak_flops(info["cc"], info["sms"], info["clock_khz"], problem.input_dtypes.values())
    floor_us = max(bytes_floor_us, family.flops(s) / peak * 1e6)
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
        evidence={"median_us": timing.median_us, "floor_us": floor_us, "peak_tflops": peak * 1e-12,
                  "best_baseline_us": measurement.best_baseline_us},
    )
    return fb, measurement, baselines


def _load(job: RunJob) -> tuple[ProblemFamily, dict[str, Any], Any]:
    import cupy as cp

    return get_family(job.spec.family), device_info(), cp.RawModule(path=job.cubin_path)


def run_job(job: RunJob) -> RunResult:
    family, info, module = _load(job)
    try:
        trials, correctness = check_correctness(job, family, module, info)
        if correctness.status != "passed":
            return RunResult(device=info, feedback=[correctness], trials=trials)
        bench, measurement, baselines = benchmark(job, family, module, info)
    except LaunchRejected as exc:
        return RunResult(device=info, feedback=[rejection(exc)], trials=[])
    return RunResult(device=info, feedback=[correctness, bench], trials=trials, measurement=measurement, baselines=baselines)


def sanitize_job(job: RunJob) -> RunResult:
    """One small instance, plain allocations, nothing initialised that the candidate should write."""
    import cupy as cp

    cp.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the checker knows its true size
    family, info, module = _load(job)
    problem = family.make_problem(job.spec, job.seeds[0], job.small_shape)
    try:
        launcher = Launcher(job.candidate, module, problem, family, info, job.resources, initialise=False)
    except LaunchRejected as exc:
        return RunResult(device=info, feedback=[rejection(exc)], trials=[])
    launcher.run()
    cp.cuda.Device().synchronize()
    return RunResult(device=info, feedback=[], trials=[])


def profile_job(job: RunJob) -> RunResult:
    """One launch sequence of the candidate, or one call of the named baseline, inside the profiled range."""
    import cupy as cp

    family, info, module = _load(job)
    problem = family.make_problem(job.spec, job.timing_seed)
    try:
        launcher = Launcher(job.candidate, module, problem, family, info, job.resources)
    except LaunchRejected as exc:
        return RunResult(device=info, feedback=[rejection(exc)], trials=[])
    run = launcher.run
    if job.profile_baseline:
        run = {c.name: c for c in _baseline_calls(job, launcher, problem)}[job.profile_baseline].run
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

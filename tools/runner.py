"""The candidate runner: executes one candidate on the GPU, in its own process.

`python -m sparseditto.tools.runner JOB.json RESULT.json` loads a compiled candidate and, by the job's mode:
- verify: correctness trials (fresh seeds, held-out shapes, values of varied magnitudes with IEEE specials in
  some trials, every output poisoned and 0xFF workspaces, inputs checked unchanged, each element against its own
  bound, the library run before the candidate in one trial); then the candidate timed on value sets changed in
  place between runs, every run's output and inputs checked on the device, and every baseline configuration
  timed side by side on its own pristine copies; the sanitizer's instances are saved for the sanitize mode;
- sanitize: the saved instances (tails, the main matrix's longest rows, the main instance) with plain cudaMalloc
  buffers and uninitialised outputs and workspaces, for compute-sanitizer;
- profile: one launch sequence (or one baseline call) between cudaProfilerStart/Stop, for Nsight Compute.
Every instance's launches are checked (tools/launch_check.py) before the first one runs; a rejection is
launch feedback. A crash or hang here ends only this process; the parent turns a missing result into feedback.
It names no family: the spec's family answers for problems, references, preparations and shapes.

`python -m sparseditto.tools.runner --batch BATCH.json OUT_DIR` verifies several candidates of one spec, one after
another on the same fresh inputs (one seed draw), each judged on its own exactly as alone; what depends on the inputs
only (the problems, their references and bounds, the baselines' timings) is made once. Each result is written as soon
as it is known (OUT_DIR/result-I.json), so that a crash keeps the results before it.
"""

from __future__ import annotations

import functools
import os
import pickle
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, SerializeAsAny, field_validator

from sparseditto.spec import SpecBase, parse_spec
from sparseditto.tools.compiler import KernelResources
from sparseditto.tools.contract import KernelCandidate, runner_symbols
from sparseditto.tools.correctness import CheckedOutput, classify_failure, rel_error
from sparseditto.tools.dtypes import DTYPES, poison_bits, to_float64
from sparseditto.tools.expr import holds
from sparseditto.tools.families import Problem, ProblemFamily, get_family
from sparseditto.tools.families.structure_cache import reused_ms
from sparseditto.tools.kernel_launch import bind_launches, workspace_arrays
from sparseditto.tools.launch_check import DeviceLimits, LaunchRejected, max_shared_bytes_per_block, plan_launch
from sparseditto.tools.peaks import peak_flops
from sparseditto.tools.results import BaselineTiming, Feedback, Measurement, Trial, fastest_per_library
from sparseditto.tools.run_checks import RunChecker
from sparseditto.tools.tensormap import ArrayInfo, TensorMapError
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call
from sparseditto.tools.values import numerics

LAUNCHED_AT_ENV = "SPARSEDITTO_LAUNCHED_AT"  # time.monotonic() when the parent started this process (gpu_stages._run)
VALUE_SETS = 3  # value sets the timed runs cycle through, changed in place (fewer when memory is short)
# host memory of one prefetched instance, in float64 copies of its outputs: what it keeps (reference, bound, subnormal
# mask and inputs: about 2.5 for a 2:4 problem, counted) and its peak while made (a 2:4 problem at 8192^3 with an
# epilogue: 2.35 GB for a 0.5 GB output, bench/host_prep_seconds.py --sp24-reference,
# evals/results/issue15_h200/host_reference_seconds_session12_cpu.txt)
KEPT_COPIES, PEAK_COPIES = 2.5, 5.0
SANITIZE_MAIN_MAX_BYTES = 2 << 30  # the main instance goes under the sanitizer up to this size


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
    held_out_seed: int | None = None  # what the held-out shapes were drawn from, for the report
    # where the verify mode saves the sanitizer's instances, and which of them a sanitize run launches
    instances_path: str | None = None
    sanitize_instances: list[str] = []
    # the profile mode's baseline, called after the candidate in the same profiled range (one Nsight Compute run)
    profile_baseline: str | None = None
    # every baseline configuration as an earlier verification of this spec timed it: the fastest correct one is
    # timed again beside this candidate, the others are carried (timing all of them again, a library import
    # included, took 3.3-4.3 s of every verification: evals/results/issue14_h200/
    # iteration_seconds_session15_after_library_first.json, baseline_seconds)
    earlier_baselines: list[BaselineTiming] = []

    @field_validator("spec", mode="before")
    @classmethod
    def _family_spec(cls, value: Any) -> SpecBase:
        return parse_spec(value)


class BatchJob(BaseModel):
    """Verify-mode jobs of one spec sharing seeds, held-out shapes and timing seed."""

    jobs: list[RunJob]

    @field_validator("jobs")
    @classmethod
    def _one_input_draw(cls, jobs: list[RunJob]) -> list[RunJob]:
        draws = {(j.spec.model_dump_json(), tuple(j.seeds), str(j.held_out_shapes), j.timing_seed, j.mode) for j in jobs}
        if len(draws) > 1:
            raise ValueError("a batch's jobs share the spec, the seeds, the held-out shapes, the timing seed and the mode")
        return jobs


# what depends on the inputs only, made once per process (a batch's candidates share it): problems by spec, seed and
# shape, and by the problem's identity (the problems stay here, so an identity is never reused) its references,
# bounds, element terms, fresh value sets and the baselines' timings; the copy bandwidth
_SHARED: dict[tuple[Any, ...], Any] = {}


def shared(key: tuple[Any, ...], make: Any) -> Any:
    if key not in _SHARED:
        _SHARED[key] = make()
    return _SHARED[key]


def references(family: ProblemFamily, problem: Problem) -> dict[str, np.ndarray]:
    return shared(("refs", id(problem)), lambda: family.reference(problem))


def _bounds(family: ProblemFamily, spec: SpecBase, problem: Problem, refs: dict[str, np.ndarray],
            terms: dict[str, np.ndarray] | None = None) -> Any:
    """The problem's element bounds (None for a family that judges norm-wise); `terms` only saves recounting."""
    return shared(("bounds", id(problem)), lambda: family.error_bounds(problem, refs, spec.tolerance, terms))


def _terms(family: ProblemFamily, problem: Problem) -> dict[str, np.ndarray] | None:
    return shared(("terms", id(problem)), lambda: family.element_terms(problem))


def _timing_problem(job: RunJob, family: ProblemFamily) -> Problem:
    return shared(("timing", job.spec.model_dump_json(), job.timing_seed),
                  lambda: family.make_problem(job.spec, job.timing_seed))


def _fresh_values(job: RunJob, family: ProblemFamily, problem: Problem, k: int) -> Problem:
    """Value set k (1, 2, ...) of the timing problem: its structure, every float value drawn anew."""
    return shared(("fresh", id(problem), k),
                  lambda: family.with_fresh_values(problem, np.random.default_rng([job.timing_seed, k])))


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
                 info: dict[str, Any], resources: dict[str, KernelResources], initialise: bool = True,
                 prepared: TimedPreparation | None = None) -> None:
        """`prepared`: the candidate's preparation of this problem when the caller has already made it."""
        import cupy as cp

        self.candidate = candidate
        self.problem = problem
        prepared, extra_symbols, self.preparation_ms = prepared or timed_prepare(candidate, family, problem)
        self.symbols = {**problem.symbols, **extra_symbols, **runner_symbols(problem.dtype, info["sms"])}
        self.host = {**problem.inputs, **prepared}
        plan = plan_launch(candidate, self.symbols, problem.scalars, array_infos(problem, prepared), problem.dtype,
                           device_limits(info), resources)
        self.arrays: dict[str, Any] = {name: cp.asarray(arr) for name, arr in self.host.items()}
        self.outputs = {name: cp.empty(out.shape, dtype=DTYPES[out.dtype].storage) for name, out in problem.outputs.items()}
        self.arrays.update(self.outputs)
        self._poison = {name: poison_bits(out.dtype) for name, out in problem.outputs.items()}
        self.workspaces = workspace_arrays(plan)
        self.arrays.update(self.workspaces)
        if initialise:
            self.garble_workspaces()
        try:
            self.launches = bind_launches(module, plan, {name: arr.data.ptr for name, arr in self.arrays.items()})
        except TensorMapError as exc:
            raise LaunchRejected("tensor_map_invalid", str(exc)) from None

    def poison(self) -> None:
        for name, out in self.outputs.items():
            out.view(self._poison[name].dtype).fill(self._poison[name])

    def garble_workspaces(self) -> None:
        """0xFF bytes in every workspace, never zeros: reading before writing shows up, and nothing a call leaves
        there reaches the next call."""
        for buf in self.workspaces.values():
            buf.view(np.uint8).fill(0xFF)

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
        """Bit for bit (a NaN input equals itself)."""
        return all(np.array_equal(_bit_view(self.arrays[name]).get(), _bit_view(arr)) for name, arr in self.host.items())

    def results(self) -> dict[str, np.ndarray]:
        return {name: to_float64(out.get(), self.problem.outputs[name].dtype) for name, out in self.outputs.items()}


# a preparation's arrays and symbols, and the milliseconds it took
TimedPreparation = tuple[dict[str, np.ndarray], dict[str, int], float]


def timed_prepare(candidate: KernelCandidate, family: ProblemFamily, problem: Problem) -> TimedPreparation:
    """The milliseconds are the whole preparation's, a structure taken from the cache included (structure_cache)."""
    reused_ms()  # nothing earlier counts
    start = time.perf_counter()
    arrays, symbols = prepare(candidate, family, problem)
    return arrays, symbols, (time.perf_counter() - start) * 1e3 + reused_ms()


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


def _baseline_calls(job: RunJob, arrays: dict[str, Any], problem: Problem) -> list:
    from sparseditto.tools.baselines import baseline_calls, libraries_for

    device = {k: arrays[k] for k in problem.inputs}
    return baseline_calls(job.spec.family, job.spec.baselines or libraries_for(job.spec.family), problem, device)


def _run_library_first(job: RunJob, launcher: Launcher, problem: Problem) -> None:
    """A library on the same device inputs just before the candidate (the 'reference first' order): the first
    configuration that builds and runs, over the spec's libraries in order. One call is what the order check
    needs; preparing every configuration (and importing each library) took 3.1-4.9 s of every verification."""
    import cupy as cp

    from sparseditto.tools.baselines import libraries_for

    calls = _first_working_call(job, launcher.arrays, problem, job.spec.baselines or libraries_for(job.spec.family))
    cp.cuda.Device().synchronize()
    del calls


def _first_working_call(job: RunJob, arrays: dict[str, Any], problem: Problem, libraries: Sequence[str],
                        name: str | None = None) -> list:
    """The first configuration (the one called `name`, if given) of `libraries`, in order, that builds and runs
    over `arrays`, as a one-call list, or []: only the libraries tried are imported. A library no longer
    registered is passed over."""
    from sparseditto.tools.baselines import UnknownBaseline, candidates
    from sparseditto.tools.baselines.common import collect

    device = {k: arrays[k] for k in problem.inputs}
    for library in libraries:
        try:
            options = candidates(job.spec.family, [library], problem, device)
        except UnknownBaseline:
            continue
        for option in options:
            if (name is None or option.name == name) and (calls := collect([option])):
                return calls
    return []


def _judge(family: ProblemFamily, spec: SpecBase, problem: Problem, results: dict[str, np.ndarray],
           refs: dict[str, np.ndarray], unwritten: dict[str, np.ndarray]) -> dict[str, CheckedOutput]:
    """Every output against its reference: element-wise bounds for a multilinear family, else norm-wise."""
    bounds = _bounds(family, spec, problem, refs)
    tols = tolerances(spec, problem)
    return {name: CheckedOutput.judge(out, refs[name], tols[name], unwritten[name], bounds[name] if bounds else None,
                                      numerics(problem.outputs[name].dtype).largest)
            for name, out in results.items()}


def _trial_problem(job: RunJob, family: ProblemFamily, seed: int, shape: dict[str, int] | None, specials: bool) -> Problem:
    """A trial's instance: the family's seeded problem; with `specials`, its values drawn again with NaN and Inf."""
    def make() -> Problem:
        problem = family.make_problem(job.spec, seed, shape)
        return family.with_fresh_values(problem, np.random.default_rng(seed ^ 0x5DEECE66D), specials=True) if specials else problem

    return shared(("trial", job.spec.model_dump_json(), seed, tuple(sorted((shape or {}).items())), specials), make)


class TrialInstance(NamedTuple):
    seed: int
    shape: dict[str, int] | None  # None: the spec's
    held_out: bool
    specials: bool  # values drawn again with NaN and Inf: every trial but the first two


def trial_list(job: RunJob) -> list[TrialInstance]:
    """Each correctness trial's instance, in order."""
    main = [(seed, None, False) for seed in job.seeds]
    trials = main + [(job.seeds[-1] + 1000 + i, shape, True) for i, shape in enumerate(job.held_out_shapes)]
    return [TrialInstance(seed, shape, held_out, i >= 2) for i, (seed, shape, held_out) in enumerate(trials)]


def available_host_bytes() -> int:
    """The host memory the kernel reports available (free and reclaimable), or the free pages where it does not."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def prefetch_workers(tasks: int, output_bytes: int, available: int) -> int:
    """Threads for `tasks` instances whose float64 outputs take `output_bytes` each (the main shape's: held-out
    shapes are smaller): one per core, fewer where every instance's kept arrays and the threads' peaks would not fit
    in `available` bytes (at 16384^3 an instance's output is 2 GB: sixteen at once would need about 160 GB)."""
    room = available - tasks * KEPT_COPIES * output_bytes
    by_memory = int(room // ((PEAK_COPIES - KEPT_COPIES) * output_bytes)) if output_bytes else tasks
    return max(1, min(tasks, os.cpu_count() or 1, by_memory))


def prefetch_host_work(job: RunJob, family: ProblemFamily) -> None:
    """The host work of a verification, made before the first launch and in threads (NumPy releases the interpreter
    lock in its array work): every trial's problem with its references and bounds, and the timing problem with its
    extra value sets. The stages then find it made (`shared`)."""
    from concurrent.futures import ThreadPoolExecutor

    def trial(t: TrialInstance) -> None:
        problem = _trial_problem(job, family, t.seed, t.shape, t.specials)
        _bounds(family, job.spec, problem, references(family, problem))

    def timing_set(k: int) -> None:
        problem = _timing_problem(job, family)
        fresh = _fresh_values(job, family, problem, k) if k else problem
        _bounds(family, job.spec, fresh, references(family, fresh), _terms(family, problem))

    tasks = [functools.partial(trial, t) for t in trial_list(job)]
    main = _timing_problem(job, family)
    _terms(family, main)  # before the value sets, which derive from them
    tasks += [functools.partial(timing_set, k) for k in range(VALUE_SETS)]
    output_bytes = sum(8 * int(np.prod(out.shape)) for out in main.outputs.values())
    with ThreadPoolExecutor(max_workers=prefetch_workers(len(tasks), output_bytes, available_host_bytes())) as pool:
        for done in [pool.submit(task) for task in tasks]:
            done.result()


def check_correctness(job: RunJob, family: ProblemFamily, module: Any, info: dict[str, Any]) -> tuple[list[Trial], Feedback]:
    """The main-shape trials (the second after the library ran on the same inputs) and the held-out ones; all but
    the first two carry IEEE special values."""
    import cupy as cp

    trials: list[Trial] = []
    outputs: dict[int, dict[str, CheckedOutput]] = {}
    # where the stage's seconds go, summed over the trials (the per-spec cost's largest stage)
    phases = dict.fromkeys(("instance", "bind", "library_first", "launch", "judge"), 0.0)
    mark = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[phase] += now - mark
        mark = now

    for i, (seed, shape, held_out, specials) in enumerate(trial_list(job)):
        problem = _trial_problem(job, family, seed, shape, specials)
        lap("instance")
        launcher = Launcher(job.candidate, module, problem, family, info, job.resources)
        lap("bind")
        order = "library_first" if i == 1 and not held_out else "candidate_first"
        if order == "library_first":
            _run_library_first(job, launcher, problem)
            lap("library_first")
        launcher.poison()
        launcher.run()
        cp.cuda.Device().synchronize()
        lap("launch")
        results, refs = launcher.results(), references(family, problem)
        unwritten = {name: launcher.unwritten(name) for name in results}
        checked = _judge(family, job.spec, problem, results, refs, unwritten)
        failed_output = next((name for name, c in checked.items() if not c.passed), None)
        unchanged = launcher.inputs_unchanged()
        worst = max(c.rel_error for c in checked.values())
        trials.append(Trial(seed=seed, shape=problem.symbols, held_out=held_out, order=order,
                            rel_error=worst if np.isfinite(worst) else None,
                            errors={n: c.rel_error if np.isfinite(c.rel_error) else None for n, c in checked.items()},
                            failed_output=failed_output, unwritten=sum(int(c.unwritten.sum()) for c in checked.values()),
                            non_finite=sum(c.non_finite for c in checked.values()), exceeded=sum(c.exceeded for c in checked.values()),
                            inputs_unchanged=unchanged, passed=failed_output is None and unchanged))
        outputs[i] = checked
        del launcher
        lap("judge")
    # element-wise when the family gave bounds for this problem (a multilinear family may judge some, e.g. with a
    # non-linear epilogue, norm-wise)
    elementwise = all(c.bounds is not None for c in outputs[0].values())
    evidence_common = {"held_out_shapes": job.held_out_shapes, "held_out_seed": job.held_out_seed,
                       "element_bounds": elementwise,
                       "phase_seconds": {phase: round(seconds, 2) for phase, seconds in phases.items()}}
    failed = next((t for t in trials if not t.passed), None)
    if failed is not None:
        kind, msg = classify_failure(trials, failed, outputs)
        name = failed.failed_output or next(iter(outputs[trials.index(failed)]))
        checked = outputs[trials.index(failed)][name]
        worst = checked.worst_index()
        index = [int(i) for i in np.unravel_index(worst, checked.out.shape)]
        return trials, Feedback(
            stage="correctness", status="failed", error_type=kind, message=msg,
            location=f"output {name}, shape {failed.shape}{' (held-out)' if failed.held_out else ''}, seed {failed.seed}, {failed.order}",
            evidence={"trials": len(trials), "failed": sum(not t.passed for t in trials), "tolerance": checked.tolerance,
                      "rel_error": failed.rel_error, "errors": failed.errors, "elements_outside_bounds": failed.exceeded,
                      "worst_element": {"output": name, "index": index, "got": float(checked.out.flat[worst]),
                                        "expected": float(checked.ref.flat[worst]),
                                        "bound": float(checked.bounds.bound.flat[worst]) if checked.bounds else None},
                      **evidence_common},
            suggestion={"held_out_failure": "handle shapes that are not multiples of the tile (bounds checks on the tail)",
                        "unwritten_output": "every output element must be written by exactly one thread, including tails",
                        "precision_loss": "accumulate in fp32, keep the inputs' precision in the products, keep subnormals "
                                          "(no flush to zero) and every term, however small",
                        "special_value_mismatch": "multiply and add every stored term as IEEE arithmetic does; skip no NaN or Inf",
                        "stale_result": "compute from the inputs on every call; keep no state between launches",
                        "input_mutation": "inputs are read-only; write only the outputs and the declared workspaces",
                        }.get(kind),
        )
    judged = ("each element within the error its own terms allow" if elementwise
              else f"within tolerance {', '.join(f'{n} {c.tolerance:.1g}' for n, c in outputs[0].items())}")
    return trials, Feedback(
        stage="correctness", status="passed",
        message=f"{len(trials)} trials ({len(job.held_out_shapes)} at held-out shapes, IEEE specials in "
                f"{max(len(trials) - 2, 0)}), {judged}"
                + (", both run orders" if len({t.order for t in trials}) == 2 else ", candidate first only"),
        evidence={"max_rel_error": max(t.rel_error or 0.0 for t in trials), "held_out_trials": len(job.held_out_shapes),
                  **evidence_common},
    )


def _bit_view(arr: Any) -> Any:
    """The array as unsigned integers of its width: compared bit for bit (a NaN equals itself)."""
    return arr.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.dtype.itemsize])


class ValueSet:
    """One set of values for the timing instance: pristine device copies of every input and prepared array, and
    each output's reference and bound on the device."""

    def __init__(self, family: ProblemFamily, spec: SpecBase, problem: Problem, host: dict[str, np.ndarray],
                 terms: dict[str, np.ndarray] | None) -> None:
        """`terms`: each output element's number of terms, the same for every set (one structure)."""
        import cupy as cp

        self.problem = problem
        self.refs = references(family, problem)
        bounds = _bounds(family, spec, problem, self.refs, terms)
        self.pristine = {name: cp.asarray(arr) for name, arr in host.items()}
        self.ref_dev = {name: cp.asarray(ref) for name, ref in self.refs.items()}
        self.bound_dev = {name: cp.asarray(b.bound) for name, b in bounds.items()} if bounds else None
        self.tolerances = tolerances(spec, problem)
        self.largest = {name: numerics(out.dtype).largest for name, out in problem.outputs.items()}

    def check(self, checker: RunChecker, run: int, outputs: dict[str, Any], working: dict[str, Any]) -> None:
        """Run `run`'s outputs against this set's references, and the working inputs against its pristine copies."""

        for name, out in outputs.items():
            dtype = self.problem.outputs[name].dtype
            if self.bound_dev is not None:
                checker.outside(run, out, dtype, self.ref_dev[name], self.bound_dev[name], self.largest[name])
            else:  # norm-wise
                checker.norm_outside(run, out, dtype, self.ref_dev[name], self.tolerances[name])
        for name, arr in self.pristine.items():
            checker.differ(run, working[name], arr)


def _value_sets(job: RunJob, family: ProblemFamily, problem: Problem, host: dict[str, np.ndarray]) -> list[ValueSet]:
    """The timing instance's own values (`host`: its inputs and prepared arrays) and up to VALUE_SETS - 1 more
    (same structure, every float value drawn anew from the timing seed, the preparation run again), as many as fit
    in half the free device memory."""
    import cupy as cp

    terms = _terms(family, problem)  # the sets differ in values only
    sets = [ValueSet(family, job.spec, problem, host, terms)]
    out_bytes = sum(16 * int(np.prod(o.shape)) for o in problem.outputs.values())
    per_set = sum(a.nbytes for a in host.values()) + out_bytes
    free = cp.cuda.runtime.memGetInfo()[0]
    for k in range(1, 1 + min(VALUE_SETS - 1, int(0.5 * free // max(per_set, 1)))):
        fresh = _fresh_values(job, family, problem, k)
        prepared, _ = prepare(job.candidate, family, fresh)
        fresh_host = {**fresh.inputs, **prepared}
        if any(fresh_host[n].shape != a.shape or fresh_host[n].dtype != a.dtype for n, a in host.items()):
            break  # a preparation whose layout depends on the values: only the first set can be copied in place
        sets.append(ValueSet(family, job.spec, fresh, fresh_host, terms))
    return sets


def save_sanitizer_instances(job: RunJob, family: ProblemFamily, problem: Problem) -> list[str]:
    """The sanitizer's instances, pickled for the sanitize mode (the main one when it is small enough)."""
    if not job.instances_path:
        return []
    instances = family.sanitizer_instances(job.spec, problem, job.seeds[0])
    if sum(a.nbytes for a in problem.inputs.values()) <= SANITIZE_MAIN_MAX_BYTES:
        instances["main"] = problem
    Path(job.instances_path).write_bytes(pickle.dumps(instances, protocol=pickle.HIGHEST_PROTOCOL))
    return list(instances)


class TimingFloor(NamedTuple):
    """The floor a timing must not beat, and what it is made of."""

    bytes_us: float  # the family's minimum bytes at the device's copy bandwidth
    peak: float  # FLOP/s for the family's arithmetic
    floor_us: float
    nbytes: float
    flops: float


def timing_floor(family: ProblemFamily, problem: Problem, info: dict[str, Any], copy_bw: float) -> TimingFloor:
    """No honest kernel moves its bytes faster than a copy or computes faster than the device's peak for the
    family's arithmetic; a timing below the floor is not trusted."""
    s = problem.symbols
    nbytes, flops = family.floor_bytes(s, problem.dtype), family.flops(s)
    bytes_us = nbytes / copy_bw * 1e6
    peak = peak_flops(info["cc"], info["sms"], info["clock_khz"], problem.input_dtypes.values()) * family.flop_rate_factor
    return TimingFloor(bytes_us, peak, max(bytes_us, flops / peak * 1e6), nbytes, flops)


def format_bytes(candidate: KernelCandidate, family: ProblemFamily, problem: Problem,
                 prepared: dict[str, np.ndarray], prepared_symbols: Mapping[str, int]) -> float | None:
    """The bytes of the candidate's format: the arrays it declares it streams, as this instance's preparation laid
    them out, and the family's dense operands. None where the kernel declares none or the family has no operands."""
    operands = family.operand_bytes(problem.symbols, problem.dtype)
    if not candidate.streams or operands is None:
        return None
    arrays, symbols = {**problem.inputs, **prepared}, {**problem.symbols, **prepared_symbols}
    total = operands
    for entry in candidate.streams:
        name, _, condition = (part.strip() for part in entry.partition(" if "))
        if name not in arrays:
            raise LaunchRejected("invalid_launch", f"streams names {name!r}, not an input or prepared array")
        if not condition or holds(condition, symbols):
            total += arrays[name].nbytes
    return total


def benchmark(job: RunJob, family: ProblemFamily, module: Any, info: dict[str, Any]) -> tuple[Feedback, Measurement | None, list[BaselineTiming]]:
    flush = L2Flusher()
    copy_bw = shared(("copy_bandwidth",), lambda: device_copy_bandwidth(flush))
    rng = np.random.default_rng(job.timing_seed)  # the order of the value sets
    problem = _timing_problem(job, family)
    preparation = timed_prepare(job.candidate, family, problem)
    prepared = preparation[0]
    # a number of runs the kernel cannot predict, every one of them checked
    runs = job.runs + job.timing_seed % (job.runs // 2 + 1)
    # the harness's own buffers first: the candidate's are the last allocations, so that a write past their end
    # lands in free memory (for the sanitizer to find), never in the copies the runs are checked against
    sets = _value_sets(job, family, problem, {**problem.inputs, **prepared})
    checker = RunChecker(job.warmup + runs)
    checker.prepare({out.dtype for out in problem.outputs.values()})
    launcher = Launcher(job.candidate, module, problem, family, info, job.resources, prepared=preparation)
    working = {name: launcher.arrays[name] for name in launcher.host}
    order: list[int] = []

    def before_each() -> None:
        # a set other than the last one, copied in place at the same addresses: nothing learnt from earlier calls holds
        choices = [k for k in range(len(sets)) if not order or k != order[-1]] or [0]
        order.append(int(rng.choice(choices)))
        for name, arr in sets[order[-1]].pristine.items():
            working[name][...] = arr
        launcher.poison()  # each run must compute every output again
        launcher.garble_workspaces()
        flush()

    def after_each() -> None:
        sets[order[-1]].check(checker, len(order) - 1, launcher.outputs, working)

    timing = time_call(launcher.run, before_each, after_each=after_each, warmup=job.warmup, runs=runs)
    wrong_runs, mutated_runs = checker.failing_runs()
    checked = {"runs_checked": len(order), "value_sets": len(sets)}
    if mutated_runs:
        return Feedback(stage="benchmark", status="failed", error_type="input_mutation",
                        message=f"inputs changed during {len(mutated_runs)} of {len(order)} runs (first: run {mutated_runs[0]})",
                        evidence={**checked, "runs_with_mutation": mutated_runs[:20]},
                        suggestion="inputs are read-only; write only the outputs and the declared workspaces"), None, []
    if wrong_runs:
        return Feedback(stage="benchmark", status="failed", error_type="inconsistent_output",
                        message=f"correct in the correctness trials, wrong in {len(wrong_runs)} of {len(order)} timed and "
                                f"warm-up runs (first: run {wrong_runs[0]}): the kernel does not compute the result on every call",
                        evidence={**checked, "wrong_runs": wrong_runs[:20]},
                        suggestion="compute from the inputs on every call; keep no state between launches"), None, []
    instance_names = save_sanitizer_instances(job, family, problem)

    timed_here = ("baselines", id(problem)) not in _SHARED  # else timed beside an earlier candidate of the batch
    baselines, baseline_seconds = shared(("baselines", id(problem)),
                                         lambda: _time_baselines(job, problem, sets[0], flush))
    floor = timing_floor(family, problem, info, copy_bw)
    peak, floor_us = floor.peak, floor.floor_us
    own_bytes = format_bytes(job.candidate, family, problem, prepared, preparation[1])
    format_floor_us = own_bytes / copy_bw * 1e6 if own_bytes is not None else None
    best, per_library = reference_baselines(baselines)
    measurement = Measurement(
        median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us, runs=timing.runs,
        preparation_ms=launcher.preparation_ms, floor_us=floor_us,
        achieved_gbps=floor.nbytes / timing.median_us * 1e-3, achieved_gflops=floor.flops / timing.median_us * 1e-3,
        peak_gflops=peak * 1e-9,
        bandwidth_fraction=floor.bytes_us / timing.median_us, copy_bandwidth_gbps=copy_bw * 1e-9,
        best_baseline=best.name if best else None, best_baseline_us=best.median_us if best else None,
        speedup_vs_best=best.median_us / timing.median_us if best else None,
        speedups={lib: b.median_us / timing.median_us for lib, b in per_library.items()},
        format_floor_us=format_floor_us,
        format_fraction=format_floor_us / timing.median_us if format_floor_us is not None else None,
    )
    suspect = timing.median_us < 0.9 * floor_us
    fb = Feedback(
        stage="benchmark", status="failed" if suspect else "passed",
        error_type="suspect_timing" if suspect else None,
        message=(f"{timing.median_us:.1f} us is below the physical floor {floor_us:.1f} us (bytes and FLOPs at the "
                 "device's peak): the timing cannot be trusted" if suspect
                 else f"{timing.median_us:.1f} us, {measurement.bandwidth_fraction:.0%} of the bandwidth floor; "
                      f"{len(order)} runs on {len(sets)} value sets changed in place, every output and input checked"),
        evidence={"median_us": timing.median_us, "floor_us": floor_us, "peak_tflops": peak * 1e-12,
                  "best_baseline_us": measurement.best_baseline_us, **checked, "sanitizer_instances": instance_names,
                  "tool_class": family.tool_class(problem),
                  "baseline_seconds": round(baseline_seconds, 2) if timed_here else 0.0,
                  "baselines_timed": _how_timed(baselines, timed_here)},
    )
    return fb, measurement, baselines


def reference_baselines(baselines: list[BaselineTiming]) -> tuple[BaselineTiming | None, dict[str, BaselineTiming]]:
    """The fastest correct baseline timed in this run, beside the candidate on its inputs (the speedup's reference),
    and each library's fastest correct one: a library timed only by an earlier verification of the spec with its
    carried time."""
    here = [b for b in baselines if not b.carried]
    correct = [b for b in here if b.correct]
    best = min(correct, key=lambda b: b.median_us) if correct else None
    return best, {**fastest_per_library([b for b in baselines if b.carried]), **fastest_per_library(here)}


def _how_timed(baselines: list[BaselineTiming], timed_here: bool) -> str:
    where = "in this run" if timed_here else "beside an earlier candidate of the batch, same instance"
    carried = sum(b.carried for b in baselines)
    return f"the fastest {where}, {carried} others carried from an earlier verification of this spec" if carried else where


def _time_baselines(job: RunJob, problem: Problem, first_set: ValueSet, flush: L2Flusher) -> tuple[list[BaselineTiming], float]:
    """Every baseline configuration on its own copies of the first value set (the inputs only: no preparation of the
    candidate's); a baseline computes the family's first output. After an earlier verification of the spec
    (`job.earlier_baselines`), only its fastest correct configuration is timed, and the others are carried. Also
    the seconds this took."""
    import cupy as cp

    first = next(iter(problem.outputs))
    tolerance = first_set.tolerances[first]
    start = time.perf_counter()
    pristine = {name: first_set.pristine[name].copy() for name in problem.inputs}
    earlier = [b for b in job.earlier_baselines if b.correct]
    fastest = min(earlier, key=lambda b: b.median_us) if earlier else None

    def timed(calls: list) -> list[BaselineTiming]:
        out = []
        for call in calls:
            cp.cuda.Device().synchronize()  # each call has run once while being prepared: its output is the answer
            timing_start = time.perf_counter()
            b_err = rel_error(to_float64(call.output.get(), problem.outputs[first].dtype), first_set.refs[first])
            t = time_call(call.run, flush, warmup=job.warmup, runs=job.runs)
            out.append(BaselineTiming(name=call.name, library=call.library, config=call.config, median_us=t.median_us,
                                      rel_error=b_err, correct=b_err <= max(tolerance, 1e-2),
                                      seconds=round(call.build_seconds + time.perf_counter() - timing_start, 3)))
        return out

    if fastest:
        again = timed(_first_working_call(job, pristine, problem, [fastest.library], fastest.name))
        if any(b.correct for b in again):
            carried = [b.model_copy(update={"carried": True}) for b in job.earlier_baselines if b.name != fastest.name]
            return again + carried, time.perf_counter() - start
    # the first verification of the spec, or its fastest no longer builds or is wrong here: all of them again
    return timed(_baseline_calls(job, pristine, problem)), time.perf_counter() - start


def _load(job: RunJob) -> tuple[ProblemFamily, dict[str, Any], Any]:
    import cupy as cp

    return get_family(job.spec.family), device_info(), cp.RawModule(path=job.cubin_path)


def run_job(job: RunJob) -> RunResult:
    """Correctness, then the benchmark; each stage's wall seconds in its evidence (where a verification's time goes)."""
    start = time.perf_counter()
    family, info, module = _load(job)
    try:
        loaded = time.perf_counter()
        prefetch_host_work(job, family)
        prefetched = time.perf_counter()
        trials, correctness = check_correctness(job, family, module, info)
        correctness.evidence.update(seconds=round(time.perf_counter() - prefetched, 2), setup_seconds=round(loaded - start, 2),
                                    host_seconds=round(prefetched - loaded, 2))
        if correctness.status != "passed":
            return RunResult(device=info, feedback=[correctness], trials=trials)
        checked = time.perf_counter()
        bench, measurement, baselines = benchmark(job, family, module, info)
        bench.evidence["seconds"] = round(time.perf_counter() - checked, 2)
    except LaunchRejected as exc:
        return RunResult(device=info, feedback=[rejection(exc)], trials=[])
    return RunResult(device=info, feedback=[correctness, bench], trials=trials, measurement=measurement, baselines=baselines)


def sanitize_job(job: RunJob) -> RunResult:
    """The saved instances named in the job, one after another; plain allocations, nothing initialised that the
    candidate should write (outputs and workspaces)."""
    import cupy as cp

    cp.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the checker knows its true size
    family, info, module = _load(job)
    instances: dict[str, Problem] = pickle.loads(Path(job.instances_path).read_bytes()) if job.instances_path else {}
    for name in job.sanitize_instances:
        try:
            launcher = Launcher(job.candidate, module, instances[name], family, info, job.resources, initialise=False)
        except LaunchRejected as exc:
            return RunResult(device=info, feedback=[rejection(exc)], trials=[])
        launcher.run()
        cp.cuda.Device().synchronize()
        del launcher
    return RunResult(device=info, feedback=[], trials=[])


def profile_job(job: RunJob) -> RunResult:
    """One launch sequence of the candidate, then one call of the named baseline if any, inside the profiled range,
    on the timing instance (the one the verify run saved when it did, else made again from its seed)."""
    import cupy as cp

    family, info, module = _load(job)
    saved = pickle.loads(Path(job.instances_path).read_bytes()) if job.instances_path and Path(job.instances_path).exists() else {}
    problem = saved.get("main") or family.make_problem(job.spec, job.timing_seed)
    try:
        launcher = Launcher(job.candidate, module, problem, family, info, job.resources)
    except LaunchRejected as exc:
        return RunResult(device=info, feedback=[rejection(exc)], trials=[])
    runs = [launcher.run]
    if job.profile_baseline:
        runs.append({c.name: c for c in _baseline_calls(job, launcher.arrays, problem)}[job.profile_baseline].run)
    for run in runs:  # warm: module load and first-call setup stay outside the profiled range
        run()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    for run in runs:
        run()
        cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    return RunResult(device=info, feedback=[], trials=[])


MODES = {"verify": run_job, "sanitize": sanitize_job, "profile": profile_job}


def startup_seconds() -> float | None:
    """Seconds from the parent's launch of this process to now (interpreter start and imports), when it said when."""
    launched = os.environ.get(LAUNCHED_AT_ENV)
    return round(time.monotonic() - float(launched), 2) if launched else None


def note_seconds(result: RunResult, **seconds: float | None) -> RunResult:
    """Seconds spent outside the stages (the process's start, scrubs, its whole wall time), in the first stage's
    evidence; None values are left out."""
    if result.feedback:
        result.feedback[0].evidence.update({k: v for k, v in seconds.items() if v is not None})
    return result


def run_batch(batch: BatchJob, out_dir: Path) -> None:
    """Each job in order, its result written before the next starts; the device's free memory scrubbed between."""
    started = startup_seconds()
    for i, job in enumerate(batch.jobs):
        scrubbed = None
        if i:
            begin = time.perf_counter()
            scrub_free_device_memory()
            scrubbed = round(time.perf_counter() - begin, 2)
        result = note_seconds(run_job(job), startup_seconds=started if i == 0 else None, scrub_seconds=scrubbed)
        (out_dir / f"result-{i}.json").write_text(result.model_dump_json())


def scrub_free_device_memory() -> None:
    """Overwrites (0xFF) the device memory that nothing holds: the candidates of a batch compute the same products of
    the same inputs, so the outputs an earlier one left in memory it freed would be right answers for a later one that
    reads memory it did not allocate."""
    import gc

    import cupy as cp

    gc.collect()  # the earlier candidate's buffers and the baselines' (their owners may sit in reference cycles)
    if "torch" in sys.modules:  # torch's caching allocator keeps the blocks its baselines freed
        sys.modules["torch"].cuda.empty_cache()
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    held, size = [], 1 << 30
    while size >= 1 << 20:  # blocks of 1 GiB while they fit, then smaller ones into what is left
        try:
            held.append(cp.empty(size, dtype=np.uint8))
            held[-1].fill(0xFF)
        except cp.cuda.memory.OutOfMemoryError:
            size //= 4
    cp.cuda.Device().synchronize()
    del held
    pool.free_all_blocks()


def main(argv: list[str]) -> int:
    if argv[0] == "--batch":
        run_batch(BatchJob.model_validate_json(Path(argv[1]).read_text()), Path(argv[2]))
        return 0
    started = startup_seconds()
    job = RunJob.model_validate_json(Path(argv[0]).read_text())
    result = MODES[job.mode](job)
    if job.mode == "verify":
        result = note_seconds(result, startup_seconds=started)
    Path(argv[1]).write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The tool node's seam: one Verifier interface, a GPU backend and a compile-only backend.

Both check the source statically, compile with NVRTC and report ptxas resources and the SASS mix. The
GPU backend then runs the candidate's stages in separate processes with timeouts
(`sparseditto.tools.gpu_stages`); the compile-only backend reports every GPU stage as not executed —
never as passed.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import structlog
from pydantic import BaseModel

import numpy as np

from sparseditto.spec import Spec
from sparseditto.tools.ahead import AHEAD, RunAhead, candidate_key, discard, measured_correct
from sparseditto.tools.compiler import CompileResult, KernelResources, compile_source
from sparseditto.tools.contract import KernelCandidate, arg_name, runner_symbols
from sparseditto.tools.dtypes import DTYPES
from sparseditto.tools.families import Problem, get_family
from sparseditto.tools.gpu_stages import profile_stage, run_batch_child, run_child, sanitizer_stage
from sparseditto.tools.launch_check import DeviceLimits, LaunchRejected, check_sizes, plan_launch
from sparseditto.tools.profiler import find_ncu
from sparseditto.tools.results import NOT_EXECUTED_NO_GPU, BaselineTiming, Feedback, VerificationReport
from sparseditto.tools.runner import RunJob, RunResult, array_infos, prepare, rejection
from sparseditto.tools.sanitizer import TOOLS, find_sanitizer
from sparseditto.tools.sass import SassCounts, analyse_cubin
from sparseditto.tools.source_check import check_compiled, check_source

log = structlog.get_logger(__name__)


class Verifier(Protocol):
    backend: str

    def verify(self, candidate: KernelCandidate, spec: Spec, best_us: float | None = None,
               already_checked: str | None = None, ahead: Sequence[KernelCandidate] = ()) -> VerificationReport:
        """`best_us`: the fastest correct time so far in this run; slower candidates skip the costly stages.
        `already_checked`: why the sanitizer and profiler need not run again (a stored kernel being re-validated).
        `ahead`: candidates this run will likely verify next; a backend may run them now beside this one."""
        ...


def compile_candidate(candidate: KernelCandidate, spec: Spec, arch: str) -> tuple[CompileResult, Feedback]:
    """Always with -lineinfo (line tables only, the code is the same): the binary that is timed is the one the
    sanitizer checks, and its findings name source lines."""
    options = dict.fromkeys([*candidate.defines(DTYPES[spec.dtype].code), *candidate.compile_options, "-lineinfo"])
    arch = candidate.compile_arch(arch)
    result = compile_source(candidate.source, arch, list(options))
    if not result.ok:
        first_error = next((ln for ln in result.log.splitlines() if "error" in ln), result.log[:200])
        where = re.search(r"\((\d+)\): error", first_error)
        return result, Feedback(stage="compile", status="failed", error_type="compile_error", message=first_error,
                                location=f"line {where.group(1)}" if where else None, evidence={"log": result.log[-2000:]})
    spills = {k: r.spill_stores for k, r in result.resources.items() if r.spill_stores}
    return result, Feedback(
        stage="compile", status="passed", message=f"compiled for {arch} in {result.seconds:.2f} s",
        evidence={"resources": {k: r.model_dump() for k, r in result.resources.items()}},
        suggestion=f"registers spill in {sorted(spills)}: lower the per-thread work" if spills else None,
    )


def tiny_problem(spec: Spec) -> Problem:
    """The family's tiny instance: what launch checks and contract descriptions are made on."""
    family = get_family(spec.family)
    return family.make_problem(spec, seed=0, shape=family.tiny_shape(spec))


# the multiprocessor count launch checks assume without a device (an H100/H200's); the runner uses the device's
_CHECK_SMS = 132


def check_geometry(candidate: KernelCandidate, spec: Spec, arch: str,
                   resources: dict[str, KernelResources] | None = None) -> Feedback | None:
    """Every launch resource checked before anything runs (tools/launch_check.py): on the tiny instance, its
    preparation included, and, for a candidate without a preparation, the sizes at the spec's main shape.
    The runner checks every instance again before its first launch."""
    family = get_family(spec.family)
    limits = DeviceLimits.for_arch(arch)
    tiny = tiny_problem(spec)
    try:
        prepared, extra = prepare(candidate, family, tiny)
        symbols = {**tiny.symbols, **extra, **runner_symbols(spec.dtype, _CHECK_SMS)}
        plan_launch(candidate, symbols, tiny.scalars, array_infos(tiny, prepared), spec.dtype, limits, resources)
        if not candidate.preparation:
            check_sizes(candidate, {**family.symbols(spec), **runner_symbols(spec.dtype, _CHECK_SMS)}, spec.dtype,
                        limits, resources)
    except LaunchRejected as exc:
        return rejection(exc)
    return None


def static_analysis(result: CompileResult) -> tuple[Feedback, dict[str, SassCounts]]:
    """What the machine code says without running it: tensor cores, load widths, local memory."""
    sass = analyse_cubin(result.cubin or b"")
    if isinstance(sass, str):
        return Feedback(stage="static", status="not_executed", message=f"SASS analysis {sass}"), {}
    notes, hints = [], []
    for entry, c in sass.items():
        notes.append(f"{entry}: {c.instructions} instructions, tensor-core {c.tensor_core}, "
                     f"128-bit loads {c.global_loads_128}/{c.global_loads}, local memory {c.local_loads + c.local_stores}")
        if c.local_loads + c.local_stores:
            hints.append(f"{entry} uses local memory (spills or a stack array): keep per-thread arrays small and indexed by constants")
        if c.global_loads and not c.global_loads_128:
            hints.append(f"{entry} has no 128-bit global loads: vectorize contiguous loads")
    return Feedback(stage="static", status="passed", message="; ".join(notes),
                    evidence={"sass": {k: v.model_dump() for k, v in sass.items()}},
                    suggestion="; ".join(hints) or None), sass


def early_launch_params(candidate: KernelCandidate, spec: Spec, arch: str) -> dict[str, set[int]]:
    """The entries launched early on `arch` (none before sm_90, where an early launch is an ordinary one), each
    with the indices of its parameters that point to what a launch may write: the problem's outputs and the
    workspaces (the PTX check refuses loads through them before the entry's wait)."""
    early = candidate.early_entries()
    if not early or not DeviceLimits.for_arch(arch).has_clusters:
        return {}
    writable = set(candidate.workspace) | set(tiny_problem(spec).outputs)
    guarded: dict[str, set[int]] = {entry: set() for entry in early}
    for k in candidate.kernels:  # an entry launched more than once: every launch's arguments count
        if k.entry in early:
            guarded[k.entry] |= {i for i, a in enumerate(k.args) if arg_name(a) in writable}
    return guarded


def check_and_compile(candidate: KernelCandidate, spec: Spec, arch: str) -> tuple[CompileResult | None, list[Feedback], dict[str, SassCounts]]:
    """Static source check, compile, the contract on the compiled code (PTX and SASS), SASS mix and launch
    geometry: everything that needs no GPU."""
    refused = check_source(candidate.source)
    if refused:
        return None, refused, {}
    result, fb = compile_candidate(candidate, spec, arch)
    if not result.ok:
        return result, [fb], {}
    compiled_check = check_compiled(result, early=early_launch_params(candidate, spec, arch))
    if isinstance(compiled_check, list) and compiled_check:
        return result, [fb, *compiled_check], {}
    static, sass = static_analysis(result)
    if isinstance(compiled_check, str):  # a layer of the check could not run: say so, never call it passed
        static = static.model_copy(update={"message": f"{static.message}; compiled-code check not executed: {compiled_check}"})
    feedback = [fb, static]
    if bad := check_geometry(candidate, spec, arch, result.resources):
        feedback.append(bad)
    return result, feedback, sass


def _report(candidate: KernelCandidate, backend: str, result: CompileResult | None, feedback: list[Feedback],
            sass: dict[str, SassCounts], **extra: Any) -> VerificationReport:
    return VerificationReport(candidate=candidate.label(), backend=backend, compiled=bool(result and result.ok),
                              resources=result.resources if result else {}, sass=sass, feedback=feedback, **extra)


class CompileOnlyVerifier:
    """No CUDA device: check, compile, analyse statically, and say plainly what was not run."""

    backend = "compile_only"

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch

    def verify(self, candidate: KernelCandidate, spec: Spec, best_us: float | None = None,
               already_checked: str | None = None, ahead: Sequence[KernelCandidate] = ()) -> VerificationReport:
        result, feedback, sass = check_and_compile(candidate, spec, spec.arch or self.arch)
        if not any(f.status in {"failed", "error"} for f in feedback):
            feedback += [Feedback(stage=s, status="not_executed", message=NOT_EXECUTED_NO_GPU)
                         for s in ("correctness", "sanitizer", "benchmark", "profile")]
        return _report(candidate, self.backend, result, feedback, sass)


class ToolsRecord(Protocol):
    """Where a compiled kernel (cubin digest) passed compute-sanitizer and Nsight Compute on a problem of a family's
    shape class on a GPU of a name: the same code on the same class of problem need not go through them again."""

    def tools_note(self, cubin_sha256: str, tool_class: str, gpu_name: str) -> str | None: ...

    def record_tools(self, cubin_sha256: str, tool_class: str, gpu_name: str, note: str) -> None: ...


class ProcessToolsRecord:
    """The record of this process only (an evaluation's worker verifies many specs of one class); the pipeline
    gives the verifier the experience store instead, which keeps it across runs and sessions."""

    def __init__(self) -> None:
        self.notes: dict[tuple[str, str, str], str] = {}

    def tools_note(self, cubin_sha256: str, tool_class: str, gpu_name: str) -> str | None:
        return self.notes.get((cubin_sha256, tool_class, gpu_name))

    def record_tools(self, cubin_sha256: str, tool_class: str, gpu_name: str, note: str) -> None:
        self.notes.setdefault((cubin_sha256, tool_class, gpu_name), note)


_PROCESS_TOOLS = ProcessToolsRecord()


class InputDraw(BaseModel):
    """One verification's fresh inputs: the trials' seeds, the held-out shapes and the timing seed (shared by every
    candidate of a batch)."""

    seeds: list[int]
    held_out_seed: int
    held_out_shapes: list[dict[str, int]]
    timing_seed: int

    @classmethod
    def fresh(cls, spec: Spec, trials: int) -> "InputDraw":
        held_out_seed = secrets.randbits(63)  # drawn per verification, recorded in the report
        return cls(seeds=[secrets.randbelow(2**31) for _ in range(trials)], held_out_seed=held_out_seed,
                   held_out_shapes=get_family(spec.family).held_out_shapes(spec, np.random.default_rng(held_out_seed)),
                   timing_seed=secrets.randbelow(2**31))


def needless_tools(candidate: KernelCandidate, result: CompileResult, sass: dict[str, SassCounts]) -> dict[str, str]:
    """The sanitizer tools that cannot find anything in this compiled code, and why: racecheck looks for hazards in
    shared memory, which a kernel without any cannot have; synccheck for misused block barriers and warp-level
    synchronisation (shuffles and votes included), which a kernel without any cannot misuse. Judged from the
    machine code of every entry point, so the SASS must have been read."""
    if not sass or not {k.entry for k in candidate.kernels} <= set(sass):
        return {}
    out = {}
    static_shared = any(r.shared_bytes for r in result.resources.values())
    dynamic_shared = any(str(k.shared_bytes) != "0" for k in candidate.kernels)
    if not (static_shared or dynamic_shared or candidate.tensor_maps
            or any(c.shared_loads or c.shared_stores or c.async_copies for c in sass.values())):
        out["racecheck"] = "no shared memory in any entry point"
    if not any(c.barriers or c.shuffles or c.warp_syncs for c in sass.values()):
        out["synccheck"] = "no barrier, shuffle or warp-level synchronisation in the machine code"
    return out


class SpecBaselines:
    """Every baseline configuration as the first verification of the spec at hand timed them, for the later ones
    to carry (RunJob.earlier_baselines). Held by the process, not by a verifier: the pipeline makes a verifier per
    tool call. One spec at a time: an evaluation moves from spec to spec."""

    def __init__(self) -> None:
        self._key: tuple[str, str] | None = None
        self._baselines: list[BaselineTiming] = []

    def get(self, key: tuple[str, str]) -> list[BaselineTiming]:
        """(arch, spec JSON) -> the timings kept for it, or [] (another spec, or none yet)."""
        return list(self._baselines) if key == self._key else []

    def keep(self, key: tuple[str, str], baselines: list[BaselineTiming]) -> None:
        """The first set of timings of a spec (all timed: nothing is carried before it); a later one of the same
        spec changes nothing."""
        if key != self._key:
            self._key, self._baselines = key, list(baselines)


SPEC_BASELINES = SpecBaselines()


class GpuVerifier:
    """Compile here, run in child processes with timeouts: a crash or hang never reaches the pipeline.

    Stages: static check and compile -> correctness and benchmark (one child) -> compute-sanitizer on the
    instances that child saved (tails, the longest rows, the main instance; one child per tool) -> Nsight Compute on
    the main shape (candidate, and the best baseline once per spec when `profile_baseline`, for the LLM reviewer).
    Each later stage runs only when the earlier ones passed, and the sanitizer and profiler only for a candidate
    faster than the run's best so far: only such a candidate can be accepted, so every accepted kernel has passed them.
    """

    backend = "gpu"

    def __init__(self, arch: str, trials: int = 3, timeout_s: float = 300.0, runs: int = 30,
                 sanitize: bool = True, profile: bool = True, tool_timeout_s: float = 300.0,
                 tools_record: ToolsRecord | None = None, profile_baseline: bool = True) -> None:
        """`tools_record`: where the sanitizer's and the profiler's passes are kept (this process's, by default).
        `profile_baseline`: profile the best baseline beside the candidate for the evidence's "baseline"; only the LLM
        reviewer reads it, and it makes the profile stage about three times as long (11.5 s against 4 s on the H200)."""
        self.arch = arch
        self.trials = trials
        self.timeout_s = timeout_s
        self.runs = runs
        self.sanitize = sanitize
        self.profile = profile
        self.tool_timeout_s = tool_timeout_s
        self.tools_record = tools_record or _PROCESS_TOOLS
        self.profile_baseline = profile_baseline

    def verify(self, candidate: KernelCandidate, spec: Spec, best_us: float | None = None,
               already_checked: str | None = None, ahead: Sequence[KernelCandidate] = ()) -> VerificationReport:
        """`ahead`: run in the same runner process, after this candidate and on its fresh inputs, each that compiles
        and passes the static checks; their results wait for their own verification (the sanitizer and the profiler
        then run as for any candidate). What depends on the inputs only is made once, not per candidate."""
        arch = spec.arch or self.arch
        spec_key = spec.model_dump_json()
        AHEAD.forget_other_specs(spec_key)
        taken = AHEAD.take((candidate_key(candidate, arch), spec_key))
        # a candidate run ahead was checked and compiled then: its outputs are taken with its result
        result, feedback, sass = taken.compiled if taken else check_and_compile(candidate, spec, arch)
        feedback = list(feedback)
        if result is None or any(f.status in {"failed", "error"} for f in feedback):
            return _report(candidate, self.backend, result, feedback, sass)
        digest = hashlib.sha256(result.cubin or b"").hexdigest()
        with tempfile.TemporaryDirectory(prefix="sparseditto-") as tmp:
            faster_ahead = None
            if taken is not None:
                job, run = taken.job, taken.run
                note = {"run_ahead": "in the runner process of an earlier candidate of this run, on the inputs drawn for it"}
                run.feedback[0].evidence.update(note)
            else:
                draw = InputDraw.fresh(spec, self.trials)
                job = self._job(candidate, spec, result, Path(tmp), draw)
                others = self._ahead_jobs(ahead, spec, arch, draw, {digest})
                if others:
                    runs = run_batch_child([job, *(j for _, _, j in others)], Path(tmp), self.timeout_s)
                    for (key, compiled, other), other_run in zip(others, runs[1:]):
                        if isinstance(other_run, RunResult):
                            AHEAD.put((key, spec_key), RunAhead(compiled, other, other_run))
                    faster_ahead = min((r.measurement.median_us for r in runs[1:] if measured_correct(r)), default=None)
                    run = runs[0]
                else:
                    run = run_child(job, Path(tmp), self.timeout_s)
            if isinstance(run, Feedback):
                return _report(candidate, self.backend, result, [*feedback, run], sass)
            if run.baselines:
                SPEC_BASELINES.keep((arch, spec_key), run.baselines)
            try:
                return self._after_run(candidate, spec, result, feedback, sass, job, run, Path(tmp), digest, best_us,
                                       already_checked, faster_ahead)
            finally:
                if taken is not None:
                    discard(job)

    def _after_run(self, candidate: KernelCandidate, spec: Spec, result: CompileResult, feedback: list[Feedback],
                   sass: dict[str, SassCounts], job: RunJob, run: RunResult, tmp: Path, digest: str,
                   best_us: float | None, already_checked: str | None, faster_ahead: float | None = None) -> VerificationReport:
        """The runner's result into the report; then, for a candidate that may be accepted, the sanitizer and the
        profiler. `faster_ahead`: the fastest correct time among the contenders run beside it: a slower candidate
        leaves both tools for later (evidence "deferred"), and the review never accepts it as it stands."""
        feedback += run.feedback
        extra: dict[str, Any] = {"device": run.device, "trials": run.trials, "measurement": run.measurement,
                                 "baselines": run.baselines}
        if any(f.status in {"failed", "error"} for f in run.feedback):
            return _report(candidate, self.backend, result, feedback, sass, **extra)
        bench = next(f for f in run.feedback if f.stage == "benchmark")
        tool_class = bench.evidence.get("tool_class")
        gpu = str(run.device.get("name", "unknown GPU"))
        passed_before = self.tools_record.tools_note(digest, tool_class, gpu) if tool_class else None
        skipped, deferred = None, False
        if already_checked:
            skipped = f"not executed: {already_checked}"
        elif passed_before:
            skipped = f"not executed: {passed_before}"
        elif best_us is not None and run.measurement and run.measurement.median_us >= best_us:
            skipped = f"not executed: {run.measurement.median_us:.1f} us is not faster than the best so far ({best_us:.1f} us)"
        elif faster_ahead is not None and run.measurement and run.measurement.median_us > faster_ahead:
            skipped = (f"not executed: deferred: {run.measurement.median_us:.1f} us is slower than a contender run "
                       f"beside it ({faster_ahead:.1f} us); it would have to be verified again to be accepted")
            deferred = True
        if skipped:
            feedback += [Feedback(stage=s, status="not_executed", message=skipped, evidence={"deferred": True} if deferred else {})
                         for s in ("sanitizer", "profile")]
            return _report(candidate, self.backend, result, feedback, sass, **extra)
        feedback.append(self._sanitize(job, tmp, bench.evidence.get("sanitizer_instances", []),
                                       needless_tools(candidate, result, sass)))
        if feedback[-1].status == "passed":
            feedback.append(self._profile(job, run, tmp))
            if tool_class and feedback[-1].status == "passed":
                self.tools_record.record_tools(digest, tool_class, gpu, f"the same compiled kernel passed compute-sanitizer "
                                               f"and Nsight Compute on {spec.name} ({tool_class}, {gpu})")
        return _report(candidate, self.backend, result, feedback, sass, **extra)

    def _job(self, candidate: KernelCandidate, spec: Spec, result: CompileResult, folder: Path, draw: InputDraw) -> RunJob:
        """The verify-mode job, its cubin and sanitizer instances in `folder`."""
        name = f"candidate-{secrets.token_hex(4)}"
        cubin = folder / f"{name}.cubin"
        cubin.write_bytes(result.cubin or b"")
        return RunJob(candidate=candidate, spec=spec, cubin_path=str(cubin), resources=result.resources,
                      seeds=draw.seeds, held_out_shapes=draw.held_out_shapes, held_out_seed=draw.held_out_seed,
                      timing_seed=draw.timing_seed, runs=self.runs, instances_path=str(folder / f"{name}-instances.pkl"),
                      earlier_baselines=SPEC_BASELINES.get((spec.arch or self.arch, spec.model_dump_json())))

    def _ahead_jobs(self, ahead: Sequence[KernelCandidate], spec: Spec, arch: str, draw: InputDraw,
                    seen: set[str]) -> list[tuple[str, tuple[Any, ...], RunJob]]:
        """Jobs for the candidates to run ahead that compile, pass the static checks and are neither this candidate
        (`seen`: cubin digests) nor already run ahead, each with its key and what check_and_compile gave."""
        spec_key = spec.model_dump_json()
        jobs = []
        for other in ahead:
            key = candidate_key(other, arch)
            if (key, spec_key) in AHEAD:
                continue
            compiled = check_and_compile(other, spec, arch)
            result, feedback, _ = compiled
            if result is None or any(f.status in {"failed", "error"} for f in feedback):
                continue
            digest = hashlib.sha256(result.cubin or b"").hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            jobs.append((key, compiled, self._job(other, spec, result, AHEAD.folder(), draw)))
        return jobs

    def _sanitize(self, job: RunJob, tmp: Path, instances: list[str], not_needed: dict[str, str]) -> Feedback:
        if not self.sanitize:
            return Feedback(stage="sanitizer", status="not_executed", message="not executed: switched off (SPARSEDITTO_SANITIZE=0)")
        if find_sanitizer() is None:
            return Feedback(stage="sanitizer", status="not_executed", message="not executed: compute-sanitizer not found")
        tools = tuple(t for t in TOOLS if t not in not_needed)
        return sanitizer_stage(job.model_copy(update={"mode": "sanitize"}), tmp, self.tool_timeout_s, instances, tools,
                               not_needed)

    def _profile(self, job: RunJob, run: RunResult, tmp: Path) -> Feedback:
        if not self.profile:
            return Feedback(stage="profile", status="not_executed", message="not executed: switched off (SPARSEDITTO_PROFILE=0)")
        if find_ncu() is None:
            return Feedback(stage="profile", status="not_executed", message="not executed: ncu not found")
        copy_bw = run.measurement.copy_bandwidth_gbps if run.measurement else None
        best = run.measurement.best_baseline if run.measurement else None
        return profile_stage(job.model_copy(update={"mode": "profile"}), tmp, self.tool_timeout_s, copy_bw,
                             best if self.profile_baseline else None)


def make_verifier(arch: str | None = None, force_compile_only: bool = False,
                  tools_record: ToolsRecord | None = None, profile_baseline: bool = True) -> Verifier:
    """The GPU backend when a CUDA device is usable, else compile-only. `tools_record`, `profile_baseline`: see
    GpuVerifier."""
    from sparseditto.settings import Settings
    from sparseditto.tools.device import detect

    facts = detect()
    if facts.gpu and not force_compile_only:
        settings = Settings()
        return GpuVerifier(arch=arch or facts.gpu["arch"], sanitize=settings.sanitize, profile=settings.profile,
                           tools_record=tools_record, profile_baseline=profile_baseline)
    return CompileOnlyVerifier(arch=arch or "sm_90")

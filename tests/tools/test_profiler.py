"""Nsight Compute CSV parsed and summarised, on output recorded on the H200 (tests/fixtures/ncu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.tools.profiler import METRICS, KernelProfile, find_ncu, ncu_command, parse_ncu_csv, summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


def test_the_curated_set_is_small_and_asked_for_with_clocks_left_alone():
    assert len(METRICS) <= 24
    cmd = ncu_command(["python", "job"], ["spmm_test"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert "--profile-from-start" in cmd and cmd[-2:] == ["python", "job"]
    assert "regex:^(spmm_test)$" in cmd


def test_candidate_csv_has_every_metric():
    (profile,) = parse_ncu_csv((FIXTURES / "ncu_naive.csv").read_text())
    assert profile.kernel == "spmm_test"
    assert set(profile.metrics) == set(METRICS.values())
    assert profile.metrics["duration_ns"] > 0 and profile.metrics["registers_per_thread"] > 0


def test_a_library_call_is_profiled_kernel_by_kernel():
    profiles = parse_ncu_csv((FIXTURES / "ncu_baseline_cusparse_spmm_csr_alg3_row.csv").read_text())
    assert profiles and all("csrmm" in p.kernel or p.kernel for p in profiles)


def test_summary_gives_the_reviewer_a_few_metrics_not_the_dump():
    summary = summarize(parse_ncu_csv((FIXTURES / "ncu_naive.csv").read_text()), copy_bandwidth_gbps=4250.0)
    assert summary.bottleneck in ("memory", "compute", "latency")
    assert 3 <= len(summary.key_metrics) <= 4
    assert summary.reason and summary.advice


def profile(**metrics: float) -> list[KernelProfile]:
    return [KernelProfile(kernel="k", metrics={"duration_ns": 1000.0, **metrics})]


def test_classification_against_the_measured_ceilings():
    streaming = summarize(profile(dram_bytes=3.6e6, memory_throughput_pct=85, sm_throughput_pct=20), 4000.0)
    assert streaming.bottleneck == "memory"
    busy = summarize(profile(dram_bytes=1e3, memory_throughput_pct=20, sm_throughput_pct=90, stall_math_pipe_throttle=3.0), 4000.0)
    assert busy.bottleneck == "compute"
    waiting = summarize(profile(dram_bytes=1e5, memory_throughput_pct=15, sm_throughput_pct=10, achieved_occupancy_pct=20,
                                stall_long_scoreboard=12.0, stall_barrier=1.0), 4000.0)
    assert waiting.bottleneck == "latency"
    assert waiting.top_stalls[0] == "long_scoreboard" and "memory loads" in waiting.advice


class ProfileStage:
    """profile_stage on one candidate's profile job, with Nsight Compute replaced by `answer(job, kernels)`: what a
    run of the child with that job would give (profiles, output, exit code); each run's baseline and kernel filter
    are kept in `calls`."""

    def __init__(self, monkeypatch, tmp_path):
        from sparseditto.knowledge_base.library import get_kernel
        from sparseditto.spec import parse_spec
        from sparseditto.tools import gpu_stages
        from sparseditto.tools.runner import RunJob

        self.stage, self.tmp, self.calls = gpu_stages.profile_stage, tmp_path, []
        candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
        self.entry = candidate.kernels[0].entry
        self.mine = [p.model_copy(update={"kernel": self.entry}) for p in parse_ncu_csv((FIXTURES / "ncu_naive.csv").read_text())]
        self.library = parse_ncu_csv((FIXTURES / "ncu_baseline_cusparse_spmm_csr_alg3_row.csv").read_text())
        spec = parse_spec({"operation": "spmv", "M": 5000, "K": 5000,
                           "pattern": {"distribution": "uniform", "nnz_per_row": 8}})
        self.job = RunJob(candidate=candidate, spec=spec, cubin_path="x.cubin", resources={}, seeds=[1],
                          held_out_shapes=[], timing_seed=2, mode="profile")
        self.answer = lambda job, kernels: (self.mine, "", 0)

        def run_ncu(program, kernels, timeout_s, profiled_range_only=True):
            job = RunJob.model_validate_json(Path(program[-2]).read_text())
            self.calls.append((job.profile_baseline, list(kernels)))
            return self.answer(job, kernels)

        monkeypatch.setattr(gpu_stages, "run_ncu", run_ncu)
        monkeypatch.setattr(gpu_stages, "_BASELINE_PROFILES", {})

    def __call__(self, profile_baseline=True):
        """As GpuVerifier calls it: the best baseline only when it profiles baselines."""
        return self.stage(self.job, self.tmp, 60.0, 4000.0, "cusparse_spmv_default" if profile_baseline else None)


@pytest.fixture
def stage(monkeypatch, tmp_path):
    return ProfileStage(monkeypatch, tmp_path)


def test_one_ncu_run_profiles_the_candidate_then_its_baseline_once_per_spec(stage):
    """The profile stage starts Nsight Compute once: the candidate's launches, then the best baseline's call in the
    same range (every launch profiled), split by the candidate's entry names; a later candidate of the same spec is
    profiled alone (its entries only) and shown beside the baseline's summary kept from the first."""
    stage.answer = lambda job, kernels: ((stage.mine + stage.library if job.profile_baseline else stage.mine), "", 0)
    first = stage()
    assert stage.calls == [("cusparse_spmv_default", [])]
    assert [k["kernel"] for k in first.evidence["kernels"]] == [stage.entry]  # the library's launches are not the candidate's
    assert first.evidence["baseline"]["name"] == "cusparse_spmv_default"
    assert first.evidence["baseline"]["key_metrics"] == summarize(stage.library, 4000.0).key_metrics
    second = stage()
    assert stage.calls[1] == (None, [stage.entry]) and second.evidence["baseline"] == first.evidence["baseline"]


def test_a_run_without_the_candidates_launches_is_a_profiler_failure(stage):
    stage.answer = lambda job, kernels: (stage.library, "==ERR== the candidate failed", 1)
    report = stage()
    assert report.status == "error" and report.error_type == "profiler_failure"
    assert "the candidate failed" in report.message


def test_a_baseline_that_spoils_the_shared_run_costs_only_its_own_summary(stage):
    """The run with the baseline gave none of the candidate's launches (the library crashed under the profiler, say):
    the candidate is profiled again alone and passes, without the baseline's summary."""
    stage.answer = lambda job, kernels: ([], "==ERR== the library failed", 1) if job.profile_baseline else (stage.mine, "", 0)
    report = stage()
    assert [baseline for baseline, _ in stage.calls] == ["cusparse_spmv_default", None]
    assert report.status == "passed" and "baseline" not in report.evidence


def test_with_the_baseline_switched_off_the_candidate_is_profiled_alone(stage):
    """The offline policy never reads the baseline's profile: the run has no baseline (the candidate's entries only),
    and the evidence no "baseline", not even one kept from an earlier run of the same spec."""
    stage.answer = lambda job, kernels: ((stage.mine + stage.library if job.profile_baseline else stage.mine), "", 0)
    alone = stage(profile_baseline=False)
    assert stage.calls == [(None, [stage.entry])]
    assert alone.status == "passed" and "baseline" not in alone.evidence
    assert [k["kernel"] for k in alone.evidence["kernels"]] == [stage.entry]
    assert "baseline" in stage().evidence
    assert "baseline" not in stage(profile_baseline=False).evidence and stage.calls[-1] == (None, [stage.entry])


@pytest.mark.parametrize("profile_baseline", [True, False])
def test_the_verifier_names_the_best_baseline_to_the_stage_only_when_it_profiles_baselines(stage, monkeypatch,
                                                                                          measured_report, profile_baseline):
    from sparseditto.tools import verifier as verifier_module
    from sparseditto.tools.runner import RunResult

    named = []
    monkeypatch.setattr(verifier_module, "find_ncu", lambda: "ncu")
    monkeypatch.setattr(verifier_module, "profile_stage", lambda job, tmp, timeout, bw, best: named.append(best))
    run = RunResult(device={}, feedback=[], trials=[], measurement=measured_report("x").measurement)
    verifier_module.GpuVerifier(arch="sm_90", profile_baseline=profile_baseline)._profile(stage.job, run, stage.tmp)
    assert named == [run.measurement.best_baseline if profile_baseline else None]


@pytest.mark.gpu
def test_on_the_gpu_one_profiler_run_gives_the_candidates_and_the_baselines_summaries():
    """The profile stage on the device: the candidate's launches summarised, the best baseline's beside them, from one
    Nsight Compute run over the instance the verify run saved."""
    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.spec import parse_spec
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    if find_ncu() is None:
        pytest.skip("ncu not installed")
    arch = (detect().gpu or {}).get("arch", "sm_90")
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    spec = parse_spec({"operation": "spmv", "M": 200_000, "K": 200_000,
                       "pattern": {"distribution": "uniform", "nnz_per_row": 16}})
    report = GpuVerifier(arch=arch, trials=2, runs=5, sanitize=True, profile=True).verify(candidate, spec)
    profile = report.stage("profile")
    assert profile is not None and profile.status == "passed", report.feedback
    assert {k["kernel"] for k in profile.evidence["kernels"]} == {k.entry for k in candidate.kernels}
    assert profile.evidence["baseline"]["name"] == report.measurement.best_baseline
    assert profile.evidence["baseline"]["key_metrics"]

"""Nsight Compute CSV parsed and summarised, on output recorded on the H200 (tests/fixtures/ncu)."""

from __future__ import annotations

from pathlib import Path

from sparseditto.tools.profiler import METRICS, KernelProfile, ncu_command, parse_ncu_csv, summarize

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


def test_one_ncu_run_profiles_the_candidate_then_its_baseline_once_per_spec(monkeypatch, tmp_path):
    """The profile stage starts Nsight Compute once: the candidate's launches, then the best baseline's call in the
    same range (every launch profiled), split by the candidate's entry names; a later candidate of the same spec is
    profiled alone (its entries only) and shown beside the baseline's summary kept from the first."""
    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.spec import parse_spec
    from sparseditto.tools import gpu_stages
    from sparseditto.tools.runner import RunJob

    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    entry = candidate.kernels[0].entry
    mine = [p.model_copy(update={"kernel": entry}) for p in parse_ncu_csv((FIXTURES / "ncu_naive.csv").read_text())]
    library = parse_ncu_csv((FIXTURES / "ncu_baseline_cusparse_spmm_csr_alg3_row.csv").read_text())
    calls = []

    def run_ncu(program, kernels, timeout_s, profiled_range_only=True):
        job = RunJob.model_validate_json(Path(program[-2]).read_text())
        calls.append((job.profile_baseline, list(kernels)))
        return (mine + library if job.profile_baseline else mine), "", 0

    monkeypatch.setattr(gpu_stages, "run_ncu", run_ncu)
    monkeypatch.setattr(gpu_stages, "_BASELINE_PROFILES", {})
    spec = parse_spec({"operation": "spmv", "M": 5000, "K": 5000, "pattern": {"distribution": "uniform", "nnz_per_row": 8}})
    job = RunJob(candidate=candidate, spec=spec, cubin_path="x.cubin", resources={}, seeds=[1], held_out_shapes=[],
                 timing_seed=2, mode="profile")
    first = gpu_stages.profile_stage(job, tmp_path, 60.0, 4000.0, "cusparse_spmv_default")
    assert calls == [("cusparse_spmv_default", [])]
    assert [k["kernel"] for k in first.evidence["kernels"]] == [entry]  # the library's launches are not the candidate's
    assert first.evidence["baseline"]["name"] == "cusparse_spmv_default"
    assert first.evidence["baseline"]["key_metrics"] == summarize(library, 4000.0).key_metrics
    second = gpu_stages.profile_stage(job, tmp_path, 60.0, 4000.0, "cusparse_spmv_default")
    assert calls[1] == (None, [entry]) and second.evidence["baseline"] == first.evidence["baseline"]


def test_a_run_without_the_candidates_launches_is_a_profiler_failure(monkeypatch, tmp_path):
    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.spec import parse_spec
    from sparseditto.tools import gpu_stages
    from sparseditto.tools.runner import RunJob

    library = parse_ncu_csv((FIXTURES / "ncu_baseline_cusparse_spmm_csr_alg3_row.csv").read_text())
    monkeypatch.setattr(gpu_stages, "run_ncu", lambda *a, **k: (library, "==ERR== the candidate failed", 1))
    monkeypatch.setattr(gpu_stages, "_BASELINE_PROFILES", {})
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    spec = parse_spec({"operation": "spmv", "M": 500, "K": 500, "pattern": {"distribution": "uniform", "nnz_per_row": 8}})
    job = RunJob(candidate=candidate, spec=spec, cubin_path="x.cubin", resources={}, seeds=[1], held_out_shapes=[],
                 timing_seed=2, mode="profile")
    report = gpu_stages.profile_stage(job, tmp_path, 60.0, 4000.0, "cusparse_spmv_default")
    assert report.status == "error" and report.error_type == "profiler_failure"
    assert "the candidate failed" in report.message

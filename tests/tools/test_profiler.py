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

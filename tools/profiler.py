"""Nsight Compute stage: a curated metric set, the CSV parsed, the bottleneck named, a few metrics kept.

The reviewer does not get the dump: it gets the bottleneck (memory-, compute- or latency-bound,
judged against the device's measured ceilings) and the three or four metrics that matter for it.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

# name -> short label; at most 24, each chosen for a decision the reviewer can take
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_ns",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "dram__bytes.sum": "dram_bytes",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__occupancy_limit_registers": "blocks_limit_registers",
    "launch__occupancy_limit_shared_mem": "blocks_limit_shared_mem",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_dynamic": "shared_bytes_per_block",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_rate_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio": "sectors_per_load_request",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio": "sectors_per_store_request",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared_bank_conflicts",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "smsp__sass_average_branch_targets_threads_uniform.pct": "branch_uniformity_pct",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall_long_scoreboard",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio": "stall_lg_throttle",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall_barrier",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall_mio_throttle",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall_math_pipe_throttle",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall_short_scoreboard",
}
STALL_ADVICE = {
    "stall_long_scoreboard": "warps wait on global/local memory loads: more loads in flight per thread (unroll, wider loads) or more warps",
    "stall_lg_throttle": "the global load/store queue is full: fewer, wider (128-bit) accesses",
    "stall_barrier": "warps wait at __syncthreads: balance work between warps or use smaller blocks",
    "stall_mio_throttle": "shared-memory/special-function queue is full: fewer shared accesses or fewer bank conflicts",
    "stall_math_pipe_throttle": "an arithmetic pipe is saturated: the kernel is compute-bound there",
    "stall_short_scoreboard": "warps wait on shared memory or shuffles: reduce shared traffic per result",
}
Bottleneck = Literal["memory", "compute", "latency"]
SATURATED_PCT = 60.0


class KernelProfile(BaseModel):
    kernel: str
    metrics: dict[str, float]


class ProfileSummary(BaseModel):
    """What the reviewer reads: the bottleneck, why, and the few metrics that matter for it."""

    bottleneck: Bottleneck
    reason: str
    key_metrics: dict[str, float]
    top_stalls: list[str]
    advice: str
    kernels: list[KernelProfile]


def ncu_command(program: Sequence[str], kernels: Sequence[str], executable: str = "ncu", profiled_range_only: bool = True) -> list[str]:
    """`kernels` empty profiles every kernel; `profiled_range_only` limits ncu to cudaProfilerStart/Stop."""
    cmd = [executable, "--csv", "--clock-control", "none", "--metrics", ",".join(METRICS)]
    if profiled_range_only:
        cmd += ["--profile-from-start", "off"]
    if kernels:
        cmd += ["-k", f"regex:^({'|'.join(kernels)})$"]
    return [*cmd, *program]


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(output: str) -> list[KernelProfile]:
    """One profile per profiled launch, metrics under their short labels (lines before the CSV header are skipped)."""
    lines = output.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[str, KernelProfile] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        launch = launches.setdefault(row["ID"], KernelProfile(kernel=row["Kernel Name"], metrics={}))
        label = METRICS.get(row["Metric Name"])
        value = _number(row["Metric Value"])
        if label and value is not None:
            launch.metrics[label] = value
    return list(launches.values())


def _combined(profiles: list[KernelProfile]) -> dict[str, float]:
    """Launches of a sequence as one: time and bytes added, rates weighted by each launch's time."""
    total = sum(p.metrics.get("duration_ns", 0.0) for p in profiles) or 1.0
    out: dict[str, float] = {}
    for label in {k for p in profiles for k in p.metrics}:
        values = [(p.metrics[label], p.metrics.get("duration_ns", 0.0)) for p in profiles if label in p.metrics]
        if label in ("duration_ns", "dram_bytes", "shared_bank_conflicts"):
            out[label] = sum(v for v, _ in values)
        else:
            out[label] = sum(v * w for v, w in values) / (sum(w for _, w in values) or 1.0)
    out["duration_ns"] = total
    return out


def summarize(profiles: list[KernelProfile], copy_bandwidth_gbps: float | None) -> ProfileSummary:
    """Classify against the measured copy bandwidth (DRAM) and the SM's peak issue rate."""
    m = _combined(profiles)
    dram_gbps = m.get("dram_bytes", 0.0) / m["duration_ns"]
    dram_pct = 100.0 * dram_gbps / copy_bandwidth_gbps if copy_bandwidth_gbps else m.get("dram_throughput_pct", 0.0)
    memory_pct = max(dram_pct, m.get("memory_throughput_pct", 0.0))
    compute_pct = max(m.get("sm_throughput_pct", 0.0), m.get("tensor_pipe_pct", 0.0))
    stalls = sorted((k for k in m if k.startswith("stall_")), key=lambda k: -m[k])[:3]
    if memory_pct >= SATURATED_PCT and memory_pct >= compute_pct:
        kind: Bottleneck = "memory"
        reason = f"memory system at {memory_pct:.0f}% of peak (DRAM {dram_gbps:.0f} GB/s, {dram_pct:.0f}% of measured copy bandwidth)"
        keys = ["dram_throughput_pct", "l2_hit_rate_pct", "l1_hit_rate_pct", "sectors_per_load_request"]
        advice = ("cut bytes: reuse through shared memory or L1, narrower index types, fewer passes; "
                  "sectors per request above 4 (fp32) mean uncoalesced loads")
    elif compute_pct >= SATURATED_PCT:
        kind = "compute"
        reason = f"SM pipelines at {compute_pct:.0f}% of peak"
        keys = ["sm_throughput_pct", "tensor_pipe_pct", "branch_uniformity_pct", "stall_math_pipe_throttle"]
        advice = "cut instructions per result: tensor cores for dense tiles, less index arithmetic, uniform branches"
    else:
        kind = "latency"
        reason = (f"neither memory ({memory_pct:.0f}%) nor compute ({compute_pct:.0f}%) is near its peak: "
                  f"warps mostly wait ({', '.join(s.removeprefix('stall_') for s in stalls)})")
        keys = ["achieved_occupancy_pct", "theoretical_occupancy_pct", "registers_per_thread", *stalls[:1]]
        advice = STALL_ADVICE.get(stalls[0], "more independent work per warp") if stalls else "more independent work per warp"
    return ProfileSummary(bottleneck=kind, reason=reason, key_metrics={k: round(m[k], 2) for k in keys if k in m},
                          top_stalls=[s.removeprefix("stall_") for s in stalls], advice=advice, kernels=profiles)


def find_ncu() -> str | None:
    return shutil.which("ncu") or shutil.which("/usr/local/cuda/bin/ncu")


def run_ncu(program: Sequence[str], kernels: Sequence[str], timeout_s: float,
            profiled_range_only: bool = True) -> tuple[list[KernelProfile], str, int | None]:
    """Profiles, raw output and exit code (None on timeout)."""
    cmd = ncu_command(program, kernels, find_ncu() or "ncu", profiled_range_only)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], "", None
    return parse_ncu_csv(proc.stdout), proc.stdout + proc.stderr[-2000:], proc.returncode

"""Records what compute-sanitizer and Nsight Compute print on this machine, for the parsers' fixtures.

`python3 bench/probe_profilers.py OUTDIR` runs small planted-bug kernels under each sanitizer tool and
one kernel under ncu with the curated metric list, and writes the raw outputs to OUTDIR.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SOURCE = r'''
extern "C" __global__ void oob_read(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i + 1] * 0.0f + 1.0f;
}
extern "C" __global__ void oob_write(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i + 8] = x[i];
}
extern "C" __global__ void uninit_read(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 1e30f ? 1.0f : 0.0f;
}
extern "C" __global__ void smem_race(const float* x, float* y, int n) {
    __shared__ float s[256];
    s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    float v = s[(threadIdx.x + 64) % 256];
    if (blockIdx.x * 256 + threadIdx.x < n) y[blockIdx.x * 256 + threadIdx.x] = v;
}
extern "C" __global__ void divergent_barrier(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < 16) __syncthreads();
    if (i < n) y[i] = x[i];
}
extern "C" __global__ void clean(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
'''

METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__sass_average_branch_targets_threads_uniform.pct",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
]


def child(kernel: str) -> None:
    import cupy as cp

    cp.cuda.set_allocator(None)  # plain cudaMalloc: the checker sees every allocation's true size
    mod = cp.RawModule(code=SOURCE, options=("-lineinfo",), name_expressions=None)
    n = 1 << 20 if kernel == "clean" else 1024
    x = cp.empty(n, dtype=cp.float32) if kernel == "uninit_read" else cp.arange(n, dtype=cp.float32)
    y = cp.empty(n, dtype=cp.float32)
    mod.get_function(kernel)(((n + 255) // 256,), (256,), (x, y, cp.int32(n)))
    cp.cuda.Device().synchronize()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__]
    for tool, kernel in [("memcheck", "oob_read"), ("memcheck", "oob_write"), ("initcheck", "uninit_read"),
                         ("racecheck", "smem_race"), ("synccheck", "divergent_barrier"), ("memcheck", "clean")]:
        cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20", "--error-exitcode", "99", *me, "child", kernel]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        (out / f"sanitizer_{tool}_{kernel}.txt").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr + f"\n--- rc {p.returncode}\n")
        print(tool, kernel, "rc", p.returncode, p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else p.stderr[-200:])
    cmd = ["ncu", "--csv", "--clock-control", "none", "--metrics", ",".join(METRICS), "-k", "regex:^clean$", *me, "child", "clean"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (out / "ncu_clean.csv").write_text(p.stdout)
    (out / "ncu_clean.stderr").write_text(p.stderr + f"\n--- rc {p.returncode}\n")
    print("ncu rc", p.returncode, p.stderr[-300:])
    q = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, timeout=120)
    (out / "ncu_query_metrics_gh100.txt").write_text(q.stdout + q.stderr)
    print("versions:", subprocess.run(["compute-sanitizer", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:],
          subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:])


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2])
    else:
        main(Path(sys.argv[1]))

"""Measures the two hardware rates that bound the issue's kernels, on the GPU machine.

1. Shared-memory data rate for SpMM's access pattern: groups of 8 lanes each read one random 128-byte row
   of a staged B tile (4 rows per warp instruction, conflict-free). Every CUDA-core SpMM that takes B from
   shared memory or L1 moves nnz * N * value_bytes through this path, so bytes / rate is its floor.
2. SpMV's gathers: a kernel that only streams the column indices and sums x[col] (no values, no row
   pointers, no output per row), on the uniform spec's real column indices, against the same kernel on
   sequential indices (the stream alone). Any CSR SpMV that reads x once per nonzero does at least this.

Usage on the GPU machine: `python3 bench/floors.py OUT_DIR`; writes OUT_DIR/floors.json, prints a table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from sparseditto.spec import load_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.runner import device_info
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call

ROOT = Path(__file__).resolve().parents[1]

SOURCE = r"""
// Each group of LPR lanes reads random rows (LPR 16-byte pieces each) of a ROWS-row tile in shared memory.
template <int LPR>
__device__ void smem_rows(float* out, int steps, int rows) {
    extern __shared__ uint4 tile[];
    for (int e = threadIdx.x; e < rows * LPR; e += blockDim.x)
        tile[e] = make_uint4(e, e + 1, e + 2, e + 3);
    __syncthreads();
    const int lane = threadIdx.x % 32, gl = lane % LPR;
    unsigned h = (blockIdx.x * blockDim.x + threadIdx.x) / LPR * 2654435761u + 12345u;
    float acc = 0.f;
    for (int t = 0; t < steps; ++t) {
        h = h * 1664525u + 1013904223u;
        const uint4 p = tile[((h >> 8) & (rows - 1)) * LPR + gl];
        acc += __uint_as_float(p.x) + __uint_as_float(p.y) + __uint_as_float(p.z) + __uint_as_float(p.w);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void smem_rows8(float* out, int steps, int rows) { smem_rows<8>(out, steps, rows); }
extern "C" __global__ void smem_rows32(float* out, int steps, int rows) { smem_rows<32>(out, steps, rows); }

// Streams 4 column indices per thread step (16-byte loads) and sums x at them.
extern "C" __global__ void gather_sum(const int4* __restrict__ cols, const float* __restrict__ x,
                                      float* __restrict__ out, long long quads) {
    float acc = 0.f;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < quads; q += (long long)gridDim.x * blockDim.x) {
        const int4 c = __ldcs(cols + q);
        acc += __ldg(x + c.x) + __ldg(x + c.y) + __ldg(x + c.z) + __ldg(x + c.w);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""


def smem_rate(module, sms: int, flush) -> list[dict]:
    rows_out = []
    for name, lpr in (("smem_rows8", 8), ("smem_rows32", 32)):
        fn = module.get_function(name)
        tile_rows = 1024 if lpr == 8 else 256  # 128 KiB either way
        smem = tile_rows * lpr * 16
        fn.max_dynamic_shared_size_bytes = smem
        threads, steps = 1024, 8192
        out = cp.empty(sms * threads, dtype=cp.float32)
        run = lambda: fn((sms,), (threads,), (out, np.int32(steps), np.int32(tile_rows)), shared_mem=smem)  # noqa: E731
        t = time_call(run, flush, runs=20)
        moved = sms * threads * steps * 16
        rows_out.append({"kernel": name, "lanes_per_row": lpr, "bytes": moved, "us": t.median_us,
                         "tb_per_s": moved / t.median_us / 1e6})
    return rows_out


def gather_rate(module, sms: int, flush) -> list[dict]:
    spec = load_spec(ROOT / "examples" / "spmv_fp32_uniform.yaml")
    problem = get_family(spec.family).make_problem(spec, seed=777)
    colind = problem.inputs["colind"]
    K = problem.symbols["K"]
    quads = len(colind) // 4
    x = cp.asarray(np.random.default_rng(1).uniform(-1, 1, K).astype(np.float32))
    fn = module.get_function("gather_sum")
    threads, blocks = 256, sms * 8
    out = cp.empty(blocks * threads, dtype=cp.float32)
    result = []
    for label, cols in (("uniform spec columns", colind), ("sequential columns", np.arange(len(colind), dtype=np.int64) % K)):
        d_cols = cp.asarray(cols[: quads * 4].astype(np.int32))
        run = lambda: fn((blocks,), (threads,), (d_cols, x, out, np.int64(quads)))  # noqa: E731
        t = time_call(run, flush, runs=20)
        result.append({"columns": label, "nnz": quads * 4, "us": t.median_us})
        del d_cols
    return result


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = device_info()
    flush = L2Flusher()
    copy_bw = device_copy_bandwidth(flush)
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    smem = smem_rate(module, info["sms"], flush)
    gathers = gather_rate(module, info["sms"], flush)
    best = max(r["tb_per_s"] for r in smem)
    spmm_bytes = {}
    for name in ("spmm_fp32_1pct", "spmm_fp32_5pct", "spmm_fp16_1pct", "spmm_fp16_5pct"):
        spec = load_spec(ROOT / "examples" / f"{name}.yaml")
        sym = get_family(spec.family).symbols(spec)
        b = sym["nnz"] * sym["N"] * (4 if spec.dtype == "fp32" else 2)
        spmm_bytes[name] = {"b_bytes_through_l1_or_smem": b, "floor_us": b / best / 1e6}
    result = {"device": info, "copy_bandwidth": copy_bw, "smem": smem, "gathers": gathers, "spmm_floors": spmm_bytes}
    (out / "floors.json").write_text(json.dumps(result, indent=1))
    print(f"device {info['name']}  copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    for r in smem:
        print(f"shared-memory rows, {r['lanes_per_row']:2d} lanes per row: {r['tb_per_s']:.1f} TB/s ({r['us']:.1f} us)")
    for g in gathers:
        print(f"gather-only SpMV pass, {g['columns']}: {g['us']:.1f} us for {g['nnz']} nonzeros")
    for name, f in spmm_bytes.items():
        print(f"{name}: B through L1/shared {f['b_bytes_through_l1_or_smem'] / 1e6:.0f} MB -> floor {f['floor_us']:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])

"""Device probe for issue 15: the 2:4 GEMM baselines side by side (dense cuBLAS/cuBLASLt, cuSPARSELt called
directly with its best searched algorithm, PyTorch's cuSPARSELt front end) on the shapes DESIGN.md quotes.

For each shape, in fp16: a random 2:4 A (two kept values in every group of four along K) and B, every
configuration the registry offers for `sparse24_gemm` built (compression and algorithm search included), its C
checked against an fp32 product of the same operands on the GPU, then timed: CUDA events around each call,
L2 flushed before each, median of --runs after --warmup. A short table is printed last; --out writes the numbers.

The family package is written apart; this probe stands in for its `decompress` with a plain format (kept
values, and their positions inside each group of four), which the baselines only use to densify A once.

On the GPU machine, from the repository root:
    source bench/device_setup.sh && python3 bench/sparse24_baselines_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import cupy as cp
import numpy as np

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (11008, 4096, 16)]
COMPRESSION = "sparseditto.tools.families.sparse24_gemm.compression"


def decompress(values, meta, M, K):
    """The probe's compressed format back to a dense (M, K) float64 A."""
    dense = np.zeros((M, K))
    columns = (np.arange(K // 2) // 2) * 4 + meta.astype(np.int64)
    dense[np.arange(M)[:, None], columns] = values
    return dense


def make_instance(M, K, N, dtype, seed):
    """A Problem of the family's shape (inputs A_values, A_meta, B; output C) and its device arrays."""
    from sparseditto.tools.dtypes import dtype as dtype_info
    from sparseditto.tools.families.base import Output, Problem

    rng = cp.random.default_rng(seed)
    keep = cp.sort(cp.argsort(rng.random((M, K // 4, 4), dtype=cp.float32), axis=2)[:, :, :2], axis=2)
    storage = dtype_info(dtype).storage
    device = {"A_values": rng.standard_normal((M, K // 2), dtype=cp.float32).astype(storage),
              "A_meta": keep.reshape(M, K // 2).astype(cp.uint8),
              "B": rng.standard_normal((K, N), dtype=cp.float32).astype(storage)}
    problem = Problem(dtype=dtype, symbols={"M": M, "K": K, "N": N, "act": 0, "has_bias": 0},
                      inputs={name: array.get() for name, array in device.items()},
                      input_dtypes={"A_values": dtype, "A_meta": "int8", "B": dtype},
                      outputs={"C": Output((M, N), dtype, 1e-2)})
    return problem, device


def time_call(run, flush, warmup, runs):
    for _ in range(warmup):
        run()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(runs):
        flush.fill(1)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    return float(np.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    sys.modules[COMPRESSION] = types.SimpleNamespace(decompress=decompress)
    from sparseditto.tools.baselines import baseline_calls, cusparselt, sparse24_dense

    print("cuSPARSELt direct:", cusparselt.status())
    print("torch cuSPARSELt: ", cusparselt.torch_cslt_status()[1])
    print("torch:            ", sparse24_dense.torch_status()[1])
    flush = cp.empty(256 << 20, dtype=cp.uint8)
    rows = []
    for M, K, N in SHAPES:
        problem, device = make_instance(M, K, N, "fp16", seed=M + N)
        gemm = sparse24_dense.sparse24_gemm(problem)
        a32 = cp.asarray(sparse24_dense.dense_a(gemm, problem, device)).astype(cp.float32)
        reference = a32 @ device["B"].astype(cp.float32)
        del a32
        calls = baseline_calls("sparse24_gemm", (), problem, device)
        cp.cuda.Device().synchronize()
        for call in calls:
            call.output.fill(0)
            call.run()
            error = float(cp.linalg.norm(call.output.astype(cp.float32) - reference) / cp.linalg.norm(reference))
            us = time_call(call.run, flush, args.warmup, args.runs)
            rows.append({"shape": f"{M}x{K}x{N}", "name": call.name, "library": call.library, "median_us": us,
                         "tflops": 2 * M * N * K / us * 1e-6, "rel_error": error, "config": call.config,
                         "prepare": call.prepare_note})
            print(f"  {M}x{K}x{N} {call.name}: {us:.1f} us, error {error:.1e}", flush=True)
        del calls, reference, device
        cp.get_default_memory_pool().free_all_blocks()

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sparse24_baselines_h200.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'shape':>16} {'configuration':<42} {'library':<17} {'us':>9} {'TFLOP/s':>8} {'error':>8}")
    for row in rows:
        print(f"{row['shape']:>16} {row['name']:<42} {row['library']:<17} {row['median_us']:9.1f} "
              f"{row['tflops']:8.1f} {row['rel_error']:8.1e}")
    print(f"\n{'shape':>16} {'dense cuBLAS':>13} {'cuSPARSELt':>11} {'torch cslt':>11} {'dense/cuSPARSELt':>17}  "
          "(best correct per library, us)")
    for shape in dict.fromkeys(row["shape"] for row in rows):
        best = {}
        for row in rows:
            if row["shape"] == shape and row["rel_error"] <= 1e-2:
                best[row["library"]] = min(best.get(row["library"], float("inf")), row["median_us"])
        dense, lt, torch_lt = (best.get(name, float("nan")) for name in ("cublas", "cusparselt", "torch_cusparselt"))
        print(f"{shape:>16} {dense:13.1f} {lt:11.1f} {torch_lt:11.1f} {dense / lt:16.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

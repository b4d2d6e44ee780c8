"""Device probe for issue 15: the 2:4 GEMM baselines side by side (dense cuBLAS/cuBLASLt, cuSPARSELt called
directly with its best searched algorithm, PyTorch's cuSPARSELt front end) on the issue's shapes (4096^3, 8192^3
and a decode shape).

For each shape, in fp16: a random 2:4 A (two kept values in every group of four along K) and B, every
configuration the registry offers for `sparse24_gemm` built (compression, algorithm search and, for torch, the
CUDA graph capture included), its C checked against an fp32 product of the same operands on the GPU, then timed
exactly as the pipeline's harness times baselines (tools.timing.time_call with its L2Flusher: CUDA events around
each call on the current CuPy stream, L2 flushed before each, runs enqueued back to back, median of --runs after
--warmup). Beside each, the host time of one call (enqueue only, the GPU idle before it): a call whose host time
exceeds its GPU time is timed host-bound by the harness. torch's eager route (plan rebuilt inside every call) is
timed too, as `<name>_eager`, to show what the graph replay removes. A short table is printed last; --out writes
the numbers.

A is in the family's compressed format (its `pack_meta`), which the baselines densify once with its
`decompress`.

On the GPU machine, from the repository root:
    source bench/device_setup.sh && python3 bench/sparse24_baselines_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import cupy as cp
import numpy as np

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (11008, 4096, 16)]


def make_instance(M, K, N, dtype, seed):
    """A Problem of the family's shape (inputs A_values, A_meta, B; output C) and its device arrays."""
    from sparseditto.tools.dtypes import dtype as dtype_info
    from sparseditto.tools.families.base import Output, Problem
    from sparseditto.tools.families.sparse24_gemm.compression import pack_meta

    rng = cp.random.default_rng(seed)
    keep = cp.sort(cp.argsort(rng.random((M, K // 4, 4), dtype=cp.float32), axis=2)[:, :, :2], axis=2)
    storage = dtype_info(dtype).storage
    device = {"A_values": rng.standard_normal((M, K // 2), dtype=cp.float32).astype(storage),
              "A_meta": cp.asarray(pack_meta(keep.get())),
              "B": rng.standard_normal((K, N), dtype=cp.float32).astype(storage)}
    problem = Problem(dtype=dtype, symbols={"M": M, "K": K, "N": N, "act": 0, "has_bias": 0},
                      inputs={name: array.get() for name, array in device.items()},
                      input_dtypes={"A_values": dtype, "A_meta": "int32", "B": dtype},
                      outputs={"C": Output((M, N), dtype, 1e-2)})
    return problem, device


def host_us(run, calls=10):
    """Median host time of one call, each started on an idle GPU: what a back-to-back timing loop cannot hide
    once it exceeds the call's GPU time."""
    times = []
    for _ in range(calls):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e6)
    cp.cuda.Device().synchronize()
    return float(np.median(times))


def eager_torch_calls(problem, device):
    """torch's cuSPARSELt route without the graph (each B order; split-K arguments where torch takes them)."""
    from sparseditto.tools.baselines import cusparselt, sparse24_dense

    torch, _ = cusparselt.torch_cslt_status()
    if torch is None:
        return []
    gemm = sparse24_dense.sparse24_gemm(problem)
    operands = functools.cache(functools.partial(sparse24_dense.sparse24_operands, gemm, problem, device))
    calls = []
    for b_transposed in (False, True):
        for split in (True, False):
            try:
                call = cusparselt._build_torch(torch, operands, b_transposed, split, False)
            except Exception as exc:  # an older torch without split-K arguments: the next variant
                print(f"  eager torch cuSPARSELt (B transposed: {b_transposed}, split-K: {split}) failed: {exc!r}")
                continue
            call.name += "_eager"
            calls.append(call)
            break
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from sparseditto.tools.baselines import baseline_calls, cusparselt, sparse24_dense
    from sparseditto.tools.timing import L2Flusher, time_call

    print("cuSPARSELt direct:", cusparselt.status())
    print("torch cuSPARSELt: ", cusparselt.torch_cslt_status()[1])
    print("torch:            ", sparse24_dense.torch_status()[1])
    flush = L2Flusher()
    rows = []
    for M, K, N in SHAPES:
        problem, device = make_instance(M, K, N, "fp16", seed=M + N)
        gemm = sparse24_dense.sparse24_gemm(problem)
        a32 = cp.asarray(sparse24_dense.dense_a(gemm, problem, device)).astype(cp.float32)
        reference = a32 @ device["B"].astype(cp.float32)
        del a32
        calls = baseline_calls("sparse24_gemm", (), problem, device) + eager_torch_calls(problem, device)
        cp.cuda.Device().synchronize()
        for call in calls:
            call.output.fill(0)
            call.run()
            error = float(cp.linalg.norm(call.output.astype(cp.float32) - reference) / cp.linalg.norm(reference))
            us = time_call(call.run, flush, warmup=args.warmup, runs=args.runs).median_us
            host = host_us(call.run)
            rows.append({"shape": f"{M}x{K}x{N}", "name": call.name, "library": call.library, "median_us": us,
                         "host_us": host, "tflops": 2 * M * N * K / us * 1e-6, "rel_error": error,
                         "config": call.config, "prepare": call.prepare_note})
            print(f"  {M}x{K}x{N} {call.name}: {us:.1f} us (host {host:.1f} us), error {error:.1e}", flush=True)
        del calls, reference, device
        cp.get_default_memory_pool().free_all_blocks()

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sparse24_baselines_h200.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'shape':>16} {'configuration':<42} {'library':<17} {'us':>9} {'host us':>8} {'TFLOP/s':>8} "
          f"{'error':>8}")
    for row in rows:
        print(f"{row['shape']:>16} {row['name']:<42} {row['library']:<17} {row['median_us']:9.1f} "
              f"{row['host_us']:8.1f} {row['tflops']:8.1f} {row['rel_error']:8.1e}")
    print(f"\n{'shape':>16} {'dense cuBLAS':>13} {'cuSPARSELt':>11} {'torch cslt':>11} {'torch eager':>12} "
          f"{'dense/cuSPARSELt':>17}  (best correct per library, us)")
    for shape in dict.fromkeys(row["shape"] for row in rows):
        best = {}
        for row in rows:
            if row["shape"] == shape and row["rel_error"] <= 1e-2:
                key = row["library"] + ("_eager" if row["name"].endswith("_eager") else "")
                best[key] = min(best.get(key, float("inf")), row["median_us"])
        dense, lt, torch_lt, eager = (best.get(name, float("nan")) for name in
                                      ("cublas", "cusparselt", "torch_cusparselt", "torch_cusparselt_eager"))
        sparse = min((us for us in (lt, torch_lt) if us == us), default=float("nan"))  # NaN: none correct
        print(f"{shape:>16} {dense:13.1f} {lt:11.1f} {torch_lt:11.1f} {eager:12.1f} {dense / sparse:16.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

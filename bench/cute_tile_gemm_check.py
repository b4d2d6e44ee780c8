"""Check the CuTe wgmma tile product on the GPU against float64 NumPy, from cubins built elsewhere.

Standalone (no sparseditto import), so that the exact cubins that a machine without a CUDA toolkit
builds (tools/compiler.py: NVRTC + the pinned header wheels) are what runs here:

    # on the build machine
    python -c "from pathlib import Path; from sparseditto.tools.compiler import compile_source
    src = Path('tests/fixtures/families/cute_tile_gemm/kernels/cute_gemm_wgmma_ss.cu').read_text()
    Path('.cute_cubins').mkdir(exist_ok=True)
    for bn in (64, 128, 256):
        r = compile_source(src, 'sm_90a', [f'-DBN={bn}']); assert r.ok, r.log
        Path(f'.cute_cubins/bn{bn}.cubin').write_bytes(r.cubin)"
    # on the GPU machine
    python bench/cute_tile_gemm_check.py .cute_cubins [small]   # small: the three smallest shapes (sanitizer)

The launch geometry mirrors the kernel header: grid (M // 64, N // BN), 128 threads,
2 * (64 * 64 + BN * 64) * 2 bytes of dynamic shared memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

SHAPES = [(64, 256, 64), (128, 256, 128), (192, 512, 320), (1024, 1024, 1024), (2048, 2048, 4096), (4096, 4096, 4096)]


def launch(fn, A, B, C, bn: int) -> None:
    (M, K), N = A.shape, B.shape[1]
    smem = 2 * (64 * 64 + bn * 64) * 2
    fn.max_dynamic_shared_size_bytes = smem
    fn((M // 64, N // bn, 1), (128, 1, 1), (A, B, C, np.int32(M), np.int32(N), np.int32(K)), shared_mem=smem)


def check(fn, bn: int, M: int, N: int, K: int, rng: np.random.Generator) -> dict:
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    dA, dB = cp.asarray(A), cp.asarray(B)
    dC = cp.full((M, N), cp.nan, dtype=cp.float32)  # poisoned: an element never written stays NaN
    launch(fn, dA, dB, dC, bn)
    cp.cuda.get_current_stream().synchronize()
    C = cp.asnumpy(dC).astype(np.float64)
    out = {
        "BN": bn, "M": M, "N": N, "K": K,
        "unwritten": int(np.isnan(C).sum()),
        "rel_norm_err": float(np.linalg.norm(C - ref) / np.linalg.norm(ref)),
        "max_abs_err": float(np.nanmax(np.abs(C - ref))),
        "inputs_unchanged": bool((cp.asnumpy(dA) == A).all() and (cp.asnumpy(dB) == B).all()),
    }
    if M * N * K >= 1024**3:
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        for _ in range(3):
            launch(fn, dA, dB, dC, bn)
        start.record()
        for _ in range(20):
            launch(fn, dA, dB, dC, bn)
        stop.record()
        stop.synchronize()
        us = cp.cuda.get_elapsed_time(start, stop) * 1e3 / 20
        out.update(us=round(us, 1), tflops=round(2 * M * N * K / us / 1e6, 1))
    return out


def main(folder: str, shapes: list[tuple[int, int, int]]) -> int:
    rng = np.random.default_rng(0)
    print(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                      "driver": cp.cuda.runtime.driverGetVersion()}))
    failures = 0
    for path in sorted(Path(folder).glob("bn*.cubin")):
        bn = int(path.stem[2:])
        fn = cp.RawModule(path=str(path)).get_function("cute_gemm_wgmma_ss")
        for M, N, K in shapes:
            if N % bn:
                continue
            row = check(fn, bn, M, N, K, rng)
            row["ok"] = row["unwritten"] == 0 and row["inputs_unchanged"] and row["rel_norm_err"] <= max(1e-5, K / 16 * 2.0**-23)
            failures += not row["ok"]
            print(json.dumps(row))
    print("FAILURES", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".cute_cubins", SHAPES[:3] if "small" in sys.argv[2:] else SHAPES))

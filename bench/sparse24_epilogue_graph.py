"""The 2:4 family's fused epilogue and CUDA Graph replay, measured against the unfused sequence (issue 15, item 5).

Run on the GPU machine: `python3 bench/sparse24_epilogue_graph.py OUT_DIR [KERNEL]` (default sp24_mma_sp at its
planner start). For C = relu(A B + bias) at 4096^3 fp16 it times, with the harness's own time_call and L2 flush:
  fused     the kernel with its epilogue (bias and ReLU inside the kernel);
  unfused   the kernel without epilogue, then an elementwise pass (bias and ReLU) over C;
  and both sequences captured once in a CUDA graph and replayed.
Each variant's C is checked against the float64 reference (relative error). Writes OUT_DIR/epilogue_graph.json and
prints a table last.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from sparseditto.agents.planner import offline_plan
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.runner import Launcher, device_info
from sparseditto.tools.timing import L2Flusher, time_call
from sparseditto.tools.verifier import compile_candidate

SHAPE = {"M": 4096, "K": 4096, "N": 4096}
BIAS_RELU = cp.ElementwiseKernel("float16 c, float16 bias", "float16 out",
                                 "float y = (float)c + (float)bias; out = (float16)(y < 0.f ? 0.f : y)",
                                 "sparse24_bias_relu")


def build(kernel: str, epilogue: dict, arch: str, tmp: Path):
    """(launcher, problem) for the kernel at its planner start on a spec with `epilogue`."""
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, **SHAPE, "dtype": "fp16", "epilogue": epilogue})
    family = get_family(spec.family)
    start = next(s.start for s in offline_plan(spec).strategies if s.kernel == kernel)
    candidate = get_kernel(kernel).instantiate(start)
    result, feedback = compile_candidate(candidate, spec, arch)
    if not result.ok:
        raise SystemExit(f"{kernel}: {feedback.message}")
    cubin = tmp / f"{kernel}-{len(epilogue)}.cubin"
    cubin.write_bytes(result.cubin)
    problem = family.make_problem(spec, seed=11)
    launcher = Launcher(candidate, cp.RawModule(path=str(cubin)), problem, family, device_info(), result.resources)
    return launcher, problem, family


def graph_of(sequence) -> cp.cuda.graph.Graph:
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        sequence()  # warm: first-call setup stays outside the capture
        stream.synchronize()
        stream.begin_capture()
        sequence()
        graph = stream.end_capture()
    return graph


def rel_error(out: cp.ndarray, ref: np.ndarray) -> float:
    got = to_float64(cp.asnumpy(out), "fp16").reshape(ref.shape)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def main(out_dir: Path, kernel: str = "sp24_mma_sp") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    arch = device_info()["arch"]
    flush = L2Flusher()
    with tempfile.TemporaryDirectory() as tmp:
        fused, problem, family = build(kernel, {"bias": True, "activation": "relu"}, arch, Path(tmp))
        plain, _, _ = build(kernel, {}, arch, Path(tmp))
        ref = family.reference(problem)["C"]
        # the unfused sequence computes the fused problem's product: same A, B and bias
        for name in ("A_values", "A_meta", "B"):
            plain.arrays[name][...] = fused.arrays[name]
        bias = fused.arrays["bias"].view(cp.float16)
        c_plain = plain.outputs["C"].view(cp.float16)

        def unfused() -> None:
            plain.run()
            BIAS_RELU(c_plain, bias[:, None], c_plain)

        variants = {"fused": (fused.run, fused.outputs["C"]), "unfused": (unfused, plain.outputs["C"])}
        for name, (seq, _) in list(variants.items()):
            graph = graph_of(seq)
            variants[f"{name}, graph replay"] = (lambda g=graph: g.launch(cp.cuda.get_current_stream()),
                                                 variants[name][1])
        rows = []
        for name, (run, out) in variants.items():
            out.fill(0)
            run()
            cp.cuda.Device().synchronize()
            err = rel_error(out, ref)
            t = time_call(run, flush, warmup=5, runs=30)
            tflops = family.flops(problem.symbols) / t.median_us * 1e-6
            rows.append({"variant": name, "kernel": kernel, "median_us": t.median_us, "p10_us": t.p10_us,
                         "p90_us": t.p90_us, "dense_equivalent_tflops": tflops, "rel_error": err})
    (out_dir / "epilogue_graph.json").write_text(json.dumps(rows, indent=1))
    print(f"{'variant':28s} {'us':>9s} {'TFLOP/s':>8s} {'rel error':>10s}")
    for r in rows:
        print(f"{r['variant']:28s} {r['median_us']:9.1f} {r['dense_equivalent_tflops']:8.1f} {r['rel_error']:10.2e}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])

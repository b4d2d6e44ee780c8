"""How far dense fp8 cuBLASLt (torch._scaled_mm) stays from the family's per-element bound for fp32 accumulation.

The 2:4 family holds every element of C to the error its own terms allow when K/2 exact products are summed in fp32
(`element_bound`). e4m3 tensor-core instructions keep less than fp32 in their running sum, so a kernel that leaves
the whole K in the instruction's accumulator misses that bound on some elements (measured on the H200 in session 13).
This prints, on the family's own problems (the verifier's values: runs of scales, subnormals), how the vendor's
product does with its default promotion (use_fast_accum=False) and without it (True): elements past the plain fp32
bound and past the family's (which adds 2^-ALIGNED_SUM_BITS of the condition for e4m3), the largest ratios, the
largest |C - ref| / condition, and the norm-wise error. GPU and torch required.
`--from-logs LOG...` (no GPU): the worst elements that GPU test logs recorded, against their conditions.
`--small-k OUT_JSON`: the verifier's second held-out shape has K of 64 to 768 (one to twelve instructions), where the
fp32 part of the bound is small and the instructions' own error decides. For K in SMALL_K and SEEDS draws each, the
e4m3 kernel at the planner's start (sp24_wgmma_sp_fp8) with each PROMOTE, dense fp8 cuBLASLt (default and fast
accumulation) and, on the host, an fp16 running sum, on the same problems: per K the largest |C - ref| / condition, the largest share of the condition the bound would have to
add beyond its fp32 part, (|C - ref| - fp32 bound) / condition, and the largest norm-wise error (what a norm-wise
criterion for e4m3 would be calibrated on: the per-element allowance tells fast accumulation and fp16 sums from
promoted ones only on their worst elements).

    python3 bench/fp8_accumulation.py [OUT_JSON]
    python3 bench/fp8_accumulation.py --from-logs evals/results/issue15_h200/gpu_tests_fp8_session13_*.txt
    python3 bench/fp8_accumulation.py --small-k OUT_JSON
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from sparseditto.spec import parse_spec
from sparseditto.tools.correctness import rel_error
from sparseditto.tools.baselines.sparse24_dense import dense_a, sparse24_gemm
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.sparse24_gemm import ALIGNED_SUM_BITS
from sparseditto.tools.values import element_bound, numerics

SHAPES = [(1024, 1024, 64), (528, 1088, 400), (4096, 4096, 4096), (8192, 8192, 8192)]
SMALL_K, SEEDS, SMALL_M, SMALL_N = (64, 128, 192, 256, 384, 768, 1088), 8, 560, 1024  # N: cuBLASLt's fp8 needs multiples of 16
PROMOTE = (1, 2, 4)
FP16_SUM_SEEDS = 2


def worst_elements(logs: list[str]) -> None:
    """The worst element of each failed verification in GPU test logs (the verifier's `worst_element` evidence, judged
    against the plain fp32 bound then), measured against its condition: the condition is read back from that bound
    (element_bound's formula, K/2 + 2 terms), and the family's e4m3 bound there is printed beside it."""
    fp32, fp16 = numerics("fp32"), numerics("fp16")
    found = re.compile(r"shape \{'M': (\d+), 'K': (\d+), 'N': (\d+)[^}]*\}.*?'worst_element': \{'output': 'C', "
                       r"'index': \[(\d+), (\d+)\], 'got': ([-\d.e+]+), 'expected': ([-\d.e+]+), 'bound': ([-\d.e+]+)\}")
    bits = ALIGNED_SUM_BITS["fp8_e4m3"]
    for log in logs:
        for M, K, N, row, col, got, expected, bound in found.findall(Path(log).read_text()):
            got, expected, bound, terms = float(got), float(expected), float(bound), int(K) // 2 + 2
            condition = ((bound - fp16.unit_roundoff * abs(expected) - (terms + 1) * fp32.smallest_subnormal
                          - fp16.smallest_subnormal) / (2 * (terms + 2) * fp32.unit_roundoff))
            error = abs(got - expected)
            print(f"{Path(log).name}: {M}x{K}x{N} C[{row}, {col}] |err| {error:.4g}, fp32 bound {bound:.4g}, "
                  f"|err|/condition {error / condition:.2e}, e4m3 bound {bound + 2.0 ** -bits * condition:.4g}")


def spec_at(M: int, K: int, N: int):
    return parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": M, "K": K, "N": N,
                       "dtype": "fp8_e4m3", "arch": "sm_90a"})


def cublaslt(problem, fast: bool) -> np.ndarray:
    """Dense fp8 cuBLASLt's C (fp16 out) for a 2:4 problem, as float64."""
    import cupy as cp
    import torch

    gemm = sparse24_gemm(problem)
    a = torch.from_dlpack(cp.asarray(dense_a(gemm, problem, problem.inputs))).view(torch.float8_e4m3fn)
    bt = torch.from_dlpack(cp.asarray(np.ascontiguousarray(problem.inputs["B"].T))).view(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    out = torch._scaled_mm(a, bt.t(), one, one, out_dtype=torch.float16, use_fast_accum=fast)
    return to_float64(cp.asarray(out.view(torch.float16)).get(), "fp16")


def load_sequence(spec, params: dict[str, int]):
    """(candidate, loaded module, resources) of sp24_wgmma_sp_fp8 with `params`."""
    import cupy as cp

    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.tools.runner import device_info
    from sparseditto.tools.verifier import compile_candidate

    candidate = get_kernel("sp24_wgmma_sp_fp8").instantiate(params)
    compiled, feedback = compile_candidate(candidate, spec, device_info()["arch"])
    if not compiled.ok:
        raise SystemExit(f"{candidate.label()}: {feedback.message}")
    # the harness's launcher takes a RawModule (its functions carry the CUfunction it launches by), which loads from a file
    cubin = Path(tempfile.mkdtemp(prefix="fp8_sequence_")) / "sequence.cubin"
    cubin.write_bytes(compiled.cubin)
    return candidate, cp.RawModule(path=str(cubin)), compiled.resources


def fp16_sum(problem) -> np.ndarray:
    """C with every product added into an fp16 running sum in K order (a cheaper accumulation the bound should
    refuse), as float64."""
    gemm = sparse24_gemm(problem)
    a = to_float64(dense_a(gemm, problem, problem.inputs), "fp8_e4m3")
    b = to_float64(problem.inputs["B"], "fp8_e4m3")
    total = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k in range(a.shape[1]):
        total = (total + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float16)).astype(np.float16)
    return total.astype(np.float64)


def small_k(out_json: str) -> None:
    """The kernel and the library at small K (module docstring), same problems, judged the same way."""
    import cupy as cp

    from sparseditto.agents.planner import offline_plan
    from sparseditto.tools.runner import Launcher, device_info

    family = get_family("sparse24_gemm")
    spec = spec_at(SMALL_M, max(SMALL_K), SMALL_N)
    start = next(s.start for s in offline_plan(spec).strategies if s.kernel == "sp24_wgmma_sp_fp8")
    kernels = {}
    rows = []
    for promote in PROMOTE:
        kernels[f"kernel_promote{promote}"] = load_sequence(spec, {**start, "PROMOTE": promote})
    for K in SMALL_K:
        worst: dict[str, list[float]] = {}
        for seed in range(SEEDS):
            problem = family.make_problem(spec, 7000 + 31 * K + seed, {"M": SMALL_M, "K": K, "N": SMALL_N})
            ref = family.reference(problem)["C"]
            condition, terms = family.conditions(problem)["C"], family.element_terms(problem)["C"]
            fp32_bound = element_bound(ref, condition, terms, "fp32", "fp16").bound
            outs = {"cublaslt": cublaslt(problem, False), "cublaslt_fast": cublaslt(problem, True)}
            if seed < FP16_SUM_SEEDS:  # a few seconds a problem on the host
                outs["host_fp16_sum"] = fp16_sum(problem)
            for name, (candidate, module, resources) in kernels.items():
                launcher = Launcher(candidate, module, problem, family, device_info(), resources)
                launcher.poison()
                launcher.run()
                cp.cuda.get_current_stream().synchronize()
                outs[name] = launcher.results()["C"]
            with np.errstate(divide="ignore", invalid="ignore"):
                for name, got in outs.items():
                    err = np.abs(got - ref)
                    ratio = np.where(condition > 0, err / condition, 0.0)
                    beyond = np.where(condition > 0, (err - fp32_bound) / condition, 0.0)
                    norm = rel_error(got, ref)
                    old = worst.setdefault(name, [0.0, -np.inf, 0.0])
                    worst[name] = [max(old[0], float(np.nanmax(ratio))), max(old[1], float(np.nanmax(beyond))),
                                   max(old[2], norm)]
        for name, (ratio, beyond, norm) in worst.items():
            rows.append({"M": SMALL_M, "K": K, "N": SMALL_N, "product": name,
                         "seeds": FP16_SUM_SEEDS if name == "host_fp16_sum" else SEEDS,
                         "max_error_over_condition": ratio, "max_beyond_fp32_bound_over_condition": beyond,
                         "max_norm_rel_error": norm})
            print(f"K={K:5} {name:14} max |err|/condition {ratio:.2e}  max (|err| - fp32 bound)/condition "
                  f"{beyond:+.2e}  (2^-10 = {2.0 ** -10:.2e})  largest norm-wise {norm:.2e}", flush=True)
    with open(out_json, "w") as f:
        json.dump({"kernels": {name: k[0].label() for name, k in kernels.items()}, "rows": rows}, f, indent=1)


def main() -> None:
    if sys.argv[1:2] == ["--from-logs"]:
        worst_elements(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--small-k"]:
        small_k(sys.argv[2])
        return
    family = get_family("sparse24_gemm")
    rows = []
    for M, K, N in SHAPES:
        spec = spec_at(M, K, N)
        problem = family.make_problem(spec, seed=1234 + M + K + N)
        ref = family.reference(problem)["C"]
        condition, terms = family.conditions(problem)["C"], family.element_terms(problem)["C"]
        fp32_bound = element_bound(ref, condition, terms, "fp32", "fp16").bound
        bound = element_bound(ref, condition, terms, "fp32", "fp16",
                              aligned_sum_bits=problem.outputs["C"].aligned_sum_bits).bound  # the family's
        for fast in (False, True):
            got = cublaslt(problem, fast)
            err = np.abs(got - ref)
            row = {"M": M, "K": K, "N": N, "use_fast_accum": fast, "elements": int(ref.size),
                   "past_fp32_bound": int((err > fp32_bound).sum()), "max_error_over_fp32_bound": float((err / fp32_bound).max()),
                   "past_family_bound": int((err > bound).sum()), "max_error_over_family_bound": float((err / bound).max()),
                   "max_error_over_condition": float((err / condition).max()),
                   "norm_rel_error": rel_error(got, ref)}
            rows.append(row)
            print(f"{M}x{K}x{N} fast_accum={fast!s:5}  past fp32 bound {row['past_fp32_bound']:>7} "
                  f"(max {row['max_error_over_fp32_bound']:6.3f})  past family bound {row['past_family_bound']:>7} "
                  f"(max {row['max_error_over_family_bound']:6.3f})  of {row['elements']:>9}  max |err|/condition "
                  f"{row['max_error_over_condition']:.2e}  norm-wise {row['norm_rel_error']:.2e}", flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

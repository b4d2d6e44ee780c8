"""How far dense fp8 cuBLASLt (torch._scaled_mm) stays from the family's per-element bound for fp32 accumulation.

The 2:4 family holds every element of C to the error its own terms allow when K/2 exact products are summed in fp32
(`element_bound`). e4m3 tensor-core instructions keep less than fp32 in their running sum, so a kernel that leaves
the whole K in the instruction's accumulator misses that bound on some elements (measured on the H200 in session 13).
This prints, on the family's own problems (the verifier's values: runs of scales, subnormals), how the vendor's
product does with its default promotion (use_fast_accum=False) and without it (True): elements past the plain fp32
bound and past the family's (which adds 2^-ALIGNED_SUM_BITS of the condition for e4m3), the largest ratios, the
largest |C - ref| / condition, and the norm-wise error. GPU and torch required.
`--from-logs LOG...` (no GPU): the worst elements that GPU test logs recorded, against their conditions.

    python3 bench/fp8_accumulation.py [OUT_JSON]
    python3 bench/fp8_accumulation.py --from-logs evals/results/issue15_h200/gpu_tests_fp8_session13_*.txt
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from sparseditto.spec import parse_spec
from sparseditto.tools.baselines.sparse24_dense import dense_a, sparse24_gemm
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.sparse24_gemm import ALIGNED_SUM_BITS
from sparseditto.tools.values import element_bound, numerics

SHAPES = [(1024, 1024, 64), (528, 1088, 400), (4096, 4096, 4096), (8192, 8192, 8192)]


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


def main() -> None:
    if sys.argv[1:2] == ["--from-logs"]:
        worst_elements(sys.argv[2:])
        return
    import cupy as cp
    import torch

    family = get_family("sparse24_gemm")
    rows = []
    for M, K, N in SHAPES:
        spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": M, "K": K, "N": N,
                           "dtype": "fp8_e4m3", "arch": "sm_90a"})
        problem = family.make_problem(spec, seed=1234 + M + K + N)
        ref = family.reference(problem)["C"]
        condition, terms = family.conditions(problem)["C"], family.element_terms(problem)["C"]
        fp32_bound = element_bound(ref, condition, terms, "fp32", "fp16").bound
        bound = element_bound(ref, condition, terms, "fp32", "fp16",
                              aligned_sum_bits=problem.outputs["C"].aligned_sum_bits).bound  # the family's
        gemm = sparse24_gemm(problem)
        a = torch.from_dlpack(cp.asarray(dense_a(gemm, problem, problem.inputs))).view(torch.float8_e4m3fn)
        bt = torch.from_dlpack(cp.asarray(np.ascontiguousarray(problem.inputs["B"].T))).view(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        for fast in (False, True):
            out = torch._scaled_mm(a, bt.t(), one, one, out_dtype=torch.float16, use_fast_accum=fast)
            got = to_float64(cp.asarray(out.view(torch.float16)).get(), "fp16")
            err = np.abs(got - ref)
            row = {"M": M, "K": K, "N": N, "use_fast_accum": fast, "elements": int(ref.size),
                   "past_fp32_bound": int((err > fp32_bound).sum()), "max_error_over_fp32_bound": float((err / fp32_bound).max()),
                   "past_family_bound": int((err > bound).sum()), "max_error_over_family_bound": float((err / bound).max()),
                   "max_error_over_condition": float((err / condition).max()),
                   "norm_rel_error": float(np.linalg.norm(got - ref) / np.linalg.norm(ref))}
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

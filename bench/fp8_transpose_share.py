"""Where the e4m3 2:4 sequence's time goes at 8192^3: the transposition of B and the product, apart and together,
for each PROMOTE of the planner's start, beside dense fp8 cuBLASLt's own two steps (torch's copy of B^T, then torch._scaled_mm) and a plain device copy of the
same bytes (the transposition's floor: K x N bytes read and written). Each timed with the harness's time_call and L2
flush; the sequence's C is checked against the float64 reference norm-wise (the verifier judges it element-wise).

    [FP8_PROMOTE=1,2,4] python3 bench/fp8_transpose_share.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import cupy as cp

from sparseditto.agents.planner import offline_plan
from sparseditto.spec import parse_spec
from sparseditto.tools.baselines.sparse24_dense import dense_a, sparse24_gemm
from sparseditto.tools.correctness import rel_error
from sparseditto.tools.families import get_family
from sparseditto.tools.runner import Launcher, device_info
from sparseditto.tools.timing import L2Flusher, time_call
from fp8_accumulation import load_sequence  # the sibling bench script (run from bench/)

SIZE = 8192
PROMOTE = tuple(int(v) for v in os.environ.get("FP8_PROMOTE", "1,2,4").split(","))  # ncu8 takes one


def main(out_json: str) -> None:
    import torch

    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": SIZE, "K": SIZE, "N": SIZE,
                       "dtype": "fp8_e4m3", "arch": "sm_90a"})
    family = get_family(spec.family)
    start = next(s.start for s in offline_plan(spec).strategies if s.kernel == "sp24_wgmma_sp_fp8")
    problem = family.make_problem(spec, seed=5)
    ref = family.reference(problem)["C"]
    flush = L2Flusher()
    rows, errors = [], {}
    stream = cp.cuda.get_current_stream().ptr
    for promote in PROMOTE:
        candidate, module, resources = load_sequence(spec, {**start, "PROMOTE": promote})
        launcher = Launcher(candidate, module, problem, family, device_info(), resources)
        transpose, product = launcher.launches
        launcher.run()
        cp.cuda.Device().synchronize()
        errors[candidate.label()] = rel_error(launcher.results()["C"], ref)
        steps = {f"PROMOTE {promote}: sequence (transposition + product)": launcher.run,
                 f"PROMOTE {promote}: product alone (sp24_wgmma_sp)": lambda: product(stream)}
        if promote == PROMOTE[0]:
            steps["transposition alone (sp24w_transpose_b)"] = lambda: transpose(stream)
        for name, run in steps.items():
            t = time_call(run, flush, warmup=5, runs=30)
            rows.append({"step": name, "median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us})
        b, bt = launcher.arrays["B"], launcher.arrays["Bt"]
        bt_ok = bool(cp.array_equal(bt.reshape(SIZE, SIZE), b.reshape(SIZE, SIZE).T))
    copy_dst = cp.empty_like(b)
    gemm = sparse24_gemm(problem)
    a_t = torch.from_dlpack(cp.asarray(dense_a(gemm, problem, problem.inputs))).view(torch.float8_e4m3fn)
    b_t = torch.from_dlpack(b).view(torch.float8_e4m3fn).view(SIZE, SIZE)
    bt_t = torch.empty((SIZE, SIZE), dtype=torch.float8_e4m3fn, device="cuda")
    one = torch.ones((), device="cuda", dtype=torch.float32)
    c_t = torch.empty((SIZE, SIZE), dtype=torch.float16, device="cuda")
    b2 = b.reshape(SIZE, SIZE)
    steps = {
        "device copy of K x N bytes (floor)": lambda: cp.copyto(copy_dst, b),
        "torch B^T copy_ (cuBLASLt baseline's step)": lambda: bt_t.copy_(b_t.t()),
        "cupy copyto of B.T (cuSPARSELt baseline's step)": lambda: cp.copyto(copy_dst.reshape(SIZE, SIZE), b2.T),
        "torch._scaled_mm alone (B^T ready)": lambda: torch._scaled_mm(a_t, bt_t.t(), one, one,
                                                                       out_dtype=torch.float16, out=c_t),
    }
    for name, run in steps.items():
        t = time_call(run, flush, warmup=5, runs=30)
        rows.append({"step": name, "median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us})
    Path(out_json).write_text(json.dumps({"size": SIZE, "sequence_rel_errors": errors,
                                          "bt_equals_b_transposed": bt_ok, "rows": rows}, indent=1))
    for label, error in errors.items():
        print(f"{label}: norm-wise error {error:.2e}")
    print(f"Bt == B^T: {bt_ok}")
    bytes_moved = 2 * SIZE * SIZE
    for r in rows:  # bandwidth only for the steps that move B's bytes and nothing else
        moves_b = "transposition" in r["step"] or "copy" in r["step"]
        rate = f"  ({bytes_moved / r['median_us'] * 1e-6:6.2f} TB/s at 2 K N bytes)" if moves_b else ""
        print(f"{r['step']:55s} {r['median_us']:9.1f} us{rate}")


if __name__ == "__main__":
    main(sys.argv[1])

"""Correctness of chosen kernel variants on held-out shapes (not multiples of any tile): poisoned output,
fresh seeds, inputs must stay unchanged. Run on the GPU machine: `python bench/check_heldout.py`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import cupy as cp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import load_spec
from sparseditto.tools.compiler import DTYPE_CODES, compile_source
from sparseditto.tools.families import FAMILIES
from sparseditto.tools.runner import Launcher, device_info, rel_error

CASES = [
    ("examples/spmv_fp32_uniform.yaml", "spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 1}),
    ("examples/spmv_fp32_uniform.yaml", "spmv_csr_vec4", {"GROUP": 2, "UNROLL": 2, "BLOCK": 256, "HINT": 0, "XL": 0}),
    ("examples/spmv_fp32_powerlaw.yaml", "spmv_csr_split_vec4",
     {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "LONG_ROW": 64, "CHUNK": 2048}),
    ("examples/spmv_fp32_powerlaw.yaml", "spmv_csr_split_vec4",
     {"GROUP": 2, "UNROLL": 1, "BLOCK": 128, "HINT": 0, "LONG_ROW": 32, "CHUNK": 256}),
    ("examples/spmm_fp32_5pct.yaml", "spmm_csr_rowsplit_pf", {"VW": 8, "WARPS": 4, "UNROLL": 8, "CVT": 0}),
    ("examples/spmm_fp16_1pct.yaml", "spmm_csr_rowsplit_pf", {"VW": 8, "WARPS": 4, "UNROLL": 16, "CVT": 1}),
    ("examples/spmm_fp16_5pct.yaml", "spmm_csr_rowsplit_pf", {"VW": 4, "WARPS": 4, "UNROLL": 8, "CVT": 1}),
    ("examples/spmm_fp16_5pct.yaml", "spmm_csr_rowsplit_pf", {"VW": 1, "WARPS": 4, "UNROLL": 4, "CVT": 1}),
]


def main() -> int:
    info = device_info()
    tmp = Path(tempfile.mkdtemp())
    failures = 0
    for i, (path, name, params) in enumerate(CASES):
        spec = load_spec(path)
        family = FAMILIES[spec.family]
        cand = get_kernel(name).instantiate(params)
        res = compile_source(cand.source, info["arch"], cand.defines(DTYPE_CODES[spec.dtype]))
        if not res.ok:
            print("COMPILE ERROR", name, params, res.log[-800:])
            failures += 1
            continue
        cubin = tmp / f"{i}.cubin"
        cubin.write_bytes(res.cubin)
        module = cp.RawModule(path=str(cubin))
        shapes = family.held_out_shapes(spec)
        if spec.family == "csr_spmm":
            shapes = shapes + [{"M": 2051, "K": 2053, "N": 253}, {"M": 37, "K": 41, "N": 7}]
        for j, shape in enumerate(shapes):
            problem = family.make_problem(spec, 777 + j, shape)
            launcher = Launcher(cand, module, problem, info["sms"])
            launcher.poison()
            launcher.run()
            cp.cuda.Device().synchronize()
            err, bad = rel_error(launcher.result(), family.reference(problem))
            ok = err <= family.tolerance(spec.dtype) and launcher.inputs_unchanged()
            failures += not ok
            print(f"{'OK ' if ok else 'BAD'} {spec.name:20s} {cand.label():70s} {shape} err {err:.1e} unwritten {bad}", flush=True)
            del launcher
    print("HELDOUT FAILURES", failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

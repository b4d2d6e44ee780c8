"""Times reference-kernel parameter variants and every baseline configuration on the issue's specs.

Run on the GPU machine: `python bench/explore_kernels.py OUT_DIR [SPEC ...]`. It prints one table
(candidate variants and baselines per spec, with correctness) and writes the full rows as JSON. It is
how the planner's starting parameters and parameter spaces were chosen; see bench/NOTES.md.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import cupy as cp
import numpy as np

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import load_spec
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.baselines import baseline_calls
from sparseditto.tools.families import get_family
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.correctness import rel_error
from sparseditto.tools.runner import Launcher, device_info
from sparseditto.tools.timing import L2Flusher, device_copy_bandwidth, time_call

ROOT = Path(__file__).resolve().parents[1]


def variants(spec) -> list[tuple[str, dict[str, int]]]:
    """The variants timed per spec: the best ones found so far plus near neighbours (see bench/NOTES.md)."""
    out = []
    if spec.family == "sparse24_gemm":
        if spec.N <= 64:
            for mt, nt, warps, u in ((2, 2, 8, 2), (1, 2, 8, 2), (2, 2, 4, 4), (4, 2, 8, 1)):
                out.append(("sp24_skinny", {"MT": mt, "NT": nt, "WARPS": warps, "UNROLL": u}))
            return out
        out.append(("sp24_mma_sp", {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 4}))
        # last: the Hopper kernel has not run before, and a hang must not cost the rows above
        for bm, bn, bk, stages in ((128, 256, 64, 4), (128, 256, 64, 5), (256, 128, 64, 5), (128, 128, 64, 6),
                                   (128, 128, 128, 4), (256, 64, 64, 6)):
            out.append(("sp24_wgmma_sp", {"BM": bm, "BN": bn, "BK": bk, "STAGES": stages}))
        return out
    if spec.family == "csr_spmv":
        skewed = getattr(spec.pattern, "distribution", "") == "power_law"
        if not skewed:
            out.append(("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}))
        else:
            for g, ch in ((4, 4096), (8, 4096), (4, 2048)):
                out.append(("spmv_csr_split_vec4", {"GROUP": g, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "LONG_ROW": 64, "CHUNK": ch}))
        return out
    wide, unroll = (4, 8) if spec.dtype == "fp32" else (8, 4)
    out.append(("spmm_csr_rowsplit", {"VW": wide, "WARPS": 4, "UNROLL": unroll}))
    for lpr, warps, rpg, kc, u in ((8, 32, 1, 512, 4),):
        out.append(("spmm_csr_smem_tile", {"LPR": lpr, "WARPS": warps, "RPG": rpg, "KC": kc, "UNROLL": u}))
    if spec.dtype != "fp32":
        for mt, wn, wk, kb in ((8, 1, 1, 4), (4, 4, 1, 1), (4, 4, 1, 2), (4, 4, 2, 1), (4, 4, 2, 2), (8, 2, 1, 2),
                               (8, 2, 2, 1), (8, 2, 2, 2), (4, 2, 1, 2), (16, 1, 2, 1)):
            out.append(("spmm_csr_tc_rowgroup", {"MT": mt, "WN": wn, "WK": wk, "KB": kb}))
    return out


def main(out_dir: str, spec_paths: list[str]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = device_info()
    flush = L2Flusher()
    copy_bw = device_copy_bandwidth(flush)
    print(f"device {info}  copy bandwidth {copy_bw / 1e12:.2f} TB/s", flush=True)
    rows = []
    tmp = Path(tempfile.mkdtemp())
    for path in spec_paths:
        spec = load_spec(path)
        family = get_family(spec.family)
        problem = family.make_problem(spec, seed=12345)
        (ref,) = family.reference(problem).values()
        tol = family.tolerance(spec.dtype)
        floor_us = family.min_bytes(problem.symbols, spec.dtype) / copy_bw * 1e6
        print(f"\n== {spec.name}: {problem.symbols} floor {floor_us:.1f} us", flush=True)
        first = None
        for name, params in variants(spec):
            cand = get_kernel(name).instantiate(params)
            res = compile_source(cand.source, cand.compile_arch(info["arch"]), cand.defines(dtype_info(spec.dtype).code))
            row = {"spec": spec.name, "kind": "candidate", "name": cand.label(), "floor_us": floor_us}
            if not res.ok:
                row.update(error=res.log[-500:])
                rows.append(row)
                print(f"  {cand.label():70s} COMPILE ERROR", flush=True)
                continue
            cubin = tmp / f"{len(rows)}_{name}.cubin"
            cubin.write_bytes(res.cubin)
            module = cp.RawModule(path=str(cubin))
            launcher = Launcher(cand, module, problem, info["sms"])
            launcher.poison()
            launcher.run()
            cp.cuda.Device().synchronize()
            err = rel_error(launcher.result(), ref)
            t = time_call(launcher.run, flush, runs=30)
            regs = {k: v.registers for k, v in res.resources.items()}
            row.update(us=t.median_us, p10=t.p10_us, p90=t.p90_us, rel_error=err, ok=err <= tol, regs=regs,
                       prep_ms=launcher.preparation_ms)
            rows.append(row)
            print(f"  {cand.label():70s} {t.median_us:9.1f} us  err {err:.1e} {'OK' if err <= tol else 'WRONG'} regs {regs}", flush=True)
            if first is None:
                first = launcher
            else:
                del launcher
        device_inputs = {k: first.arrays[k] for k in problem.inputs}
        for call in baseline_calls(spec.family, spec.baselines, problem, device_inputs):
            call.run()
            cp.cuda.Device().synchronize()
            err = rel_error(to_float64(call.output.get(), spec.dtype), ref)
            t = time_call(call.run, flush, runs=30)
            rows.append({"spec": spec.name, "kind": "baseline", "name": call.name, "library": call.library,
                         "config": call.config, "us": t.median_us, "rel_error": err, "floor_us": floor_us})
            print(f"  BASE {call.name:65s} {t.median_us:9.1f} us  err {err:.1e}", flush=True)
        del first
        cp.get_default_memory_pool().free_all_blocks()
        # after every spec, so that a run cut off by its time limit keeps the specs it finished
        (out / "explore.json").write_text(json.dumps({"device": info, "copy_bandwidth": copy_bw, "rows": rows}, indent=1))
    print("\nSUMMARY (best correct candidate vs best baseline)")
    for spec_name in dict.fromkeys(r["spec"] for r in rows):
        cands = [r for r in rows if r["spec"] == spec_name and r["kind"] == "candidate" and r.get("ok")]
        bases = [r for r in rows if r["spec"] == spec_name and r["kind"] == "baseline" and r["rel_error"] < 1e-2]
        bc = min(cands, key=lambda r: r["us"]) if cands else None
        bb = {}
        for r in bases:
            if r["library"] not in bb or r["us"] < bb[r["library"]]["us"]:
                bb[r["library"]] = r
        line = f"{spec_name:28s} best {bc['name'] if bc else '-':60s} {bc['us'] if bc else float('nan'):8.1f} us"
        for lib, r in bb.items():
            line += f" | {lib} {r['us']:.1f} ({r['name']})"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

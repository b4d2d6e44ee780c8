"""Times reference-kernel parameter variants and every baseline configuration on the issue's specs.

Run on the GPU machine: `python bench/explore_kernels.py OUT_DIR [SPEC ...]`. Each variant goes through the
pipeline's verifier (without sanitizer and profiler), all of a spec's variants in one runner process with the
baselines timed once (EXPLORE_AHEAD=0: each alone); it prints one line per variant and a summary, and writes the
full rows, every baseline configuration included, as JSON. It is
how the planner's starting parameters and parameter spaces were chosen; see bench/NOTES.md.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import load_spec
from sparseditto.tools.device import detect
from sparseditto.tools.families import get_family
from sparseditto.tools.families.csr_spmm import rowgroup_lanes_and_slabs, rowsplit_lanes
from sparseditto.tools.verifier import GpuVerifier


def variants(spec) -> list[tuple[str, dict[str, int]]]:
    """The variants timed per spec: the best ones found so far plus near neighbours (see bench/NOTES.md)."""
    out = []
    if spec.family == "sparse24_gemm":
        if spec.N <= 64:
            # the register-streaming kernel's best (53.5 us at the decode shape), then the cp.async-ring stream: two
            # K slices of 16 warps x 2 pairs with 4 and 3 stages, four slices at 2 blocks per SM, 32-row tiles with
            # 2 stages, and six shallow stages of one pair per warp
            out.append(("sp24_skinny", {"MT": 2, "NT": 2, "WARPS": 8, "UNROLL": 2}))
            for mt, warps, up, stages, bps in ((1, 16, 2, 4, 1), (1, 16, 2, 3, 1), (1, 8, 2, 4, 2), (2, 16, 2, 2, 1),
                                               (1, 16, 1, 6, 1)):
                out.append(("sp24_stream", {"MT": mt, "NT": 2, "WARPS": warps, "UP": up, "STAGES": stages, "BPS": bps}))
            return out
        if os.environ.get("SP24_TILED", "1") == "1":
            out.append(("sp24_mma_sp", {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 4}))
        if spec.dtype == "fp8_e4m3":
            # the e4m3 sequence, promoted: products added every 2 instructions (726 us at 8192^3 in session 14), every
            # instruction (951 us) and every 4 (913 us), the start launched per tile; then 256 x 128 tiles with one
            # scratch array (SCRATCH 1: each group retired before the next; 31% fewer bytes from L2 per product), at
            # k-tiles of 128 and 256 (1126 and 828 us in session 15: slower); a group carried across pairs of k-tiles
            # (INFLIGHT 1, 773 us) is not kept
            for bm, bn, bk, stages, persist, promote, scratch in ((128, 128, 256, 4, 1, 2, 2), (128, 128, 256, 4, 1, 1, 2),
                                                                  (128, 128, 256, 4, 1, 4, 2), (128, 128, 256, 4, 0, 2, 2),
                                                                  (256, 128, 128, 6, 1, 2, 1), (256, 128, 256, 3, 1, 2, 1)):
                out.append(("sp24_wgmma_sp_fp8", {"BM": bm, "BN": bn, "BK": bk, "STAGES": stages, "LAG": 1,
                                                  "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8,
                                                  "PERSIST": persist, "CONSUMERS": 2, "PROMOTE": promote,
                                                  "SCRATCH": scratch}))
            return out
        # last: a hang of the Hopper kernel must not cost the rows above. The planner's start (256 x 128 x 128, B by
        # TMA, tile rows in bands of 8), then A shared by a 2-block cluster's multicast now that B goes by TMA (session 9
        # measured CLUSTER 2 only with B by cp.async), at k-tiles of 128 and 64 and at 128 x 256; then session 10's
        # persistent variant and session 9's best in launch order; last session 11's 192 x 256 tiles on three consumer
        # warpgroups, launched and persistent (no faster than the start; bench/NOTES.md)
        wgmma = ((256, 128, 128, 3, 1, 1, 0, 1, 8, 0, 2), (256, 128, 128, 3, 1, 2, 0, 1, 8, 0, 2),
                 (256, 128, 64, 6, 2, 2, 0, 1, 8, 0, 2), (128, 256, 64, 5, 1, 2, 0, 1, 8, 0, 2),
                 (256, 128, 128, 3, 1, 1, 0, 1, 8, 1, 2), (256, 128, 128, 3, 1, 1, 0, 1, 1, 0, 2),
                 (192, 256, 64, 4, 1, 1, 0, 1, 8, 0, 3), (192, 256, 64, 4, 1, 1, 0, 1, 8, 1, 3))
        for bm, bn, bk, stages, lag, cluster, inflight, btma, raster, persist, consumers in wgmma[:int(os.environ.get("SP24_WGMMA", str(len(wgmma))))]:
            out.append(("sp24_wgmma_sp", {"BM": bm, "BN": bn, "BK": bk, "STAGES": stages, "LAG": lag, "CLUSTER": cluster,
                                          "INFLIGHT": inflight, "BTMA": btma, "RASTER": raster, "PERSIST": persist,
                                          "CONSUMERS": consumers}))
        return out
    if spec.family == "csr_spmv" and os.environ.get("SPMV_SWEEP") == "1":
        # every row-walk form on the matrices where merge path lost to cuSPARSE's row-based CSR_ALG1 (session 15):
        # which form, if any, beats it there, to check the cost model's ranking against measurement
        out += [("spmv_merge_path", {"BLOCK": b, "ITEMS": i, "HINT": 1, "EARLY": e})
                for b, i, e in ((256, 8, 0), (256, 8, 1), (256, 4, 0), (128, 4, 0), (512, 8, 0))]
        out += [("spmv_csr_vec4", {"GROUP": g, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}) for g in (1, 2, 4, 8, 16, 32)]
        out += [("spmv_csr_split_vec4", {"GROUP": g, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "LONG_ROW": lr, "CHUNK": ch,
                                         "EARLY": e})
                for g, lr, ch, e in ((4, 64, 4096, 0), (4, 64, 4096, 1), (2, 64, 4096, 0), (8, 64, 4096, 0),
                                     (4, 256, 1024, 0), (2, 128, 2048, 0))]
        out += [("spmv_sell_c_sigma", {"C": c, "SIGMA": sigma, "BLOCK": 256}) for c, sigma in ((32, 1024), (32, 16384), (16, 4096))]
        # RCM renumbering (session 18, not yet measured): does a banded order beat the gathers of a scattered one
        out += [("spmv_csr_rcm", {"GROUP": g, "UNROLL": 2, "BLOCK": 256}) for g in (1, 2, 4)]
        return out
    if spec.family == "csr_spmv":
        skewed = getattr(spec.pattern, "distribution", "") == "power_law"
        if not skewed:
            out.append(("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}))
        else:
            for g, ch in ((4, 4096), (8, 4096), (4, 2048)):
                out.append(("spmv_csr_split_vec4", {"GROUP": g, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "LONG_ROW": 64,
                                                    "CHUNK": ch, "EARLY": 0}))
        return out
    wide, unroll = (4, 8) if spec.dtype == "fp32" else (8, 4)
    lanes = rowsplit_lanes(spec.N, wide)
    out.append(("spmm_csr_rowsplit", {"VW": wide, "LANES": lanes, "WARPS": 4, "UNROLL": unroll}))
    # long rows in chunks (session 19, not yet measured): the planner's start and chunks half as long
    out += [("spmm_csr_split", {"VW": wide, "LANES": lanes, "WARPS": 4, "UNROLL": unroll, "LONG_ROW": lr, "CHUNK": ch})
            for lr, ch in ((256, 1024), (128, 512))]
    group_lanes, slabs = rowgroup_lanes_and_slabs(spec.N, wide)
    if os.environ.get("SPMM_SWEEP") == "rows":
        # 16-row groups beside 8-row groups at the layouts that won with 8 (session 19's sweep): the 16-row question
        # alone, in a quarter of the full grid's time
        layouts = ((group_lanes, slabs, 4), (group_lanes, slabs, 2), (32, 1, 4), (8, 1, 4))
        return out + [("spmm_csr_rowgroup", {"VW": wide, "LANES": ln, "SLABS": sl, "UNROLL": 2, "WARPS": w, "ROWS": r})
                      for r in (8, 16) for ln, sl, w in dict.fromkeys(layouts)]
    if os.environ.get("SPMM_SWEEP") == "1":
        # row groups sharing out their union (session 19): lanes a piece (so subsets a group), slabs a warp, unroll and
        # warps a block around the planner's start; the planner's start first, the big-K shared-memory tile left out
        grid = [(group_lanes, slabs, 2, 4)] + [(ln, sl, u, w) for ln in (4, 8, 16, 32) for sl in (1, 2, 4)
                                               for u, w in ((2, 4), (4, 8))
                                               if (ln, sl, u, w) != (group_lanes, slabs, 2, 4)]
        out += [("spmm_csr_rowgroup", {"VW": wide, "LANES": ln, "SLABS": sl, "UNROLL": u, "WARPS": w, "ROWS": 8})
                for ln, sl, u, w in grid]  # main() skips the choices the kernel's constraints refuse
        # groups of 16 rows (session 19, not yet measured) at the layouts that won with 8
        out += [("spmm_csr_rowgroup", {"VW": wide, "LANES": ln, "SLABS": sl, "UNROLL": 2, "WARPS": w, "ROWS": 16})
                for ln, sl, w in ((group_lanes, slabs, 4), (group_lanes, slabs, 2), (32, 1, 4), (8, 1, 4))]
        return out
    for warps, u in ((4, 2), (8, 2), (8, 4)):
        out.append(("spmm_csr_rowgroup", {"VW": wide, "LANES": group_lanes, "SLABS": slabs, "WARPS": warps, "UNROLL": u,
                                          "ROWS": 8}))
    for lpr, warps, rpg, kc, u in ((8, 32, 1, 512, 4),):
        out.append(("spmm_csr_smem_tile", {"LPR": lpr, "WARPS": warps, "RPG": rpg, "KC": kc, "UNROLL": u}))
    if spec.dtype != "fp32":
        for mt, wn, wk, kb in ((8, 1, 1, 4), (4, 4, 1, 1), (4, 4, 1, 2), (4, 4, 2, 1), (4, 4, 2, 2), (8, 2, 1, 2),
                               (8, 2, 2, 1), (8, 2, 2, 2), (4, 2, 1, 2), (16, 1, 2, 1)):
            out.append(("spmm_csr_tc_rowgroup", {"MT": mt, "WN": wn, "WK": wk, "KB": kb}))
    return out


AHEAD = os.environ.get("EXPLORE_AHEAD", "1") == "1"


def main(out_dir: str, spec_paths: list[str]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arch = (detect().gpu or {}).get("arch", "sm_90")
    # the pipeline's own harness (fresh inputs, held-out shapes, every run checked, every baseline configuration
    # timed beside it), without the sanitizer and the profiler
    verifier = GpuVerifier(arch=arch, trials=2, timeout_s=180, runs=20, sanitize=False, profile=False)
    rows = []
    for path in spec_paths:
        spec = load_spec(path)
        print(f"\n== {spec.name}", flush=True)
        symbols = get_family(spec.family).symbols(spec)
        candidates = []
        for name, params in variants(spec):  # the planner never proposes a variant its kernel's constraints refuse
            if broken := get_kernel(name).violated(params, symbols, spec.dtype):
                print(f"  {name}{params}: skipped, breaks {broken}", flush=True)
            else:
                candidates.append(get_kernel(name).instantiate(params))
        for i, cand in enumerate(candidates):
            # the first variant's runner process runs the others too (one input draw, the baselines timed once); a
            # variant that ends that process early, and those after it, run alone on their turn
            report = verifier.verify(cand, spec, ahead=candidates[1:] if i == 0 and AHEAD else ())
            m = report.measurement
            problems = [f"{f.stage}: {f.message[:160]}" for f in report.feedback if f.status in {"failed", "error"}]
            row = {"spec": spec.name, "candidate": cand.label(), "correct": report.correct,
                   "us": m.median_us if m else None, "gflops": m.achieved_gflops if m else None,
                   "peak_gflops": m.peak_gflops if m else None, "best_baseline": m.best_baseline if m else None,
                   "best_baseline_us": m.best_baseline_us if m else None, "speedups": m.speedups if m else {},
                   "registers": {k: r.registers for k, r in report.resources.items()}, "problems": problems,
                   "baselines": [b.model_dump() for b in report.baselines]}
            rows.append(row)
            line = f"  {cand.label():62s} "
            line += (f"{m.median_us:9.1f} us {m.achieved_gflops / 1e3:7.1f} TFLOP/s  best {m.best_baseline} "
                     f"{m.best_baseline_us:.1f} us  x{m.speedup_vs_best or 0:.2f}") if m else f"NO TIME {problems[:2]}"
            print(line, flush=True)
            # after every candidate, so that a run cut off by its time limit keeps what it measured
            (out / "explore.json").write_text(json.dumps({"arch": arch, "rows": rows}, indent=1))
    print("\nSUMMARY (best correct candidate; each library's fastest correct configuration)")
    for spec_name in dict.fromkeys(r["spec"] for r in rows):
        mine = [r for r in rows if r["spec"] == spec_name and r["correct"] and r["us"]]
        best = min(mine, key=lambda r: r["us"]) if mine else None
        libs = best["speedups"] if best else {}
        print(f"{spec_name:24s} {best['candidate'] if best else '-':58s} {best['us'] if best else float('nan'):8.1f} us "
              + " ".join(f"{lib} x{v:.2f}" for lib, v in libs.items()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

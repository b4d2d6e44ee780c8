"""Ceiling of Hopper's sparse wgmma (wgmma.mma_async.sp m64nNk32 f16 -> f32) with A and B read from shared memory.

Usage: python3 bench/wgmma_sp_ceiling.py --out $OUT/wgmma_sp_ceiling.json
       python3 bench/wgmma_sp_ceiling.py --quick               (a subset)
       python3 bench/wgmma_sp_ceiling.py --dry-run             (no GPU: every variant compiled for sm_90a, ptxas -v)

Hypothesis under test: one m64nNk32 sparse instruction reads B = 32 x N x 2 bytes and A = 64 x 16 x 2 bytes of shared
memory; at the sparse peak (8192 dense-equivalent flop per clock and SM: N / 2 clocks per instruction) that is
128 + 4096 / N bytes per clock, more than the 128 B/clk shared memory delivers, so the instruction stream alone is
capped near 128 / (128 + 4096 / N) of peak (89% at N = 256, 80% at 128, 67% at 64), lower once TMA-like writes share
the bandwidth. The dense m64n256k16 control needs 72 B/clk at its peak and should come within ~90% of it.

Kernel: bench/wgmma_sp_ceiling.cu (one block per SM; C consumer warpgroups issuing groups of 4 instructions over 4
K-steps, all reading one shared B tile and their own A slab; optionally one writer warp streaming global memory into
shared memory with cp.async.bulk). Reported per case: dense-equivalent TFLOP/s, % of the sparse peak
SMs * 8192 * clock (and of the instruction's own peak: dense = SMs * 4096 * clock), the implied shared-memory read
bytes per clock and SM, the writer's bytes per clock and SM, the SM clock measured in the kernel (clock64 against
%globaltimer), and the 128 B/clk model's prediction.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparseditto.tools.launch_check import max_shared_bytes_per_block

KERNEL_FILE = Path(__file__).resolve().parent / "wgmma_sp_ceiling.cu"
SMEM_LIMIT = max_shared_bytes_per_block("sm_90a")  # bytes of shared memory a block may opt into
FILL_BYTES = 65536 + 3 * 8192  # B region then the three A slabs (WGB_FILL_BYTES)
SMEM_BW = 128.0  # bytes per clock and SM, the hypothesis' shared-memory bandwidth


@dataclass(frozen=True)
class Case:
    sparse: bool
    n: int
    c: int  # consumer warpgroups
    w: int  # writer warp (0 or 1)

    @property
    def name(self) -> str:
        return f"wgb_{'sp' if self.sparse else 'dn'}{self.n}_c{self.c}_w{self.w}"

    @property
    def label(self) -> str:
        shape = f"m64n{self.n}k{32 if self.sparse else 16}"
        return f"{'sparse' if self.sparse else 'dense '} {shape:<10} C={self.c} W={self.w}"

    @property
    def threads(self) -> int:
        return 128 * self.c + 32 * self.w

    @property
    def k(self) -> int:
        return 32 if self.sparse else 16

    @property
    def flop_per_instr(self) -> int:  # dense-equivalent
        return 2 * 64 * self.n * self.k

    @property
    def clocks_per_instr_at_peak(self) -> float:  # sparse: 8192 flop/clk/SM, dense: 4096; both N / 2 clocks
        return self.flop_per_instr / (8192 if self.sparse else 4096)

    @property
    def b_bytes(self) -> int:
        return self.k * self.n * 2

    @property
    def a_bytes(self) -> int:
        return 64 * 16 * 2  # 16 compressed (sparse) or 16 dense values per row

    def macro(self) -> str:
        return f"WGB_KERNEL({self.name}, {self.n}, {self.c}, {self.w}, {int(self.sparse)})"


def buildable(case: Case) -> bool:
    # N = 256 with 3 consumers and the writer: ptxas gives 128 registers (416 threads count as 512), too few
    return not (case.n == 256 and case.c == 3 and case.w == 1)


DEFAULT_CASES = [Case(True, n, c, w) for n in (64, 128, 256) for c in (1, 2, 3) for w in (0, 1)
                 if buildable(Case(True, n, c, w))] + [Case(False, 256, 2, 0), Case(False, 256, 2, 1)]
QUICK_CASES = [Case(True, 256, 2, 0), Case(True, 256, 2, 1), Case(True, 128, 2, 0), Case(True, 64, 2, 0),
               Case(False, 256, 2, 0)]
CASE_RE = re.compile(r"^(sp|dn)(64|128|256)c([123])w([01])$")


def parse_cases(text: str) -> list[Case]:
    cases = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = CASE_RE.match(item)
        if not m:
            raise argparse.ArgumentTypeError(f"case {item!r}: expected like sp256c2w1 or dn256c2w0")
        case = Case(m.group(1) == "sp", int(m.group(2)), int(m.group(3)), int(m.group(4)))
        if not buildable(case):
            raise argparse.ArgumentTypeError(f"case {item!r}: N=256 with 3 consumers and the writer: too few registers")
        cases.append(case)
    if not cases:
        raise argparse.ArgumentTypeError("no case given")
    return cases


def smem_bytes(chunk: int, bufs: int) -> int:
    return 65536 + 3 * 8192 + bufs * chunk + 128 + 1024  # WGB_SMEM_BYTES


def source_for(cases: list[Case]) -> str:
    return KERNEL_FILE.read_text() + "\n// variants of this run\n" + "\n".join(c.macro() for c in cases) + "\n"


def defines(args) -> list[str]:
    return [f"-DWGB_CHUNK={args.chunk_kb * 1024}", f"-DWGB_WBUFS={args.bufs}"]


def compiled(cases: list[Case], args):
    """Every variant of this run compiled for sm_90a by the project's compiler (NVRTC, ptxas -v)."""
    from sparseditto.tools.compiler import compile_source

    result = compile_source(source_for(cases), "sm_90a", defines(args), name="wgmma_sp_ceiling.cu")
    if not result.ok:
        print(result.log, file=sys.stderr)
        raise SystemExit(1)
    return result


# --------------------------------------------------------------------------------------------------------------------
# dry run: compile only


def dry_run(cases: list[Case], args) -> int:
    result = compiled(cases, args)
    # ptxas notes C7504 .. C7520 (wgmma serialised, setmaxnreg ignored) and any warning
    notes = [line.strip() for line in result.log.splitlines()
             if "warning" in line.lower() or re.search(r"C75\d\d", line)]
    bad = bool(notes)
    print(f"sm_90a cubin: {len(cases)} variants in {result.seconds:.1f} s; shared memory per block "
          f"{smem_bytes(args.chunk_kb * 1024, args.bufs)} B")
    print(f"{'kernel':<18} {'threads':>7} {'regs':>5} {'spills':>7}")
    for case in cases:
        r = result.resources.get(case.name)
        if r is None:
            print(f"{case.name:<18} missing from the ptxas output")
            bad = True
            continue
        spills = r.spill_stores + r.spill_loads
        # registers are granted per 4 warps: regs * threads rounded up to 128 must fit the 64K register file
        fits = r.registers * (-(-case.threads // 128) * 128) <= 65536
        bad |= spills > 0 or not fits
        print(f"{case.name:<18} {case.threads:>7} {r.registers:>5} {spills:>7}  "
              f"{'' if fits else 'REGISTERS DO NOT FIT'}")
    for line in notes:
        print(line)
    print("dry run:", "PROBLEMS (see above)" if bad else "ok (no spills, no wgmma serialisation or other ptxas notes)")
    return 1 if bad else 0


# --------------------------------------------------------------------------------------------------------------------
# GPU run


def load_module(cases: list[Case], args):
    """The cubin loaded as it is: cupy.RawModule(code=...) would compile for sm_90 (no "a", which wgmma needs)."""
    import cupy as cp

    path = Path(tempfile.mkdtemp()) / "wgmma_sp_ceiling.cubin"
    path.write_bytes(compiled(cases, args).cubin)
    return cp.RawModule(path=str(path))


def run_case(cp, np, module, case: Case, sms: int, clk_hz: float, fill, wsrc, wsrc_chunks: int, args) -> dict:
    fn = module.get_function(case.name)
    smem = smem_bytes(args.chunk_kb * 1024, args.bufs)
    fn.max_dynamic_shared_size_bytes = smem
    out = cp.full(sms * case.c * 128, np.nan, dtype=cp.float32)
    stats = cp.zeros(sms * 8, dtype=cp.uint64)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def timed(iters: int) -> float:
        stats.fill(0)
        start.record()
        fn((sms,), (case.threads,), (fill, wsrc, np.int32(wsrc_chunks), np.int32(iters), out, stats), shared_mem=smem)
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)

    # enough groups that one launch lasts target_ms at the peak (longer below it)
    iters = max(1, math.ceil(args.target_ms * 1e-3 * clk_hz / (case.c * 4 * case.clocks_per_instr_at_peak)))
    ms = timed(iters)  # warm-up
    if ms < args.min_ms:  # the reported clock was below the real one: lengthen
        iters = math.ceil(iters * 1.25 * args.min_ms / ms)
        ms = timed(iters)
    reps = []
    for _ in range(args.reps):
        ms = timed(iters)
        st = stats.get().reshape(sms, 8).astype(np.float64)
        ns = st[:, 3] - st[:, 2]
        cyc = st[:, 1] - st[:, 0]
        sm_ghz = float(np.median(cyc[ns > 0] / ns[ns > 0])) if (ns > 0).any() else float("nan")
        reps.append({"ms": ms, "writer_bytes": float(st[:, 4].sum()), "sm_clock_mhz": sm_ghz * 1e3,
                     "kernel_cycles_median": float(np.median(cyc))})
    rep = sorted(reps, key=lambda r: r["ms"])[len(reps) // 2]  # the median launch
    t = rep["ms"] * 1e-3
    acc = out.get()
    instr = sms * case.c * iters * 4
    flop = instr * case.flop_per_instr
    tflops = flop / t / 1e12
    peak_sparse = sms * 8192 * clk_hz
    peak_own = sms * (8192 if case.sparse else 4096) * clk_hz
    meas_hz = rep["sm_clock_mhz"] * 1e6
    read_per_instr = case.b_bytes + case.a_bytes
    read_bpc = read_per_instr * instr / (t * clk_hz * sms)
    writer_bpc = rep["writer_bytes"] / (t * clk_hz * sms)
    need_bpc = read_per_instr / case.clocks_per_instr_at_peak  # reads per clock at the instruction's peak
    model = min(1.0, max(0.0, SMEM_BW - writer_bpc) / need_bpc)
    return {
        "case": case.name, "label": case.label, "sparse": case.sparse, "n": case.n, "k": case.k,
        "consumers": case.c, "writer": case.w, "threads": case.threads, "iters": iters,
        "instructions": instr, "flop_per_instruction": case.flop_per_instr,
        "ms_median": rep["ms"], "ms_all": [r["ms"] for r in reps],
        "tflops": tflops,
        "pct_sparse_peak": 100 * tflops * 1e12 / peak_sparse,
        "pct_own_peak": 100 * tflops * 1e12 / peak_own,
        "sm_clock_mhz_measured": rep["sm_clock_mhz"],
        "pct_own_peak_at_measured_clock": 100 * flop / t / (sms * (8192 if case.sparse else 4096) * meas_hz)
        if meas_hz > 0 else None,
        "smem_read_bytes_per_instruction": {"B": case.b_bytes, "A": case.a_bytes},
        "smem_read_B_per_clk_per_sm": read_bpc,
        "smem_read_B_per_clk_per_sm_at_measured_clock": read_bpc * clk_hz / meas_hz if meas_hz > 0 else None,
        "writer_B_per_clk_per_sm": writer_bpc,
        "writer_bytes_total": rep["writer_bytes"],
        "smem_read_need_B_per_clk_at_peak": need_bpc,
        "model_pct_own_peak_128Bclk": 100 * model,
        "acc_all_finite": bool(np.isfinite(acc).all()),
        "acc_sample": [float(x) for x in acc[:4]],
    }


def gpu_run(cases: list[Case], args) -> int:
    import cupy as cp
    import numpy as np

    dev = cp.cuda.Device()
    attrs = dev.attributes
    sms = int(attrs["MultiProcessorCount"])
    if args.clock_mhz:
        clk_hz, clk_src = args.clock_mhz * 1e6, "--clock-mhz"
    elif attrs.get("ClockRate"):
        clk_hz, clk_src = attrs["ClockRate"] * 1e3, "device attribute ClockRate (max SM clock)"
    else:
        clk_hz, clk_src = 1.98e9, "assumed 1980 MHz (no ClockRate attribute)"
    smem = smem_bytes(args.chunk_kb * 1024, args.bufs)
    if smem > min(SMEM_LIMIT, int(attrs.get("MaxSharedMemoryPerBlockOptin", SMEM_LIMIT))):
        print(f"shared memory {smem} B exceeds the block limit", file=sys.stderr)
        return 1
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    print(f"device: {name}, {sms} SMs; clock used for peaks: {clk_hz / 1e6:.0f} MHz ({clk_src})")
    print(f"sparse peak {sms * 8192 * clk_hz / 1e12:.1f} TFLOP/s, dense peak {sms * 4096 * clk_hz / 1e12:.1f} TFLOP/s; "
          f"shared memory per block {smem} B; writer: {args.bufs} x {args.chunk_kb} KB bulk copies in flight "
          f"from a {args.src_mb} MB buffer")

    t0 = time.time()
    module = load_module(cases, args)
    compile_s = time.time() - t0
    print(f"compiled {len(cases)} variants in {compile_s:.1f} s")

    rng = np.random.default_rng(0)
    if args.fill == "random":
        host = rng.uniform(-1.0, 1.0, FILL_BYTES // 2).astype(np.float16)
    else:
        host = np.zeros(FILL_BYTES // 2, dtype=np.float16)
    fill = cp.asarray(host)
    chunk = args.chunk_kb * 1024
    wsrc_chunks = max(1, args.src_mb * 1024 * 1024 // chunk)
    wsrc = cp.ones(wsrc_chunks * chunk, dtype=cp.uint8)

    results = []
    for case in cases:
        r = run_case(cp, np, module, case, sms, clk_hz, fill, wsrc, wsrc_chunks, args)
        results.append(r)
        print(f"  {r['label']}: {r['ms_median']:.2f} ms, {r['tflops']:.0f} TFLOP/s, finite={r['acc_all_finite']}",
              flush=True)

    doc = {
        "device": name, "sms": sms, "clock_mhz_used": clk_hz / 1e6, "clock_source": clk_src,
        "peak_sparse_tflops": sms * 8192 * clk_hz / 1e12, "peak_dense_tflops": sms * 4096 * clk_hz / 1e12,
        "smem_bytes_per_block": smem, "writer_chunk_bytes": chunk, "writer_buffers": args.bufs,
        "writer_src_bytes": wsrc_chunks * chunk, "fill": args.fill, "reps": args.reps, "target_ms": args.target_ms,
        "compile_seconds": compile_s, "smem_bw_model_B_per_clk": SMEM_BW,
        "cases": results,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")

    print()
    print(f"clock {clk_hz / 1e6:.0f} MHz ({clk_src}); % columns against SMs * 8192 (sparse) / 4096 (dense) flop/clk; "
          f"'model': 128 B/clk shared memory, minus the writer's, over the instruction's reads at its peak")
    hdr = (f"{'case':<31} {'TFLOP/s':>8} {'%sp peak':>8} {'%own':>6} {'%own@meas':>9} {'MHz meas':>8} "
           f"{'rd B/clk':>8} {'wr B/clk':>8} {'model%':>6} {'ms':>6}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        at_meas = r["pct_own_peak_at_measured_clock"]
        print(f"{r['label']:<31} {r['tflops']:>8.1f} {r['pct_sparse_peak']:>8.1f} {r['pct_own_peak']:>6.1f} "
              f"{(at_meas if at_meas is not None else float('nan')):>9.1f} {r['sm_clock_mhz_measured']:>8.0f} "
              f"{r['smem_read_B_per_clk_per_sm']:>8.1f} {r['writer_B_per_clk_per_sm']:>8.1f} "
              f"{r['model_pct_own_peak_128Bclk']:>6.1f} {r['ms_median']:>6.2f}"
              + ("" if r["acc_all_finite"] else "  NON-FINITE ACCUMULATORS"))
    return 0 if all(r["acc_all_finite"] for r in results) else 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the full results as JSON here (default: print only)")
    p.add_argument("--quick", action="store_true", help="a subset: " + ", ".join(c.name for c in QUICK_CASES))
    p.add_argument("--cases", type=parse_cases, help="comma-separated, like sp256c2w1,dn256c2w0 (overrides --quick)")
    p.add_argument("--dry-run", action="store_true", help="compile every variant (-cubin, ptxas -v) and report "
                   "registers, spills and ptxas notes; no GPU")
    p.add_argument("--reps", type=int, default=5, help="timed launches per case; the median is reported")
    p.add_argument("--target-ms", type=float, default=3.0, help="launch length at the peak (sets the iterations)")
    p.add_argument("--min-ms", type=float, default=2.0, help="a warm-up shorter than this lengthens the launch")
    p.add_argument("--clock-mhz", type=float, help="clock for the peaks and bytes per clock (default: ClockRate)")
    p.add_argument("--fill", choices=("random", "zero"), default="random",
                   help="operand values in shared memory (random fp16 in [-1, 1], or zeros: less power)")
    p.add_argument("--chunk-kb", type=int, default=16, help="writer: KB per bulk copy")
    p.add_argument("--bufs", type=int, default=6, help="writer: bulk copies in flight")
    p.add_argument("--src-mb", type=int, default=16, help="writer: global buffer it cycles over (L2-resident)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.chunk_kb < 1 or args.bufs < 1 or args.src_mb < 1:
        p.error("--reps, --chunk-kb, --bufs and --src-mb must be positive")
    if args.bufs > 15:
        p.error("--bufs: at most 15 (barriers and counter share 128 bytes)")
    if smem_bytes(args.chunk_kb * 1024, args.bufs) > SMEM_LIMIT:
        p.error(f"--chunk-kb x --bufs: shared memory {smem_bytes(args.chunk_kb * 1024, args.bufs)} B > {SMEM_LIMIT}")
    cases = args.cases or (QUICK_CASES if args.quick else DEFAULT_CASES)
    return dry_run(cases, args) if args.dry_run else gpu_run(cases, args)


if __name__ == "__main__":
    sys.exit(main())

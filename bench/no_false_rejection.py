"""No false rejection: every reference kernel, in every dtype it declares, through the full GPU verification.

Run on the GPU machine: `python3 bench/no_false_rejection.py OUT_DIR`. The matrix: a real-matrix-like
file (rectangular, power-law rows, empty rows, a few dense rows of thousands of nonzeros) written to a temporary
folder. Each kernel starts from the offline planner's parameters when the plan names it, else from its first valid
combination. Every verification draws its own held-out shapes. Writes OUT_DIR/no_false_rejection.json and prints a
short table last.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparseditto.agents.planner import is_valid_choice, offline_plan
from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.verifier import GpuVerifier


def real_like_matrix(path: Path, seed: int = 7) -> Path:
    """Rectangular, power-law row lengths, 5% empty rows, four rows of 3000-6000 nonzeros."""
    rng = np.random.default_rng(seed)
    M, K = 60_000, 45_000
    lengths = np.minimum(np.floor((rng.pareto(1.5, M) + 1) * 4).astype(np.int64), K)
    lengths[rng.choice(M, M // 20, replace=False)] = 0
    lengths[rng.choice(M, 4, replace=False)] = rng.integers(3000, 6000, 4)
    rows = np.repeat(np.arange(M), lengths)
    cols = np.concatenate([np.sort(rng.choice(K, n, replace=False)) for n in lengths])
    mat = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(M, K))
    sp.save_npz(path, mat)
    return path


def specs(folder: Path) -> list[dict]:
    matrix = str(real_like_matrix(folder / "real_like.npz"))
    out = []
    for op in ("spmv", "spmm"):
        extra = {"N": 64} if op == "spmm" else {}
        out.append({"name": f"{op}_real_like", "operation": op, "pattern": {"kind": "matrix_file", "path": matrix}, **extra})
    return out


def start_for(kernel, spec) -> dict[str, int] | None:
    """The planner's start for this kernel, else the first valid combination of its parameters."""
    plan = offline_plan(spec)
    for strategy in plan.strategies:
        if strategy.kernel == kernel.name:
            return strategy.start
    symbols = get_family(spec.family).symbols(spec)
    names = sorted(kernel.parameters)
    for values in itertools.product(*(kernel.parameters[n] for n in names)):
        params = dict(zip(names, values))
        if is_valid_choice(kernel.name, params, spec.dtype, symbols):
            return params
    return None


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    verifier = GpuVerifier(arch="sm_90", trials=3, timeout_s=300, runs=20, profile=False, tool_timeout_s=240)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for raw in specs(Path(tmp)):
            for dtype in ("fp32", "fp16", "bf16"):
                spec = parse_spec({**raw, "dtype": dtype})
                for kernel in reference_kernels():
                    if kernel.family != spec.family or dtype not in kernel.dtypes:
                        continue
                    params = start_for(kernel, spec)
                    if params is None:
                        rows.append({"spec": raw["name"], "dtype": dtype, "kernel": kernel.name, "accepted": None,
                                     "note": "no valid parameters"})
                        continue
                    start = time.perf_counter()
                    report = verifier.verify(kernel.instantiate(params), spec)
                    fail = next((f for f in report.feedback if f.status in {"failed", "error"}), None)
                    correctness = report.stage("correctness")
                    rows.append({"spec": raw["name"], "dtype": dtype, "kernel": kernel.name, "params": params,
                                 "accepted": report.correct, "seconds": round(time.perf_counter() - start, 1),
                                 "failure": fail.model_dump() if fail else None,
                                 "held_out_shapes": correctness.evidence.get("held_out_shapes") if correctness else None,
                                 "sanitizer": report.stage("sanitizer").message if report.stage("sanitizer") else None,
                                 "benchmark": report.stage("benchmark").message if report.stage("benchmark") else None})
                    (out / "no_false_rejection.json").write_text(json.dumps(rows, indent=1))  # kept if the run is cut short
                    print(f"{raw['name']:16s} {dtype:5s} {kernel.name:24s} accepted={report.correct} "
                          f"{rows[-1]['seconds']:6.1f} s {fail.error_type + ': ' + fail.message[:90] if fail else ''}", flush=True)
    (out / "no_false_rejection.json").write_text(json.dumps(rows, indent=1))
    accepted = sum(bool(r["accepted"]) for r in rows)
    print(f"\n{accepted} of {len(rows)} accepted")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

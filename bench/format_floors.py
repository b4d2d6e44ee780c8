"""Each SpMV or SpMM record's time against its chosen format's own floor, after the fact (CPU only): the suite matrix
is loaded again, the record's kernel prepared on it, and the arrays it declares it streams plus the dense operands
priced at the copy bandwidth the run measured (its floor's bytes over its floor's time).
`python3 bench/format_floors.py RESULTS_JSONL MATRIX_DIR > floors.json`: MATRIX_DIR holds the suite's .npz files
(`python3 -m sparseditto.evals.matrix_suite DIR --names ...`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sparseditto.evals.records import load_records
from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.runner import format_bytes, prepare


def parsed_candidate(text: str) -> tuple[str, dict[str, int]]:
    """`spmv_dia(BLOCK=256, MAX_DIAGS=8)` -> ("spmv_dia", {"BLOCK": 256, "MAX_DIAGS": 8})."""
    name, params = re.fullmatch(r"(\w+)\((.*)\)", text).groups()
    return name, {k: int(v) for k, v in (p.split("=") for p in params.split(", ") if p)}


def main(results: Path, matrices: Path) -> None:
    rows = []
    for r in load_records(results):
        if not r.correct or not r.candidate or r.median_us is None:
            continue
        # the eval's spec names: MATRIX-spmv-DTYPE, MATRIX-spmm-DTYPE-nN
        matrix, operation, dtype, n = re.fullmatch(r"(.+)-(spmv|spmm)-([a-z0-9]+)(?:-n(\d+))?", r.spec_id).groups()
        spec = parse_spec({"name": r.spec_id, "operation": operation, "dtype": dtype, **({"N": int(n)} if n else {}),
                           "pattern": {"kind": "matrix_file", "path": str(matrices / f"{matrix}.npz")}})
        family = get_family(spec.family)
        problem = family.make_problem(spec, seed=0)
        name, params = parsed_candidate(r.candidate)
        candidate = get_kernel(name).instantiate(params)
        arrays, symbols = prepare(candidate, family, problem)
        own = format_bytes(candidate, family, problem, arrays, symbols)
        copy_bytes_per_us = family.floor_bytes(problem.symbols, dtype) / r.floor_us
        row = {"spec": r.spec_id, "kernel": r.candidate, "us": round(r.median_us, 1),
               "floor_us": round(r.floor_us, 2), "of_floor": round(r.bandwidth_fraction, 3)}
        if own is not None:
            row.update(format_mb=round(own / 1e6, 1), format_floor_us=round(own / copy_bytes_per_us, 2),
                       of_format_floor=round(own / copy_bytes_per_us / r.median_us, 3))
        rows.append(row)
        print(f"{r.spec_id:32s} {name:22s} {r.median_us:8.1f} us  of floor {r.bandwidth_fraction:4.0%}  "
              f"of its format's floor {row.get('of_format_floor', float('nan')):4.0%}", file=sys.stderr)
    print(json.dumps({"about": __doc__.splitlines()[0], "results": str(results), "rows": rows}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

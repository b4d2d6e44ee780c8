"""Host seconds of one CSR correctness trial's judging, no GPU needed: the family's reference, element terms and
bounds, and CheckedOutput.judge on the reference plus a small error (every element written), for a banded matrix.

`python3 bench/judge_seconds.py [--rows 1000000] [--per-row 10] [--cases spmm-fp32-128,spmm-fp16-32,spmv-fp32-1]
[--specials]`: --specials draws the values again with NaN and Inf, as every trial but the first two does."""

from __future__ import annotations

import argparse

import numpy as np
from host_prep_seconds import timed  # bench/ is the script's folder

from sparseditto.spec import parse_spec
from sparseditto.tools.correctness import CheckedOutput
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families import get_family
from sparseditto.tools.values import numerics


def case(name: str, rows: int, per_row: float, specials: bool) -> None:
    operation, dtype, n = name.split("-")
    family = get_family(f"csr_{operation}")
    spec = parse_spec({"operation": operation, "pattern": {"distribution": "banded", "nnz_per_row": per_row},
                       "M": rows, "K": rows, "dtype": dtype, **({"N": int(n)} if operation == "spmm" else {})})
    print(f"{name}: {rows} x {rows}, {per_row:g} nonzeros a row{', specials' if specials else ''}", flush=True)
    problem = timed("make_problem", lambda: family.make_problem(spec, 7))
    if specials:
        problem = family.with_fresh_values(problem, np.random.default_rng(8), specials=True)
    refs = timed("reference", lambda: family.reference(problem))
    terms = timed("element_terms", lambda: family.element_terms(problem))
    timed("conditions", lambda: family.conditions(problem))
    bounds = timed("error_bounds (terms given)", lambda: family.error_bounds(problem, refs, None, terms))
    out_name, out = next(iter(problem.outputs.items()))
    ref = refs[out_name]
    # the candidate's result as the runner holds it: rounded to the output type, read back as float64
    noisy = ref * (1 + 1e-4 * numerics(dtype).unit_roundoff * np.random.default_rng(0).standard_normal(ref.shape))
    result = to_float64(to_storage(noisy, out.dtype), out.dtype)
    del noisy
    unwritten = np.zeros(ref.shape, dtype=bool)
    checked = timed("CheckedOutput.judge", lambda: CheckedOutput.judge(result, ref, out.tolerance, unwritten, bounds[out_name],
                                                                        numerics(out.dtype).largest))
    print(f"  passed {checked.passed}, exceeded {checked.exceeded}, rel_error {checked.rel_error:.3g}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-row", type=float, default=10)
    parser.add_argument("--cases", default="spmm-fp32-128,spmm-fp16-128,spmm-fp32-32,spmm-fp16-32,spmv-fp32-1")
    parser.add_argument("--specials", action="store_true")
    args = parser.parse_args()
    for name in args.cases.split(","):
        case(name, args.rows, args.per_row, args.specials)


if __name__ == "__main__":
    main()

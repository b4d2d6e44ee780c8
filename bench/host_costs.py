"""The host-side (NumPy) work a verification child does for one SpMV instance, timed without a GPU:
`python3 bench/host_costs.py MATRIX_FILE` (e.g. a suite matrix written by `python -m sparseditto.evals.matrix_suite`)."""

from __future__ import annotations

import sys
import time

import numpy as np

from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family


def timed(label: str, work):
    start = time.perf_counter()
    out = work()
    print(f"{label:28s} {time.perf_counter() - start:6.2f} s")
    return out


def main(path: str) -> None:
    spec = parse_spec({"operation": "spmv", "dtype": "fp32", "pattern": {"kind": "matrix_file", "path": path}})
    family = get_family(spec.family)
    rng = np.random.default_rng(0)
    timed("make_problem (first read)", lambda: family.make_problem(spec, 0))
    problem = timed("make_problem (file cached)", lambda: family.make_problem(spec, 1))
    refs = timed("reference", lambda: family.reference(problem))
    timed("error bounds", lambda: family.error_bounds(problem, refs, spec.tolerance))
    timed("fresh values with specials", lambda: family.with_fresh_values(problem, rng, specials=True))
    timed("sanitizer instances", lambda: family.sanitizer_instances(spec, problem, 3))
    timed("held-out problems", lambda: [family.make_problem(spec, 5, s) for s in family.held_out_shapes(spec, rng)])


if __name__ == "__main__":
    main(sys.argv[1])

"""Host seconds of a verification's instances, no GPU needed: a 2:4 problem made and its values drawn again, and
on a suite matrix the SpMV trial problem, its fresh values, reference, element terms and bounds, and each
preparation made first and again on a second seed's instance (the structure cache's hit).

`python3 bench/host_prep_seconds.py [--sp24 16384] [--sp24-reference] [--matrix stencil2d_5pt_20m] [--before COMMIT]`
--sp24-reference: the 2:4 problem (with relu, bias and alpha) and its reference, bounds and conditions (the family's,
and the generic ones it replaced), their host part (the float64 products, which run on the device, stubbed).
--before: the 2:4 pattern draw, the value draws, the rounding to storage and the preparations as they were at
COMMIT (read with `git show`), to time the same steps before a change."""

from __future__ import annotations

import argparse
import importlib.util
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PREPARATION_PARAMS = {"MAX_DIAGS": 16, "C": 32, "SIGMA": 4096, "BLOCK": 256, "ITEMS": 8, "LONG_ROW": 64, "CHUNK": 4096}


def timed(label: str, work):
    """`work`'s result; prints its seconds and the process's peak resident memory so far."""
    start = time.perf_counter()
    result = work()
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{label:44s} {time.perf_counter() - start:7.2f} s  (peak {peak_gb:5.2f} GB)", flush=True)
    return result


def module_at(commit: str, path: str, name: str):
    """The file `path` as it was at `commit`, imported under `name`."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True,
                            check=True).stdout
    file = Path(tempfile.mkdtemp()) / Path(path).name
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def use_code_at(commit: str) -> None:
    """The 2:4 pattern draw, the value draws, the rounding and the CSR preparations of `commit` in every module that
    calls them."""
    from sparseditto.tools.families import base, csr_common, get_family
    from sparseditto.tools.families import sparse24_gemm
    from sparseditto.tools.families.sparse24_gemm import compression

    pattern = module_at(commit, "tools/families/sparse24_gemm/pattern.py", "pattern_before")
    sparse24_gemm.random_positions = pattern.random_positions
    values = module_at(commit, "tools/values.py", "values_before")
    dtypes = module_at(commit, "tools/dtypes.py", "dtypes_before")
    for module in (base, csr_common, sparse24_gemm, compression):
        if hasattr(module, "draw_values"):
            module.draw_values = values.draw_values
        if hasattr(module, "to_storage"):
            module.to_storage = dtypes.to_storage
    spmv = get_family("csr_spmv")
    for name, path, function in (("diagonals", "diagonal.py", "diagonals"), ("sell_c_sigma", "sell.py", "sell_c_sigma"),
                                 ("csr_u16", "u16.py", "csr_u16")):
        old = module_at(commit, f"tools/families/csr_spmv/{path}", f"{function}_before")
        spmv.preparations[name] = getattr(old, function)


def sparse24(n: int, reference: bool) -> None:
    """With `reference`, one problem's reference and bounds come right after its making, so that the peak printed
    with the bounds is one problem's (with relu, bias and alpha); the other steps follow."""
    from unittest import mock

    import yaml

    from sparseditto.spec import parse_spec
    from sparseditto.tools.families import get_family, sparse24_gemm
    from sparseditto.tools.families.base import ProblemFamily

    data = yaml.safe_load((ROOT / "examples" / "sparse24_fp16_8192.yaml").read_text()) | {"M": n, "K": n, "N": n}
    if reference:
        data["epilogue"] = {"alpha": True, "bias": True, "activation": "relu"}
    spec = parse_spec(data)
    family = get_family(spec.family)
    timed(f"2:4 {n}^3 fp16: positions", lambda: sparse24_gemm.random_positions(np.random.default_rng(1), n, n))
    problem = timed(f"2:4 {n}^3 fp16: make the problem", lambda: family.make_problem(spec, 1))
    # the float64 products run on the device (cuBLAS DGEMM): stubbed here, so that the host's part alone is timed
    stub = mock.patch.object(sparse24_gemm, "float64_product", lambda A, B: np.zeros((A.shape[0], B.shape[1])))
    if reference:
        with stub:
            refs = timed(f"2:4 {n}^3 fp16: reference, host part", lambda: family.reference(problem))
            terms = timed(f"2:4 {n}^3 fp16: element terms", lambda: family.element_terms(problem))
            timed(f"2:4 {n}^3 fp16: bounds, host part (peak: one problem)",
                  lambda: family.error_bounds(problem, refs, None, terms))
    timed(f"2:4 {n}^3 fp16: fresh values", lambda: family.with_fresh_values(problem, np.random.default_rng(2)))
    if reference:
        with stub:
            for _ in range(3):  # alternated: the page faults of fresh 0.5-2 GB arrays make single runs noisy
                timed(f"2:4 {n}^3 fp16: conditions, host part", lambda: family.conditions(problem))
                timed(f"2:4 {n}^3 fp16: conditions, generic (before)",
                      lambda: ProblemFamily.conditions(family, problem))


def spmv(matrix: str) -> None:
    from sparseditto.evals.matrix_suite import write_suite
    from sparseditto.spec import parse_spec
    from sparseditto.tools.families import get_family

    folder = Path(tempfile.mkdtemp())
    write_suite(folder, names=[matrix])
    spec = parse_spec({"name": matrix, "operation": "spmv", "dtype": "fp32",
                       "pattern": {"kind": "matrix_file", "path": str(folder / f"{matrix}.npz")}})
    family = get_family(spec.family)
    problem = timed(f"{matrix}: trial problem", lambda: family.make_problem(spec, 1))
    second = family.make_problem(spec, 2)
    timed(f"{matrix}: fresh values with specials",
          lambda: family.with_fresh_values(problem, np.random.default_rng(3), specials=True))
    refs = timed(f"{matrix}: reference", lambda: family.reference(problem))
    terms = timed(f"{matrix}: element terms", lambda: family.element_terms(problem))
    timed(f"{matrix}: bounds", lambda: family.error_bounds(problem, refs, spec.tolerance, terms))
    for name in ("diagonals", "sell_c_sigma", "csr_u16", "merge_path"):
        prepare = family.preparations[name]
        timed(f"{matrix}: {name} first", lambda: prepare(problem, PREPARATION_PARAMS))
        timed(f"{matrix}: {name} again (another seed)", lambda: prepare(second, PREPARATION_PARAMS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sp24", type=int, default=16384, help="M = K = N of the 2:4 problem (0: skip)")
    parser.add_argument("--sp24-reference", action="store_true",
                        help="time the 2:4 reference, conditions and bounds too (the products stubbed: the device's)")
    parser.add_argument("--matrix", default="stencil2d_5pt_20m", help="a suite matrix for the SpMV steps ('': skip)")
    parser.add_argument("--before", help="time the code of this commit instead")
    args = parser.parse_args()
    if args.before:
        use_code_at(args.before)
    if args.sp24:
        sparse24(args.sp24, args.sp24_reference)
    if args.matrix:
        spmv(args.matrix)


if __name__ == "__main__":
    main()

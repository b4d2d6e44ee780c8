"""The offline plan of SpMV fp32 on suite matrices, no GPU needed: per matrix the features that decide which formats
are offered (breadth-first levels, x sectors per nonzero, block fill) and every strategy the plan ranks, with its start
and predicted microseconds. With `--spmm N[,N...]`, the SpMM plans at those N instead, in fp32 and fp16 (rows, nonzeros
and the groups' column sharing first). The matrices are written to a temporary folder first.

`python3 bench/planner_prices.py NAME[,NAME...] [--spmm 32,128]`; a NAME that is a matrix file (Matrix Market or
.npz, e.g. `../shared/matrices/*.mtx.gz`) is planned from that file."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sparseditto.agents.planner import offline_plan
from sparseditto.evals.matrix_suite import write_suite
from sparseditto.spec import parse_spec


def matrix_path(folder: str, name: str) -> str:
    """A suite matrix written to `folder`, or the file `name` itself."""
    return name if Path(name).is_file() else f"{folder}/{name}.npz"


def spmm_prices(folder: str, name: str, ns: list[int]) -> None:
    for dtype in ("fp32", "fp16"):
        for n in ns:
            plan = offline_plan(parse_spec({"name": Path(name).name, "operation": "spmm", "dtype": dtype, "N": n,
                                            "pattern": {"kind": "matrix_file", "path": matrix_path(folder, name)}}))
            f = plan.features
            print(f"{name} {dtype} N={n}: rows {f['rows']:.0f}, nnz {f['nnz']:.0f}, group_overlap {f['group_overlap']:.2f}")
            for s in plan.strategies:
                print(f"  {s.kernel:22s} {s.predicted_us:10.1f} us  {s.start}")


def main(names: list[str], spmm: list[int] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="planner_prices_") as folder:
        write_suite(Path(folder), names=[n for n in names if not Path(n).is_file()])
        for name in names:
            if spmm:
                spmm_prices(folder, name, spmm)
                continue
            plan = offline_plan(parse_spec({"name": Path(name).name, "operation": "spmv", "dtype": "fp32",
                                            "pattern": {"kind": "matrix_file", "path": matrix_path(folder, name)}}))
            f = plan.features
            print(f"{name}: bfs_levels {f.get('bfs_levels', 0):.0f}, x_sectors_per_nnz {f['x_sectors_per_nnz']:.2f}, "
                  f"block_fill_4 {f['block_fill_4']:.2f}")
            for s in plan.strategies:
                print(f"  {s.kernel:22s} {s.predicted_us:8.1f} us  {s.start}")


if __name__ == "__main__":
    main(sys.argv[1].split(","), [int(n) for n in sys.argv[3].split(",")] if sys.argv[2:3] == ["--spmm"] else None)

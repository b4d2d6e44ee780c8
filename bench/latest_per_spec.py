"""The latest result of every spec across several evals' results.jsonl (a later file's record of a spec replaces an
earlier one's), against the fastest baseline: the geometric mean, the share below 0.9x and at or above 1.5x, and the
same per structure class of the matrix suite. The files may come from different commits: say so beside the figures.

`python3 bench/latest_per_spec.py RESULTS_JSONL [RESULTS_JSONL ...]`"""

from __future__ import annotations

import sys
from pathlib import Path

from sparseditto.evals.matrix_suite import SUITE_BY_NAME
from sparseditto.evals.metrics import FASTEST, geomean_speedup, speedup
from sparseditto.evals.records import load_records


def main(paths: list[Path]) -> None:
    latest = {}
    for path in paths:
        latest.update({r.spec_id: r for r in load_records(path)})
    records = list(latest.values())
    speedups = [s for r in records if (s := speedup(r, FASTEST)) is not None]
    print(f"{len(records)} specs from {len(paths)} files: geometric mean {geomean_speedup(records, FASTEST):.2f}x "
          f"against the fastest baseline, {sum(s < 0.9 for s in speedups)} below 0.9x, "
          f"{sum(s >= 1.5 for s in speedups)} at or above 1.5x, {len(records) - len(speedups)} without a correct kernel")
    by_class: dict[str, list] = {}
    for r in records:
        suite = SUITE_BY_NAME.get(r.spec_id.split("-spm")[0])  # MATRIX-spmv-DTYPE, MATRIX-spmm-DTYPE-nN
        by_class.setdefault(suite.cls if suite else "not in the suite", []).append(r)
    for cls, members in sorted(by_class.items()):
        print(f"  {cls:24s} {len(members):3d} specs  geometric mean {geomean_speedup(members, FASTEST) or 0:.2f}x")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])

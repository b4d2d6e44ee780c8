"""A matrix-suite eval's speedups against one library as horizontal bars grouped by structure class, with the
issue's lines (0.9x floor, 1.5x target) marked. `python3 bench/suite_chart.py RESULTS_JSONL PNG [LIBRARY]`"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot loads)

from sparseditto.evals.matrix_suite import SUITE_BY_NAME  # noqa: E402
from sparseditto.evals.records import load_records  # noqa: E402


def main(results: Path, png: Path, library: str = "cusparse") -> None:
    rows = []
    for r in load_records(results):
        name = r.spec_id.split("-spm")[0]  # MATRIX-spmv-DTYPE, MATRIX-spmm-DTYPE-nN
        if library in r.speedups:
            suite = SUITE_BY_NAME.get(name)
            rows.append((suite.cls if suite else "not in the suite", r.speedups[library], r.spec_id))
    rows.sort()
    classes = sorted({c for c, _, _ in rows})
    colours = {c: plt.get_cmap("tab20")(k % 20) for k, c in enumerate(classes)}
    fig, ax = plt.subplots(figsize=(7, 0.24 * len(rows) + 1.2))
    ax.barh(range(len(rows)), [s for _, s, _ in rows], color=[colours[c] for c, _, _ in rows])
    ax.set_yticks(range(len(rows)), [f"{n} ({c})" for c, _, n in rows], fontsize=7)
    for x, style in ((1.0, "-"), (0.9, ":"), (1.5, "--")):
        ax.axvline(x, color="black", linewidth=0.8, linestyle=style)
    ax.set_xscale("log")
    ax.set_xlabel(f"speedup against {library} (log scale)")
    ax.set_title("lines at 0.9x, 1x and 1.5x", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])

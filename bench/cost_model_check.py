"""The SpMV cost model against measured candidates: each candidate's predicted and measured time, their ratio, and
per matrix whether the model's fastest is the measured fastest. The matrices are remade from the seeded suite
(evals/matrix_suite.py), so their features are the ones the planner saw.
`python3 bench/cost_model_check.py [MEASURED_JSON] [MATRIX_DIR]` (defaults: the committed H200 measurements, a
temporary folder)."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparseditto.evals.matrix_suite import write_suite
from sparseditto.tools.families.csr_spmv.cost import predicted_us
from sparseditto.tools.structure import matrix_features

MEASURED = Path(__file__).resolve().parents[1] / "evals/results/issue14_h200/spmv_candidates_measured.json"


def main(measured_path: Path, matrix_dir: Path) -> None:
    candidates = json.loads(measured_path.read_text())["candidates"]
    names = sorted({c["matrix"] for c in candidates})
    write_suite(matrix_dir, names=names)
    features = {n: matrix_features(sp.load_npz(matrix_dir / f"{n}.npz").tocsr(), 4, np.random.default_rng(0)) for n in names}
    ratios = []
    print(f"{'matrix':20s} {'kernel':22s} {'params':34s} {'predicted':>9s} {'measured':>9s} {'ratio':>6s}")
    for c in candidates:
        p = predicted_us(c["kernel"], c["params"], features[c["matrix"]], 4)
        ratios.append(c["us"] / p)
        params = ",".join(f"{k}={v}" for k, v in c["params"].items() if k in ("GROUP", "MAX_DIAGS", "ITEMS"))
        print(f"{c['matrix']:20s} {c['kernel']:22s} {params:34s} {p:9.1f} {c['us']:9.1f} {c['us'] / p:6.2f}")
    logs = [math.log(r) for r in ratios]
    print(f"\nmeasured / predicted: geometric mean {math.exp(sum(logs) / len(logs)):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} candidates")
    for n in names:
        mine = [c for c in candidates if c["matrix"] == n]
        by_model = min(mine, key=lambda c: predicted_us(c["kernel"], c["params"], features[n], 4))
        best = min(mine, key=lambda c: c["us"])
        print(f"{n}: the model's fastest of the measured {by_model['kernel']} {by_model['params'].get('GROUP', '')} "
              f"({by_model['us']:.1f} us), measured fastest {best['kernel']} {best['params'].get('GROUP', '')} "
              f"({best['us']:.1f} us): {by_model['us'] / best['us']:.2f}x")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else MEASURED,
         Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="cost_check_")))

"""A pipeline run whose second verification hangs after touching MARKER, to be killed there:
`python tests/slow_run_child.py MARKER RUNS_DIR` (run id "killed", the tiny SpMM spec, budget 3). Used by
tests/test_runs_status.py and bench/kill_resume_race.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import TINY_SPMM, measured_report  # noqa: E402

from sparseditto.pipeline import run_pipeline  # noqa: E402


class HangsAtSecond:
    backend = "gpu"
    n = 0

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def verify(self, candidate, spec, best_us=None, checked=None, ahead=()):
        self.n += 1
        if self.n == 2:
            self.marker.touch()
            time.sleep(600)
        return measured_report(candidate.label(), speedup=0.8)


if __name__ == "__main__":
    run_pipeline(TINY_SPMM, budget=3, runs_dir=sys.argv[2], run_id="killed", verifier=HangsAtSecond(Path(sys.argv[1])))

"""The runner's host work for one verification (prefetch_host_work), in one thread against all the cores: no GPU.
`python3 bench/host_prefetch_timing.py` (a 1M-row, 10M-nonzero uniform SpMV spec); see bench/NOTES.md, session 8."""

from __future__ import annotations

import os
import time

import numpy as np

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import runner
from sparseditto.tools.families import get_family


def seconds(job: runner.RunJob, cores: int) -> float:
    runner._SHARED.clear()
    real = os.cpu_count
    os.cpu_count = lambda: cores
    try:
        start = time.perf_counter()
        runner.prefetch_host_work(job, get_family(job.spec.family))
        return time.perf_counter() - start
    finally:
        os.cpu_count = real


def main() -> None:
    spec = parse_spec({"operation": "spmv", "M": 1_000_000, "K": 1_000_000,
                       "pattern": {"distribution": "uniform", "nnz_per_row": 10}})
    family = get_family(spec.family)
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    job = runner.RunJob(candidate=candidate, spec=spec, cubin_path="unused", seeds=[1, 2, 3],
                        held_out_shapes=family.held_out_shapes(spec, np.random.default_rng(1)), timing_seed=5)
    cores = os.cpu_count() or 1
    print(f"one thread: {seconds(job, 1):.2f} s; {cores} threads: {seconds(job, cores):.2f} s")


if __name__ == "__main__":
    main()

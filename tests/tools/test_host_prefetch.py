"""The runner's host work made ahead in threads (`prefetch_host_work`) is the work the stages would make alone: the
same problems, references and bounds for every trial and value set, whatever the threads' order. No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import runner
from sparseditto.tools.families import get_family


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(runner, "_SHARED", {})


def job(spec_dict):
    spec = parse_spec(spec_dict)
    family = get_family(spec.family)
    candidate = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    held_out = family.held_out_shapes(spec, np.random.default_rng(3))
    return runner.RunJob(candidate=candidate, spec=spec, cubin_path="unused", seeds=[11, 12, 13],
                         held_out_shapes=held_out, timing_seed=21), family


SPMV = {"operation": "spmv", "M": 3000, "K": 2500, "pattern": {"distribution": "power_law", "nnz_per_row": 12}}


def made_alone(job, family):
    """Each trial's and value set's problem, references and bounds, made one after another by the family."""
    out = []
    for seed, shape, _, specials in runner.trial_list(job):
        problem = family.make_problem(job.spec, seed, shape)
        if specials:
            problem = family.with_fresh_values(problem, np.random.default_rng(seed ^ 0x5DEECE66D), specials=True)
        out.append(problem)
    timing = family.make_problem(job.spec, job.timing_seed)
    out += [timing] + [family.with_fresh_values(timing, np.random.default_rng([job.timing_seed, k]))
                       for k in range(1, runner.VALUE_SETS)]
    return [(p, family.reference(p), family.error_bounds(p, family.reference(p), job.spec.tolerance)) for p in out]


def prefetched(job, family):
    runner.prefetch_host_work(job, family)
    problems = [runner._trial_problem(job, family, t.seed, t.shape, t.specials) for t in runner.trial_list(job)]
    timing = runner._timing_problem(job, family)
    problems += [timing] + [runner._fresh_values(job, family, timing, k) for k in range(1, runner.VALUE_SETS)]
    return [(p, runner.references(family, p), runner._bounds(family, job.spec, p, runner.references(family, p)))
            for p in problems]


def test_prefetched_host_work_is_what_the_stages_make_alone(fresh_cache):
    j, family = job(SPMV)
    size = len(runner._SHARED)
    ahead = prefetched(j, family)
    assert len(runner._SHARED) > size
    alone = made_alone(j, family)
    assert len(ahead) == len(alone) == len(j.seeds) + len(j.held_out_shapes) + runner.VALUE_SETS
    for (p, refs, bounds), (q, refs_q, bounds_q) in zip(ahead, alone):
        assert p.symbols == q.symbols
        for name in q.inputs:
            np.testing.assert_array_equal(p.inputs[name], q.inputs[name])
        for name in refs_q:
            np.testing.assert_array_equal(refs[name], refs_q[name])
            np.testing.assert_array_equal(bounds[name].bound, bounds_q[name].bound)


def test_the_stages_find_the_prefetched_work_and_make_nothing_again(fresh_cache, monkeypatch):
    j, family = job(SPMV)
    runner.prefetch_host_work(j, family)
    calls = []
    monkeypatch.setattr(type(family), "make_problem", lambda *a, **k: calls.append("make_problem"))
    monkeypatch.setattr(type(family), "reference", lambda *a, **k: calls.append("reference"))
    prefetched(j, family)
    assert calls == []


def test_prefetch_threads_are_bounded_by_the_cores_and_by_host_memory(monkeypatch):
    """Small outputs: one thread per core (at most one per task). 2 GB float64 outputs (a 16384^2 product): as many as
    the memory left after every instance's kept arrays holds, at least one."""
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 16)
    gb = 1 << 30
    assert runner.prefetch_workers(8, 8 * 4096, 100 * gb) == 8
    assert runner.prefetch_workers(40, 8 * 4096, 100 * gb) == 16
    # 8 instances keep 8 x 2.5 x 2 GB = 40 GB; each thread needs 2.5 x 2 GB more at its peak
    assert runner.prefetch_workers(8, 2 * gb, 120 * gb) == 8
    assert runner.prefetch_workers(8, 2 * gb, 70 * gb) == 6
    assert runner.prefetch_workers(8, 2 * gb, 30 * gb) == 1
    assert runner.available_host_bytes() > 0

"""Defence in depth: the runtime checks stop stateful cheats even when the static check is bypassed.

The verifier refuses writable module-scope state before anything runs, so in the adversarial suite these
kernels never reach the GPU. Here each is compiled and handed straight to the runner child, as if the static
check had missed it: a call counter that turns lazy once timed is caught because every timed run is checked; a
cache of the first answer is caught as stale; a memo keyed on pointers, shape and sampled values never hits,
because the timed runs get other values in place at the same addresses, so every run is computed and right.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest

from sparseditto.evals.adversarial_suite import CASES
from sparseditto.tools.families import get_family
from sparseditto.tools.gpu_stages import run_child
from sparseditto.tools.runner import RunJob
from sparseditto.tools.verifier import compile_candidate

pytestmark = pytest.mark.gpu


def run_unchecked(name: str, tmp_path: Path):
    """The case through the runner child only: compile, correctness trials and benchmark, no static check."""
    case = next(c for c in CASES if c.name == name)
    candidate, spec = case.candidate(), case.spec()
    result, feedback = compile_candidate(candidate, spec, "sm_90")
    assert result.ok, feedback.message
    cubin = tmp_path / "candidate.cubin"
    cubin.write_bytes(result.cubin)
    family = get_family(spec.family)
    job = RunJob(candidate=candidate, spec=spec, cubin_path=str(cubin), resources=result.resources,
                 seeds=[secrets.randbelow(2**31) for _ in range(3)],
                 held_out_shapes=family.held_out_shapes(spec, np.random.default_rng(secrets.randbits(63))),
                 timing_seed=secrets.randbelow(2**31), runs=20)
    return run_child(job, tmp_path, 120)


def first_failure(run):
    return next(((f.stage, f.error_type) for f in run.feedback if f.status in {"failed", "error"}), None)


def test_a_call_counter_that_turns_lazy_when_timed_fails_a_checked_timed_run(tmp_path):
    run = run_unchecked("skips_when_timed", tmp_path)
    assert first_failure(run) == ("benchmark", "inconsistent_output")


def test_a_cache_of_the_first_answer_is_stale_in_the_second_trial(tmp_path):
    run = run_unchecked("cached_result", tmp_path)
    assert first_failure(run) == ("correctness", "stale_result")


def test_a_memo_keyed_on_pointers_and_samples_never_serves_a_stale_answer(tmp_path):
    run = run_unchecked("memo_keyed_globals", tmp_path)
    assert first_failure(run) is None
    bench = next(f for f in run.feedback if f.stage == "benchmark")
    assert bench.evidence["value_sets"] >= 2 and bench.evidence["runs_checked"] >= 20

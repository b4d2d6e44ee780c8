"""The adversarial suite against the harness: every cheat rejected, with the right error type, none accepted.

Without a GPU: the static cheats are refused and the others compile (so they are rejected for what
they do, not because they do not build). On the GPU (marked `gpu`): every case goes through the
GpuVerifier in this one process, and the honest kernel still passes afterwards.
"""

from __future__ import annotations

import pytest

from sparseditto.evals.adversarial_suite import CASES, CORRECT, adversarial_spec
from sparseditto.tools.verifier import CompileOnlyVerifier, GpuVerifier


def first_failure(report):
    return next((f for f in report.feedback if f.status in {"failed", "error"}), None)


def test_the_suite_covers_at_least_twelve_distinct_cheats():
    assert len(CASES) >= 12
    assert len({c.name for c in CASES}) == len(CASES)
    assert len({c.error_type for c in CASES}) >= 10


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_without_a_gpu_static_cheats_are_refused_and_the_rest_compile(case):
    report = CompileOnlyVerifier().verify(case.candidate(), adversarial_spec())
    failure = first_failure(report)
    if case.stage == "static":
        assert failure is not None and (failure.stage, failure.error_type) == ("static", case.error_type)
        assert not report.compiled
    else:
        assert failure is None, failure
        assert report.compiled
        assert all(f.status != "passed" for f in report.feedback if f.stage in {"correctness", "sanitizer", "benchmark", "profile"})


@pytest.fixture(scope="module")
def gpu_verifier():
    return GpuVerifier(arch="sm_90", trials=3, timeout_s=25, runs=10, profile=False, tool_timeout_s=120)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in CASES if c.stage != "static"], ids=lambda c: c.name)
def test_on_the_gpu_each_cheat_is_rejected_with_its_error_type(case, gpu_verifier):
    report = gpu_verifier.verify(case.candidate(), adversarial_spec())
    failure = first_failure(report)
    assert failure is not None, f"{case.name} was not rejected: {[(f.stage, f.status) for f in report.feedback]}"
    assert (failure.stage, failure.error_type) == (case.stage, case.error_type), failure
    assert not report.correct


@pytest.mark.gpu
def test_on_the_gpu_the_honest_kernel_passes_every_stage_after_the_cheats(gpu_verifier):
    report = gpu_verifier.verify(CORRECT.candidate(), adversarial_spec())
    assert report.correct, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed"
    assert report.measurement is not None

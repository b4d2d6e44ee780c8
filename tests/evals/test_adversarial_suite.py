"""The adversarial suite against the harness: every cheat rejected, with the right error type, none accepted.

Without a GPU: the cheats that the static check or the launch checks must refuse are refused with their own error
type, and the others compile and pass both (so they are rejected for what they do when run, not because they do
not build). On the GPU (marked `gpu`): every case goes through the GpuVerifier in this one process, on its own
spec, and the honest kernel still passes afterwards on every spec the cases use.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from sparseditto.evals.adversarial_suite import (CASES, CORRECT, LONG_ROW, SPECS, adversarial_spec, fp16_spec,
                                                 long_rows_spec)
from sparseditto.tools.families import get_family
from sparseditto.tools.verifier import CompileOnlyVerifier, GpuVerifier

GPU_STAGES = ("correctness", "sanitizer", "benchmark", "profile")


def first_failure(report):
    return next((f for f in report.feedback if f.status in {"failed", "error"}), None)


def test_the_suite_covers_every_hole_with_distinct_cheats():
    assert len(CASES) >= 42
    assert len({c.name for c in CASES}) == len(CASES)
    assert len({c.cheat for c in CASES}) == len(CASES)
    # no renamed copies: each candidate (name aside) and spec pair differs from every other
    assert len({(c.candidate().model_copy(update={"name": ""}).model_dump_json(), c.spec().name) for c in CASES}) == len(CASES)
    holes = Counter(c.hole for c in CASES)
    assert set(holes) <= set(range(9))
    assert holes[1] >= 8
    assert all(holes[h] >= 2 for h in range(2, 9)), holes
    assert len({c.error_type for c in CASES}) >= 14
    assert len({c.error_type for c in CASES if c.hole == 8}) >= 5
    assert all(c.stage == "static" and c.error_type == "forbidden_construct" for c in CASES if c.hole == 1)
    assert all(c.spec in SPECS.values() for c in (*CASES, CORRECT))


# The text check as it was before the lexer: a regex over the text with comments blanked (literals kept). Every
# hole-1 case must pass it, so that only the newer layers (the lexer, the PTX and SASS checks) can refuse it.
PLAIN_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
PLAIN_PATTERNS = (
    r"<<<", r"\bcudaStream\w*|\bcudaGraph\w*|\bcudaLaunch\w*", r"\bcuda[A-Z]\w*\s*\(|\bcu[A-Z][a-z]\w*\s*\(",
    r"\b(cublas|cusparse|cusparseLt|cub|thrust)\w*", r"\bprintf\s*\(|\bvprintf\b",
    r"__trap\s*\(|\btrap\s*;|__brkpt\s*\(|\bexit\s*;|\basm\s*(volatile\s*)?\(\s*\"\s*exit",
    r"\b(malloc|free|realloc|calloc)\s*\(|\bnew\s+\w|\bdelete\b", r"__host__|\bint\s+main\s*\(",
    r"\bclock(64)?\s*\(|%globaltimer|__nanosleep\s*\(", r"\b__managed__\b|\bcudaMallocManaged\b",
)


def plain_check(source: str) -> list[str]:
    code = PLAIN_COMMENTS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else re.sub(r"[^\n]", " ", m.group(0)), source)
    return [m.group(0) for p in PLAIN_PATTERNS if (m := re.search(p, code))]


@pytest.mark.parametrize("case", [c for c in CASES if c.hole == 1], ids=lambda c: c.name)
def test_each_text_evasion_hides_from_a_plain_regex(case):
    assert plain_check(case.candidate().source) == []


def test_a_plain_regex_does_see_the_plain_spellings():
    by_name = {c.name: c for c in CASES}
    for name in ("prints", "traps", "side_stream"):
        assert plain_check(by_name[name].candidate().source), name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_without_a_gpu_cheats_refused_before_running_are_refused_and_the_rest_compile(case):
    report = CompileOnlyVerifier().verify(case.candidate(), case.spec())
    failure = first_failure(report)
    if case.refused_before_running:
        assert failure is not None, [(f.stage, f.status) for f in report.feedback]
        assert (failure.stage, failure.error_type) == (case.stage, case.error_type), failure
        assert not report.correct
        assert not any(f.stage in GPU_STAGES and f.status == "passed" for f in report.feedback)
    else:
        assert failure is None, failure
        assert report.compiled
        assert {f.stage: f.status for f in report.feedback if f.stage in {"compile", "static"}} == \
            {"compile": "passed", "static": "passed"}
        assert [(f.stage, f.status) for f in report.feedback if f.stage in GPU_STAGES] == \
            [(s, "not_executed") for s in GPU_STAGES]


def test_the_honest_kernel_compiles_and_passes_the_checks_on_every_spec():
    for make in SPECS.values():
        report = CompileOnlyVerifier().verify(CORRECT.candidate(), make())
        assert first_failure(report) is None, first_failure(report)


def test_the_premises_of_the_shape_and_row_length_cases_hold():
    """What the hole-5 and hole-7 cases count on: rows longer than LONG_ROW in every main matrix of long_rows_spec
    and none in the sanitizer's tails instance; a tails grid of at most 96 blocks and a main grid above; held-out
    shapes whose N is no multiple of 8 and whose rows, at M = 2048, are not all whole tiles of 32."""
    spec = long_rows_spec()
    family = get_family(spec.family)
    for seed in range(8):
        lengths = np.diff(family.make_problem(spec, seed).inputs["rowptr"])
        assert lengths.max() > LONG_ROW
    assert family.sanitizer_shape(spec)["K"] <= LONG_ROW  # no row of the tails instance can be longer
    assert family.symbols(spec)["M"] % 32 == 0

    default = adversarial_spec()
    tails = family.sanitizer_shape(default)
    main = family.symbols(default)
    assert math.ceil(tails["M"] * tails["N"] / 256) <= 96 < math.ceil(main["M"] * main["N"] / 256)
    assert fp16_spec().dtype == "fp16" and family.symbols(fp16_spec()) == main

    rng = np.random.default_rng(0)
    for _ in range(50):
        for s in (default, spec):
            shapes = family.held_out_shapes(s, rng)
            assert all(shape["N"] % 8 for shape in shapes)
        assert any(shape["M"] % 32 for shape in family.held_out_shapes(spec, rng))


@pytest.fixture(scope="module")
def gpu_verifier():
    return GpuVerifier(arch="sm_90", trials=3, timeout_s=40, runs=10, profile=False, tool_timeout_s=180)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in CASES if c.stage != "static"], ids=lambda c: c.name)
def test_on_the_gpu_each_cheat_is_rejected_with_its_error_type(case, gpu_verifier):
    report = gpu_verifier.verify(case.candidate(), case.spec())
    failure = first_failure(report)
    assert failure is not None, f"{case.name} was not rejected: {[(f.stage, f.status) for f in report.feedback]}"
    assert (failure.stage, failure.error_type) == (case.stage, case.error_type), failure
    assert not report.correct


@pytest.mark.gpu
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_on_the_gpu_the_honest_kernel_passes_every_stage_after_the_cheats(spec_name, gpu_verifier):
    report = gpu_verifier.verify(CORRECT.candidate(), SPECS[spec_name]())
    assert report.correct, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed"
    assert report.measurement is not None


# the cheats run ahead beside the honest kernel: a candidate run in another's runner process is judged as alone
AHEAD = ("memo_in_workspace", "input_mutation", "out_of_bounds_read", "partial_write", "nan_output", "all_zeros")


@pytest.mark.gpu
def test_on_the_gpu_cheats_run_ahead_are_rejected_as_when_run_alone():
    gpu = GpuVerifier(arch="sm_90", trials=3, timeout_s=40, runs=10, profile=False, tool_timeout_s=180)
    cases = [c for c in CASES if c.name in AHEAD]
    assert len(cases) == len(AHEAD) and all(c.spec().name == adversarial_spec().name for c in cases)
    honest = gpu.verify(CORRECT.candidate(), adversarial_spec(), ahead=[c.candidate() for c in cases])
    assert honest.correct, [(f.stage, f.status, f.message) for f in honest.feedback]
    for case in cases:
        report = gpu.verify(case.candidate(), case.spec())
        assert "run_ahead" in report.stage("correctness").evidence, case.name
        failure = first_failure(report)
        assert failure is not None and (failure.stage, failure.error_type) == (case.stage, case.error_type), (case.name, failure)

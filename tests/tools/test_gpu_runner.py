"""Adversarial candidates against the GPU harness (GpuVerifier + runner child process).

Each hand-written kernel is wrong in one way the harness must catch: a wrong or missing output,
a mutated input, a shape it was tuned for, an out-of-bounds write and a hang. The `gpu` tests need a CUDA device; the
compile check of the same kernels runs everywhere.
"""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import prelude
from sparseditto.spec import parse_spec
from sparseditto.tools.contract import KernelCandidate, KernelLaunch
from sparseditto.tools.verifier import GpuVerifier

SIGNATURE = ("const int* __restrict__ rowptr, const int* __restrict__ colind, const value_t* __restrict__ values, "
             "const value_t* B, value_t* C, int M, int N")
ARGS = ("rowptr", "colind", "values", "B", "C", "M", "N")

# one thread per element of C: thread i computes C[row, col] with row = i / COLS, col = i % COLS
TEMPLATE = """
extern "C" __global__ void spmm_test(%(signature)s)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)M * N) return;
    %(prologue)s
    const int row = (int)(i / %(cols)s), col = (int)(i %% %(cols)s);
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int j = rowptr[row]; j < rowptr[row + 1]; ++j)
        acc += sd_to_f32(values[j]) * sd_to_f32(B[(long long)colind[j] * N + col]);
    %(guard)s
    C[(long long)row * N + col] = sd_from_f32(%(value)s);
    %(epilogue)s
}
"""


def kernel_source(cols="N", prologue="", guard="", value="acc", epilogue=""):
    return TEMPLATE % dict(signature=SIGNATURE, cols=cols, prologue=prologue, guard=guard, value=value, epilogue=epilogue)


def candidate(body: str, extra_launches: tuple[KernelLaunch, ...] = (), name: str = "adversarial") -> KernelCandidate:
    return KernelCandidate(
        name=name,
        family="csr_spmm",
        source=prelude() + body,
        kernels=(KernelLaunch(entry="spmm_test", grid=("ceil_div(M * N, 256)", "1", "1"), block=("256", "1", "1"), args=ARGS),
                 *extra_launches),
    )


@pytest.fixture(scope="module")
def spec():
    return parse_spec({"name": "adversarial", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                       "M": 512, "K": 512, "N": 64, "dtype": "fp32"})


@pytest.fixture(scope="module")
def verifier():
    return GpuVerifier(arch="sm_90", trials=3)


CLOBBER_B = ('\nextern "C" __global__ void clobber(value_t* B)\n'
             '{ if (blockIdx.x == 0 && threadIdx.x == 0) B[0] = sd_from_f32(sd_to_f32(B[0]) + 1.0f); }\n')
ADVERSARIAL = {
    "naive": kernel_source(),
    "zeros": kernel_source(value="0.f"),
    "half_rows": kernel_source(guard="if (row >= M / 2) return;"),
    "mutates_B": kernel_source() + CLOBBER_B,
    "assumes_N_64": kernel_source(cols="64"),  # maps threads as if every row of C had 64 columns
    "oob_write": kernel_source(epilogue="if (i == 0) C[(long long)1 << 40] = sd_from_f32(1.f);"),
    "spins": kernel_source(prologue="while (clock64() >= 0) { }"),
}


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_adversarial_kernels_compile(name, spec):
    """Without a GPU: the kernels below are rejected for what they do, not because they do not build."""
    from sparseditto.tools.verifier import CompileOnlyVerifier

    report = CompileOnlyVerifier().verify(candidate(ADVERSARIAL[name], name=name), spec)
    assert report.compiled, report.feedback[0].message
    assert report.stage("launch") is None


def failure(report):
    failed = [f for f in report.feedback if f.status in {"failed", "error"}]
    assert failed, f"expected a rejection, got {[(f.stage, f.status) for f in report.feedback]}"
    assert not report.correct
    return failed[0]


@pytest.mark.gpu
def test_correct_naive_kernel_passes(verifier, spec):
    report = verifier.verify(candidate(ADVERSARIAL["naive"], name="naive"), spec)
    assert report.compiled
    assert report.stage("correctness").status == "passed", report.feedback
    assert report.correct, report.feedback
    assert len(report.trials) >= 4 and all(t.passed for t in report.trials)
    assert any(t.held_out for t in report.trials)
    assert report.measurement is not None and report.measurement.median_us > 0
    assert report.device.get("arch", "").startswith("sm_")


@pytest.mark.gpu
def test_all_zeros_output_is_a_wrong_result(verifier, spec):
    fb = failure(verifier.verify(candidate(ADVERSARIAL["zeros"], name="zeros"), spec))
    assert (fb.stage, fb.error_type) == ("correctness", "wrong_result")


@pytest.mark.gpu
def test_half_the_rows_unwritten(verifier, spec):
    fb = failure(verifier.verify(candidate(ADVERSARIAL["half_rows"], name="half_rows"), spec))
    assert (fb.stage, fb.error_type) == ("correctness", "unwritten_output")


@pytest.mark.gpu
def test_overwriting_an_input_is_caught(verifier, spec):
    clobber = KernelLaunch(entry="clobber", grid=("1", "1", "1"), block=("32", "1", "1"), args=("B",))
    report = verifier.verify(candidate(ADVERSARIAL["mutates_B"], (clobber,), name="mutates_B"), spec)
    fb = failure(report)
    assert (fb.stage, fb.error_type) == ("correctness", "input_mutation")
    # the product itself was right: only the mutation failed the trials
    assert all(t.rel_error is not None and t.rel_error < 1e-5 for t in report.trials)


@pytest.mark.gpu
def test_a_kernel_tuned_to_N_64_fails_the_held_out_shape(verifier, spec):
    report = verifier.verify(candidate(ADVERSARIAL["assumes_N_64"], name="assumes_N_64"), spec)
    fb = failure(report)
    assert fb.stage == "correctness"
    assert fb.error_type in {"wrong_result", "unwritten_output"}
    assert "held-out" in (fb.location or "")
    assert all(t.passed for t in report.trials if not t.held_out)


@pytest.mark.gpu
def test_out_of_bounds_write_crashes_only_the_child(verifier, spec):
    report = verifier.verify(candidate(ADVERSARIAL["oob_write"], name="oob_write"), spec)
    fb = failure(report)
    assert fb.stage == "launch"
    assert fb.error_type in {"illegal_memory_access", "crash"}
    assert report.compiled
    # the device is still usable afterwards
    again = verifier.verify(candidate(ADVERSARIAL["naive"], name="naive_after_crash"), spec)
    assert again.stage("correctness").status == "passed", again.feedback


@pytest.mark.gpu
def test_infinite_loop_times_out(spec):
    report = GpuVerifier(arch="sm_90", trials=3, timeout_s=20).verify(candidate(ADVERSARIAL["spins"], name="spins"), spec)
    fb = failure(report)
    assert (fb.stage, fb.error_type) == ("launch", "timeout")

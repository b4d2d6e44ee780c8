"""How the runner judges an output and names a failed trial (pure NumPy; the GPU side is in the adversarial suite).

The cheats of the tolerance class are simulated here on a real CSR SpMM instance of the family, with the
family's own values (varied magnitudes, subnormal runs, IEEE specials) and bounds: each must fail its bound and
be named as the reviewer should read it, while an honest fp32 sum in any order passes.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.spec import parse_spec
from sparseditto.tools.correctness import CheckedOutput, classify_failure, error_is_spread, rel_error
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.results import Trial
from sparseditto.tools.values import numerics

TOL = 1e-5
RNG = np.random.default_rng(0)
FAMILY = get_family("csr_spmm")


def spec(dtype: str = "fp32"):
    return parse_spec({"operation": "spmm", "pattern": {"distribution": "power_law", "nnz_per_row": 12},
                       "M": 600, "K": 400, "N": 16, "dtype": dtype})


def instance(dtype: str = "fp32", specials: bool = False, seed: int = 1):
    problem = FAMILY.make_problem(spec(dtype), seed)
    if specials:
        problem = FAMILY.with_fresh_values(problem, np.random.default_rng(seed), specials=True)
    return problem


def sum_rows(problem, product=lambda a, b: a * b, acc_type=np.float32, reverse=False, keep=lambda p: True):
    """C = A B one row at a time, with each product and partial sum rounded to `acc_type` (a simulated kernel)."""
    d = problem.dtype
    vals = to_float64(problem.inputs["values"], d).astype(np.float32)
    B = to_float64(problem.inputs["B"], d).astype(np.float32)
    rowptr, colind = problem.inputs["rowptr"], problem.inputs["colind"]
    out = np.zeros((len(rowptr) - 1, B.shape[1]))
    with np.errstate(all="ignore"):
        for r in range(len(rowptr) - 1):
            acc = np.zeros(B.shape[1], acc_type)
            terms = range(rowptr[r], rowptr[r + 1])
            for j in (reversed(terms) if reverse else terms):
                p = product(vals[j], B[colind[j]]).astype(np.float32)
                acc = (acc + np.where(keep(p), p, 0).astype(acc_type)).astype(acc_type)
            out[r] = acc.astype(np.float32)
    return out


def judge(problem, out):
    refs = FAMILY.reference(problem)
    bounds = FAMILY.error_bounds(problem, refs)
    unwritten = np.zeros(out.shape, bool)
    return CheckedOutput.judge(out, refs["C"], TOL, unwritten, bounds["C"], numerics(problem.dtype).largest)


def classify_one(checked: CheckedOutput) -> str:
    failed = Trial(seed=1, shape={"M": 8}, held_out=False, rel_error=checked.rel_error, passed=False, failed_output="C",
                   non_finite=int((~np.isfinite(checked.out) & np.isfinite(checked.ref)).sum()))
    return classify_failure([failed], failed, {0: {"C": checked}})[0]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("specials", [False, True])
def test_an_honest_fp32_sum_in_any_order_meets_every_bound(dtype, specials):
    problem = instance(dtype, specials)
    for reverse in (False, True):
        out = sum_rows(problem, reverse=reverse)
        if dtype != "fp32":  # rounded once to the output type
            out = to_float64(round_to(out, dtype), dtype)
        checked = judge(problem, out)
        assert checked.passed, (dtype, reverse, checked.exceeded)


def round_to(values, dtype):
    from sparseditto.tools.dtypes import to_storage

    return to_storage(values, dtype)


def test_accumulating_in_fp16_where_fp32_is_promised_is_precision_loss():
    problem = instance("fp16")
    checked = judge(problem, to_float64(round_to(sum_rows(problem, acc_type=np.float16), "fp16"), "fp16"))
    assert not checked.passed
    assert classify_one(checked) == "precision_loss"


def test_dropping_small_products_is_precision_loss():
    problem = instance()
    checked = judge(problem, sum_rows(problem, keep=lambda p: np.abs(p) >= 1e-4))
    assert not checked.passed and classify_one(checked) == "precision_loss"


def test_products_of_tf32_inputs_in_an_fp32_problem_are_precision_loss():
    def tf32(x):
        return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)

    problem = instance()
    checked = judge(problem, sum_rows(problem, product=lambda a, b: tf32(a) * tf32(b)))
    assert not checked.passed and classify_one(checked) == "precision_loss"


def test_flushing_subnormals_is_caught_and_named_precision_loss():
    problem = instance()
    tiny = numerics("fp32").smallest_normal
    flush = lambda a, b: np.where(np.abs(a) < tiny, 0, a) * np.where(np.abs(b) < tiny, 0, b)  # noqa: E731
    checked = judge(problem, sum_rows(problem, product=flush))
    assert not checked.passed and classify_one(checked) == "precision_loss"


def test_a_few_outputs_written_as_zero_are_a_wrong_result():
    problem = instance()
    out = sum_rows(problem)
    out.flat[7::1009] = 0.0
    checked = judge(problem, out)
    assert not checked.passed and classify_one(checked) == "wrong_result"


def test_skipping_nan_and_inf_products_is_a_special_value_mismatch():
    problem = instance(specials=True)
    checked = judge(problem, sum_rows(problem, keep=np.isfinite))
    assert not checked.passed and classify_one(checked) == "special_value_mismatch"


def test_a_nan_written_where_the_result_is_finite_is_non_finite_output():
    problem = instance()
    out = sum_rows(problem)
    out[3, 2] = np.nan
    assert classify_one(judge(problem, out)) == "non_finite_output"


def test_a_norm_wise_tolerance_would_have_passed_these_cheats():
    """Why element bounds: each cheat above stays within the norm-wise fp32 tolerance of 1e-5 or near it."""
    problem = instance()
    ref = FAMILY.reference(problem)["C"]
    dropped = sum_rows(problem, keep=lambda p: np.abs(p) >= 1e-4)
    assert rel_error(dropped, ref) < 1e-3
    assert not judge(problem, dropped).passed


def test_varied_values_span_magnitudes_signs_and_subnormals():
    problem = instance()
    values = to_float64(problem.inputs["values"], "fp32")
    mags = np.abs(values[values != 0])
    assert (values < 0).any() and (values > 0).any()
    assert mags.max() / mags.min() > 2.0**100  # normal spread and subnormal runs
    assert (mags < numerics("fp32").smallest_normal).any()
    special = instance(specials=True)
    with_specials = to_float64(special.inputs["values"], "fp32")
    assert np.isnan(with_specials).any() and np.isposinf(with_specials).any() and np.isneginf(with_specials).any()
    # only in the stored values: a tensor-core tile multiplies B by explicit zeros where A has no entry
    assert np.isfinite(to_float64(special.inputs["B"], "fp32")).all()


# -- norm-wise families (not multilinear) keep the older rules -----------------------------------------------

def normwise(out, ref, unwritten=0):
    mask = np.zeros(out.shape, bool)
    mask[:unwritten] = True
    return CheckedOutput.judge(out, ref, TOL, mask, None, 3e38)


def trial(passed=True, held_out=False, order="candidate_first", rel=0.0, **kw) -> Trial:
    return Trial(seed=1, shape={"M": 8}, held_out=held_out, order=order, rel_error=rel, passed=passed, **kw)


def classify(trials, pairs):
    failed = next(t for t in trials if not t.passed)
    return classify_failure(trials, failed, {i: {"C": normwise(out, ref)} for i, (out, ref) in enumerate(pairs)})[0]


def test_zero_or_constant_output_is_far_off_whatever_the_scale():
    ref = RNG.normal(size=100) * 1e-6
    assert rel_error(np.zeros(100), ref) == 1.0
    assert rel_error(np.full(100, ref.mean()), ref) > 0.5
    assert rel_error(ref.copy(), ref) == 0.0


def test_spread_error_is_precision_loss_concentrated_error_is_wrong():
    ref = RNG.normal(size=1000)
    coarse = ref * (1 + RNG.normal(size=1000) * 1e-3)
    one_wrong = ref.copy()
    one_wrong[7] += 0.5
    assert error_is_spread(coarse, ref) and not error_is_spread(one_wrong, ref)
    assert classify([trial(False)], [(coarse, ref)]) == "precision_loss"
    assert classify([trial(False)], [(one_wrong, ref)]) == "wrong_result"


def test_an_answer_from_an_earlier_trial_is_stale():
    first, second = RNG.normal(size=50), RNG.normal(size=50)
    trials = [trial(), trial(False)]
    assert classify(trials, [(first, first), (first, second)]) == "stale_result"


def test_held_out_only_failures_are_named_first_even_when_unwritten():
    ref = RNG.normal(size=20)
    trials = [trial(), trial(), trial(False, held_out=True, rel=None, unwritten=3)]
    assert classify(trials, [(ref, ref), (ref, ref), (ref, ref + 1)]) == "held_out_failure"


def test_failing_only_after_the_library_ran_is_order_dependent():
    ref = RNG.normal(size=20)
    trials = [trial(), trial(False, order="library_first", rel=1.0), trial()]
    assert classify(trials, [(ref, ref), (ref * 0, ref), (ref, ref)]) == "order_dependent"


def test_mutation_unwritten_and_nan_take_precedence():
    ref = RNG.normal(size=20)
    assert classify([trial(False, inputs_unchanged=False)], [(ref, ref)]) == "input_mutation"
    assert classify([trial(False, rel=None, unwritten=4)], [(ref, ref)]) == "unwritten_output"
    assert classify([trial(False, rel=None, non_finite=2)], [(ref, ref)]) == "non_finite_output"


def test_unwritten_elements_fail_even_where_the_exact_result_is_nan():
    problem = instance(specials=True)
    ref = FAMILY.reference(problem)["C"]
    bounds = FAMILY.error_bounds(problem, {"C": ref})["C"]
    where_nan = np.isnan(ref)
    assert where_nan.any()
    checked = CheckedOutput.judge(np.where(where_nan, np.nan, ref), ref, TOL, where_nan, bounds, 3e38)
    assert not checked.passed


def test_the_failing_output_of_several_is_judged():
    ref, other = RNG.normal(size=50), RNG.normal(size=30)
    coarse = ref * (1 + RNG.normal(size=50) * 1e-3)
    failed = trial(False, errors={"rowsum": 0.0, "Y": rel_error(coarse, ref)}, failed_output="Y")
    kind, message = classify_failure([failed], failed, {0: {"rowsum": normwise(other, other), "Y": normwise(coarse, ref)}})
    assert kind == "precision_loss" and message.startswith("Y:")


@pytest.mark.parametrize("family", ["csr_spmm", "csr_spmv", "sparse24_gemm"])
def test_terms_counted_once_bound_every_value_set_as_counted_afresh(family):
    """The runner counts each element's terms once per structure and passes them to every value set's bounds."""
    fam = get_family(family)
    spec = parse_spec(fam.example_spec)
    problem = fam.make_problem(spec, 3, fam.tiny_shape(spec))
    terms = fam.element_terms(problem)
    fresh = fam.with_fresh_values(problem, np.random.default_rng(4))
    refs = fam.reference(fresh)
    shared, afresh = fam.error_bounds(fresh, refs, terms=terms), fam.error_bounds(fresh, refs)
    assert shared.keys() == afresh.keys()
    for name in shared:
        assert np.array_equal(shared[name].bound, afresh[name].bound)
        assert np.array_equal(terms[name], fam.element_terms(fresh)[name])

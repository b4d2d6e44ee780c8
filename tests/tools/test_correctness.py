"""How the runner names a failed correctness trial (pure functions; the GPU side is in the adversarial suite)."""

from __future__ import annotations

import numpy as np

from sparseditto.tools.results import Trial
from sparseditto.tools.correctness import classify_failure, error_is_spread, rel_error

TOL = 1e-5
RNG = np.random.default_rng(0)


def trial(passed=True, held_out=False, order="candidate_first", rel=0.0, **kw) -> Trial:
    return Trial(seed=1, shape={"M": 8}, held_out=held_out, order=order, rel_error=rel, passed=passed, **kw)


def classify(trials, outputs):
    failed = next(t for t in trials if not t.passed)
    return classify_failure(trials, failed, {i: {"C": pair} for i, pair in enumerate(outputs)}, {"C": TOL})[0]


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
    assert classify([trial(False, rel=rel_error(coarse, ref))], [(coarse, ref)]) == "precision_loss"
    assert classify([trial(False, rel=rel_error(one_wrong, ref))], [(one_wrong, ref)]) == "wrong_result"


def test_an_answer_from_an_earlier_trial_is_stale():
    first, second = RNG.normal(size=50), RNG.normal(size=50)
    trials = [trial(), trial(False, rel=rel_error(first, second))]
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


def test_the_failing_output_of_several_is_judged():
    ref, other = RNG.normal(size=50), RNG.normal(size=30)
    coarse = ref * (1 + RNG.normal(size=50) * 1e-3)
    failed = trial(False, rel=rel_error(coarse, ref), errors={"rowsum": 0.0, "Y": rel_error(coarse, ref)}, failed_output="Y")
    kind, message = classify_failure([failed], failed, {0: {"rowsum": (other, other), "Y": (coarse, ref)}},
                                     {"rowsum": TOL, "Y": TOL})
    assert kind == "precision_loss" and message.startswith("Y:")

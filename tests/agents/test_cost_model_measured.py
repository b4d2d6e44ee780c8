"""The SpMV cost model against the candidates measured on the H200 (`evals/results/issue14_h200/
spmv_candidates_measured.json`): a guard for later edits of the model. The model was fitted to these measurements, so
passing says the model still agrees with them, not that it predicts matrices it has not seen."""

from __future__ import annotations

import pytest

from sparseditto.evals.cost_model_check import cross_validated_picks, measured_features, priced_candidates


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    """(candidate, predicted us) for every measured candidate, its matrix remade from the seeded suite."""
    return priced_candidates(measured_features(tmp_path_factory.mktemp("measured_matrices")))


def test_every_measured_candidate_is_priced_within_a_factor_of_two(priced):
    ratios = {f"{c['matrix']} {c['kernel']} {c['params']}": c["us"] / p for c, p in priced}
    assert all(0.5 <= r <= 2.0 for r in ratios.values()), ratios


def test_the_models_fastest_measured_candidate_is_within_15_percent_of_the_measured_fastest(priced):
    for matrix in {c["matrix"] for c, _ in priced}:
        mine = [(c, p) for c, p in priced if c["matrix"] == matrix]
        chosen = min(mine, key=lambda cp: cp[1])[0]
        best = min(c["us"] for c, _ in mine)
        assert chosen["us"] <= 1.15 * best, (matrix, chosen["kernel"], chosen["params"], chosen["us"], best)


def test_a_matrix_left_out_is_picked_for_without_its_own_measurements(priced):
    """Its candidates' times changed a hundredfold or reversed, the pick on it stays; another matrix's do move the
    calibration."""
    picks = {m: (pick["kernel"], pick["params"]) for m, pick, _, _ in cross_validated_picks(priced)}
    for matrix in ("road_perm_8m", "stencil3d_7pt_10m"):
        mine = sorted(c["us"] for c, _ in priced if c["matrix"] == matrix)
        reversed_times = {u: t for u, t in zip(mine, reversed(mine))}
        changed = [({**c, "us": reversed_times[c["us"]] * 100} if c["matrix"] == matrix else c, p) for c, p in priced]
        moved = {m: (pick["kernel"], pick["params"]) for m, pick, _, _ in cross_validated_picks(changed)}
        assert moved[matrix] == picks[matrix]
        assert moved != picks  # the others' calibration saw the change

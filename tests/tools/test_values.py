"""The value draws every family's trials use, in every float type the contract knows (fp8 included)."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.values import draw_values, numerics

FLOAT_TYPES = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_draws_reach_the_subnormal_range_and_stay_finite(name):
    num = numerics(name)
    values = to_float64(to_storage(draw_values(np.random.default_rng(3), 50_000, name), name), name)
    assert np.isfinite(values).all()
    magnitude = np.abs(values)
    assert ((magnitude > 0) & (magnitude < num.smallest_normal)).any(), "no subnormal values drawn"
    assert (magnitude >= num.smallest_normal).mean() > 0.8
    assert (values < 0).any() and (values > 0).any()


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_specials_are_the_ones_the_type_has(name):
    num = numerics(name)
    values = draw_values(np.random.default_rng(5), 1000, name, specials=True)
    assert np.isnan(values).sum() == int(num.has_nan)
    assert np.isinf(values).sum() == 2 * int(num.has_inf)


@pytest.mark.parametrize("size", [0, 1, 64, 65, 1000, 200_003])
def test_run_lengths_cover_the_values_with_no_run_to_spare(size):
    from sparseditto.tools.values import _RUN_LENGTH, _run_lengths

    lengths = _run_lengths(np.random.default_rng(size), size)
    assert lengths.sum() >= size and lengths[:-1].sum() < max(size, 1)
    assert lengths.min() >= 1 and lengths.max() <= _RUN_LENGTH


def test_a_large_draw_in_chunks_is_one_array_per_seed_with_the_same_values(monkeypatch):
    """Drawn on threads in chunks (each from its own spawned generator): a seed still gives one array, every chunk
    its own values, and the chunks the same kinds of value as a single draw."""
    from sparseditto.tools import chunks

    monkeypatch.setattr(chunks, "CHUNK", 4096)
    first, again = (draw_values(np.random.default_rng(11), 40_000, "fp16", specials=True) for _ in range(2))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[:4096], first[4096:8192])
    assert np.isnan(first).sum() == 1 and np.isinf(first).sum() == 2
    finite = to_float64(to_storage(first[np.isfinite(first)], "fp16"), "fp16")
    magnitude = np.abs(finite)
    assert ((magnitude > 0) & (magnitude < numerics("fp16").smallest_normal)).any()
    assert 0.45 < (finite < 0).mean() < 0.55


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_rounding_to_storage_in_chunks_gives_the_same_bits(monkeypatch, name):
    from sparseditto.tools import chunks

    values = draw_values(np.random.default_rng(13), 30_000, name, specials=True).reshape(100, 300)
    whole = to_storage(values, name)
    monkeypatch.setattr(chunks, "CHUNK", 1000)
    np.testing.assert_array_equal(to_storage(values, name), whole)
    assert whole.shape == (100, 300)

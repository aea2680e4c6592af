"""The learned scheduler's features (models/scheduling/features.py): bounded, and meaning what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.scheduling.features import FEATURES, RoundState, StateNormaliser

EXTREMES = [math.nan, math.inf, -math.inf, 1e300, -1e300, 0.0, -5.0, 1e-300]


@pytest.mark.parametrize("x", EXTREMES)
def test_normalisation_is_bounded_for_extreme_inputs(x):
    for budget in (1.0, None, math.inf, 0.0):
        norm = StateNormaliser(475.0, 60, budget)
        first = norm(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 1.0))
        assert first.shape == (len(FEATURES),)
        for field_index in range(7):
            raw = [1, 0.5, 100.0, 0.01, 0.2, 0.3, 0.5]
            raw[field_index] = x
            raw[0] = int(raw[0]) if math.isfinite(raw[0]) and abs(raw[0]) < 1e18 else raw[0]
            out = norm(RoundState(*raw))
            assert np.all(np.isfinite(out)), (field_index, x, out)
            assert np.all(out >= -1.0) and np.all(out <= 1.5), (field_index, x, out)


@pytest.mark.parametrize("first", [1e-300, 1e300, 0.2])
@pytest.mark.parametrize("later", EXTREMES)
def test_normalisation_is_bounded_whatever_the_references(first, later):
    """References set by an extreme first round, then extreme values against them."""
    norm = StateNormaliser(475.0, 60, 0.05)
    norm(RoundState(1, first, first, first, first, first, first))
    for _ in range(2):
        out = norm(RoundState(2, later, later, later, later, later, later))
        assert np.all(np.isfinite(out)) and np.all(out >= -1.0) and np.all(out <= 1.5), out


def test_normalisation_means_what_it_says():
    norm = StateNormaliser(target_return=475.0, max_rounds=60, budget_usd=0.05)
    start = norm(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05))
    np.testing.assert_allclose(start, [0, 0, 0, 0, 0, 0, 1], atol=1e-7)
    first = norm(RoundState(1, 0.0, 25.0, 0.02, 0.1, 0.2, 0.04))  # sets the references
    assert first[2] == 0.0 and first[4] == 0.0 and first[5] == 0.0
    assert first[3] == pytest.approx(math.tanh(1.0))
    assert first[6] == pytest.approx(0.8)
    later = norm(RoundState(30, 20.0, 250.0, 0.0, 0.2, 0.1, 0.01))
    assert later[0] == pytest.approx(0.5)
    assert later[1] == pytest.approx(math.tanh(math.log1p(20.0) / 3.0))
    assert later[2] == pytest.approx(0.5)  # halfway from the first return (25) to J
    assert later[4] == pytest.approx(math.tanh(math.log(2.0) / 2.0))  # learner twice its first time
    assert later[5] == pytest.approx(math.tanh(math.log(0.5) / 2.0))
    held = norm(RoundState(31, 20.0, math.nan, 0.0, 0.2, 0.1, 0.01))  # no episode finished
    assert held[2] == pytest.approx(0.5)
    assert norm(RoundState(32, 0.0, 475.0, 0.0, 0.2, 0.1, 0.0))[2] == pytest.approx(1.0)
    # Another workload, another scale: the same progress reads the same.
    other = StateNormaliser(target_return=-100.0, max_rounds=200, budget_usd=2.0)
    other(RoundState(1, 0.0, -500.0, 0.0, 1.0, 1.0, 2.0))
    assert other(RoundState(100, 0.0, -300.0, 0.0, 1.0, 1.0, 1.0))[[0, 2, 6]] == pytest.approx([0.5, 0.5, 0.5])


def test_round_state_is_importable_from_the_schedulers_module():
    from models.scheduling import schedulers

    assert schedulers.RoundState is RoundState
    assert RoundState(1, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0).as_tuple() == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)

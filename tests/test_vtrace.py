"""V-trace against values worked out by hand on a 6-step fragment."""

from __future__ import annotations

import numpy as np
import pytest

from models.impact.vtrace import vtrace
from models.rl.gae import compute_gae, next_values_for

GAMMA = 0.9


def _fragment():
    """One env, 6 steps: episode A terminates at t=2, episode B is truncated at t=4 (its final
    observation is worth 2.0), episode C is cut by the fragment's end (last observation 1.2)."""
    rewards = np.array([1.0, 2.0, 0.5, 1.0, -1.0, 3.0])[:, None]
    values = np.array([0.5, 1.0, 1.5, 0.2, 0.4, 0.8])[:, None]
    ratios = np.array([0.5, 2.0, 1.0, 1.5, 0.9, 0.7])[:, None]  # pi/mu
    behaviour_logp = np.log(np.full((6, 1), 0.4))
    target_logp = behaviour_logp + np.log(ratios)
    terminated = np.zeros((6, 1), bool)
    terminated[2] = True
    truncated = np.zeros((6, 1), bool)
    truncated[4] = True
    next_values = next_values_for(values, np.array([1.2]), np.array([[4, 0]]), np.array([2.0]))
    return behaviour_logp, target_logp, rewards, values, next_values, terminated, truncated


def test_vtrace_matches_the_hand_computation_with_clipping_and_both_endings():
    out = vtrace(*_fragment(), gamma=GAMMA, rho_bar=1.0, c_bar=0.8)
    # rho = min(1, pi/mu) = [0.5, 1, 1, 1, 0.9, 0.7]; c = min(0.8, pi/mu) = [0.5, .8, .8, .8, .8, .7]
    # Episode C (t=5), bootstraps V(last obs) = 1.2:
    #   delta5 = 0.7 * (3 + 0.9*1.2 - 0.8) = 2.296;  v5 = 0.8 + 2.296 = 3.096;  A5 = 2.296
    # Episode B (t=3..4), truncated at 4: V(final obs) = 2.0, the trace stops there:
    #   delta4 = 0.9 * (-1 + 0.9*2.0 - 0.4) = 0.36;  v4 = 0.4 + 0.36 = 0.76
    #   delta3 = 1.0 * (1 + 0.9*0.4 - 0.2) = 1.16;   v3 = 0.2 + 1.16 + 0.9*0.8*0.36 = 1.6192
    #   A4 = 0.9 * (-1 + 0.9*2.0 - 0.4) = 0.36;      A3 = 1.0 * (1 + 0.9*0.76 - 0.2) = 1.484
    # Episode A (t=0..2), terminated at 2: nothing after it:
    #   delta2 = 1.0 * (0.5 + 0 - 1.5) = -1.0;       v2 = 1.5 - 1.0 = 0.5
    #   delta1 = 1.0 * (2 + 0.9*1.5 - 1.0) = 2.35;   v1 = 1.0 + 2.35 + 0.9*0.8*(-1.0) = 2.63
    #   delta0 = 0.5 * (1 + 0.9*1.0 - 0.5) = 0.7;    v0 = 0.5 + 0.7 + 0.9*0.5*1.63 = 1.9335
    #   A2 = 1.0 * (0.5 + 0 - 1.5) = -1.0;  A1 = 1.0 * (2 + 0.9*0.5 - 1.0) = 1.45
    #   A0 = 0.5 * (1 + 0.9*2.63 - 0.5) = 1.4335
    expected_vs = [1.9335, 2.63, 0.5, 1.6192, 0.76, 3.096]
    expected_adv = [1.4335, 1.45, -1.0, 1.484, 0.36, 2.296]
    np.testing.assert_allclose(out.vs[:, 0], expected_vs, rtol=1e-12)
    np.testing.assert_allclose(out.advantages[:, 0], expected_adv, rtol=1e-12)
    np.testing.assert_allclose(out.clipped_rhos[:, 0], [0.5, 1.0, 1.0, 1.0, 0.9, 0.7], rtol=1e-12)


def test_vtrace_without_clipping_is_the_on_policy_lambda_return():
    # pi == mu and lambda = 0.95: v_t is GAE(0.95)'s return (Espeholt et al., remark 1).
    b, _, rewards, values, next_values, terminated, truncated = _fragment()
    out = vtrace(b, b, rewards, values, next_values, terminated, truncated, gamma=GAMMA,
                 rho_bar=1.0, c_bar=1.0, lambda_=0.95)
    advantages, returns = compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, 0.95,
                                      dtype=np.float64)
    np.testing.assert_allclose(out.vs, returns, rtol=1e-12)


@pytest.mark.parametrize("columns", [2, 3])
def test_columns_are_independent(columns):
    frag = _fragment()
    alone = vtrace(*frag, gamma=GAMMA, rho_bar=1.0, c_bar=0.8)
    wide = [np.repeat(a, columns, axis=1) for a in frag]
    together = vtrace(*wide, gamma=GAMMA, rho_bar=1.0, c_bar=0.8)
    for c in range(columns):
        np.testing.assert_allclose(together.vs[:, c], alone.vs[:, 0])
        np.testing.assert_allclose(together.advantages[:, c], alone.advantages[:, 0])

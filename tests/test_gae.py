"""GAE against advantages worked out by hand, step by step (no reimplementation of the loop)."""

from __future__ import annotations

import numpy as np
import pytest

from models.rl.gae import compute_gae, episode_gae, next_values_for

GAMMA, LAM = 0.9, 0.8
GL = GAMMA * LAM  # 0.72: the trace decay between consecutive steps of one episode


def col(*xs: float) -> np.ndarray:
    """A [T, 1] column: one env."""
    return np.array(xs, dtype=np.float64).reshape(-1, 1)


def flags(t_len: int, *ends: int) -> np.ndarray:
    out = np.zeros((t_len, 1), dtype=bool)
    out[list(ends), 0] = True
    return out


def no_trunc() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 2), dtype=np.int64), np.zeros(0)


def test_no_episode_end_bootstraps_last_value():
    rewards, values, v_last = col(1, 2, 3), col(0.5, 1.0, 1.5), np.array([2.0])
    next_values = next_values_for(values, v_last, *no_trunc())
    np.testing.assert_array_equal(next_values, col(1.0, 1.5, 2.0))
    adv, ret = compute_gae(rewards, values, next_values, flags(3), flags(3), GAMMA, LAM)

    d2 = 3 + 0.9 * 2.0 - 1.5  # 3.3   bootstraps V(last obs)
    d1 = 2 + 0.9 * 1.5 - 1.0  # 2.35
    d0 = 1 + 0.9 * 1.0 - 0.5  # 1.4
    a2 = d2                   # 3.3
    a1 = d1 + 0.72 * a2       # 4.726
    a0 = d0 + 0.72 * a1       # 4.80272
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [4.80272, 4.726, 3.3], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [4.80272 + 0.5, 4.726 + 1.0, 3.3 + 1.5], rtol=1e-6)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    assert adv.shape == ret.shape == (3, 1)


# One episode ends at t=1 in a 4-step fragment; V(obs) = [1, 2, 3, 4], V(last obs) = 5.
REWARDS4, VALUES4, LAST4 = col(1, 1, 1, 1), col(1, 2, 3, 4), np.array([5.0])


def test_terminated_mid_fragment_bootstraps_zero_and_cuts_trace():
    next_values = next_values_for(VALUES4, LAST4, *no_trunc())
    adv, ret = compute_gae(REWARDS4, VALUES4, next_values, flags(4, 1), flags(4), GAMMA, LAM)

    d3 = 1 + 0.9 * 5 - 4   # 1.5
    d2 = 1 + 0.9 * 4 - 3   # 1.6
    d1 = 1 + 0.9 * 0 - 2   # -1.0  terminated: no bootstrap
    d0 = 1 + 0.9 * 2 - 1   # 1.8   next obs is in the same episode
    a3 = d3                # 1.5
    a2 = d2 + 0.72 * a3    # 2.68
    a1 = d1                # -1.0  trace cut: nothing from the next episode
    a0 = d0 + 0.72 * a1    # 1.08
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2, a3], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [1.08, -1.0, 2.68, 1.5], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [2.08, 1.0, 5.68, 5.5], rtol=1e-6)


def test_truncated_mid_fragment_bootstraps_final_obs_value_and_cuts_trace():
    # V(final obs of the truncated episode) = 10, distinct from V(next stored obs) = 3.
    next_values = next_values_for(VALUES4, LAST4, np.array([[1, 0]]), np.array([10.0]))
    np.testing.assert_array_equal(next_values, col(2, 10, 4, 5))
    adv, ret = compute_gae(REWARDS4, VALUES4, next_values, flags(4), flags(4, 1), GAMMA, LAM)

    d3 = 1 + 0.9 * 5 - 4    # 1.5
    d2 = 1 + 0.9 * 4 - 3    # 1.6
    d1 = 1 + 0.9 * 10 - 2   # 8.0   bootstraps V(final obs)
    d0 = 1 + 0.9 * 2 - 1    # 1.8
    a3 = d3                 # 1.5
    a2 = d2 + 0.72 * a3     # 2.68
    a1 = d1                 # 8.0   trace cut
    a0 = d0 + 0.72 * a1     # 7.56
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2, a3], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [7.56, 8.0, 2.68, 1.5], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [8.56, 10.0, 5.68, 5.5], rtol=1e-6)


def two_env_gae(rewards_env1: list[float]):
    rewards = np.column_stack([REWARDS4[:, 0], rewards_env1])
    values = np.column_stack([VALUES4[:, 0], np.zeros(4)])
    next_values = next_values_for(values, np.array([5.0, 0.0]), *no_trunc())
    terminated = np.zeros((4, 2), dtype=bool)
    terminated[1, 0] = True
    return compute_gae(rewards, values, next_values, terminated, np.zeros((4, 2), dtype=bool),
                       GAMMA, LAM)


def test_two_envs_do_not_leak_into_each_other():
    adv, ret = two_env_gae([0, 0, 0, 1])
    # Column 0 is the terminated case above, unchanged by its neighbour.
    np.testing.assert_allclose(adv[:, 0], [1.08, -1.0, 2.68, 1.5], rtol=1e-6)
    # Column 1: V = 0 everywhere, one reward at the end: A_t = 0.72 ** (3 - t).
    np.testing.assert_allclose(adv[:, 1], [0.373248, 0.5184, 0.72, 1.0], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 1], [0.373248, 0.5184, 0.72, 1.0], rtol=1e-6)
    # Changing env 1's rewards leaves env 0 bit-identical.
    adv2, _ = two_env_gae([100, -50, 7, 3])
    np.testing.assert_array_equal(adv2[:, 0], adv[:, 0])
    assert not np.allclose(adv2[:, 1], adv[:, 1])


@pytest.mark.parametrize(
    ("terminated_at", "v_last", "expected_returns"),
    [
        # rewards 1, 2, 3, 4; gamma = lambda = 1 gives undiscounted Monte-Carlo returns.
        ((1, 3), 100.0, [1 + 2, 2, 3 + 4, 4]),           # two whole episodes: V(last) unused
        ((1,), 100.0, [1 + 2, 2, 3 + 4 + 100, 4 + 100]),  # open episode bootstraps V(last)
        ((), 0.0, [10, 9, 7, 4]),                          # one open episode, V(last) = 0
    ],
)
def test_lambda_one_gamma_one_gives_monte_carlo_returns(terminated_at, v_last, expected_returns):
    rewards = col(1, 2, 3, 4)
    values = col(0.3, -1.0, 2.0, 7.0)  # arbitrary: MC returns do not depend on them
    next_values = next_values_for(values, np.array([v_last]), *no_trunc())
    adv, ret = compute_gae(rewards, values, next_values, flags(4, *terminated_at), flags(4), 1.0, 1.0)
    np.testing.assert_allclose(ret[:, 0], expected_returns, rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], np.array(expected_returns) - values[:, 0], rtol=1e-6)


def test_lambda_zero_is_one_step_td():
    next_values = next_values_for(VALUES4, LAST4, *no_trunc())
    adv, _ = compute_gae(REWARDS4, VALUES4, next_values, flags(4), flags(4), GAMMA, 0.0)
    np.testing.assert_allclose(adv[:, 0], [1 + 0.9 * 2 - 1, 1 + 0.9 * 3 - 2, 1 + 0.9 * 4 - 3,
                                           1 + 0.9 * 5 - 4], rtol=1e-6)


def test_next_values_for_places_truncated_values_at_t_n():
    # T = 3, N = 2 (not square, so a swapped (n, t) index lands elsewhere or out of range).
    values = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    last = np.array([6.0, 7.0])
    trunc_index = np.array([[1, 0], [2, 1]])
    out = next_values_for(values, last, trunc_index, np.array([-10.0, -20.0]))
    np.testing.assert_array_equal(out, [[2.0, 3.0],
                                        [-10.0, 5.0],   # (t=1, n=0) truncated
                                        [6.0, -20.0]])  # (t=2, n=1) truncated: overrides V(last)
    np.testing.assert_array_equal(values, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])  # input untouched


def test_next_values_for_without_truncations():
    values = np.array([[0.0, 1.0], [2.0, 3.0]])
    out = next_values_for(values, np.array([8.0, 9.0]), np.zeros((0, 2), dtype=np.int64), np.zeros(0))
    np.testing.assert_array_equal(out, [[2.0, 3.0], [8.0, 9.0]])


# -- one complete episode (the scheduler agent's) ---------------------------------------------

def test_episode_gae_of_a_finished_episode_by_hand():
    rewards, values = np.array([1.0, 2.0]), np.array([0.5, 1.0])
    adv, ret = episode_gae(rewards, values, gamma=0.9, gae_lambda=0.5)
    delta1 = 2.0 - 1.0  # last step: no value after the end
    delta0 = 1.0 + 0.9 * 1.0 - 0.5
    np.testing.assert_allclose(adv, [delta0 + 0.9 * 0.5 * delta1, delta1])
    np.testing.assert_allclose(ret, adv + values)
    assert adv.dtype == ret.dtype == np.float64 and adv.shape == (2,)


def reference_episode_gae(rewards, values, gamma, lam):
    """The scheduler agent's own 1-D loop before it used models/rl/gae.py."""
    adv = np.zeros(len(rewards), dtype=np.float64)
    last = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + values


@pytest.mark.parametrize("length", [1, 2, 7, 60])
def test_episode_gae_is_bit_identical_to_the_one_dimensional_loop(length):
    rng = np.random.default_rng(length)
    rewards, values = rng.normal(size=length) * 50, rng.normal(size=length)
    adv, ret = episode_gae(rewards, values, gamma=0.99, gae_lambda=0.95)
    ref_adv, ref_ret = reference_episode_gae(rewards, values, 0.99, 0.95)
    np.testing.assert_array_equal(adv, ref_adv)
    np.testing.assert_array_equal(ret, ref_ret)


def test_episode_gae_of_an_empty_episode():
    adv, ret = episode_gae(np.zeros(0), np.zeros(0), gamma=0.99, gae_lambda=0.95)
    assert adv.shape == ret.shape == (0,)

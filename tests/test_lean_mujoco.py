"""The lean MuJoCo step (models/envs/lean_mujoco.py) against gymnasium's own, bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

from models.envs.batch import EnvBatch, make_env
from models.envs.lean_mujoco import lean_step_for

LEAN_ENVS = ("Hopper-v5", "HalfCheetah-v5", "Humanoid-v5")


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("env_id", LEAN_ENVS)
@pytest.mark.parametrize("action_scale", [1.0, 3.0])  # 3.0: outside the action box, as a raw env accepts
def test_a_lean_step_is_gymnasiums_step_bit_for_bit(env_id, action_scale):
    """Same seed, same actions: every observation, reward, termination and truncation has the same
    bits, across terminations, time-limit truncations (a 22-step limit, about a random episode's length) and seeded resets, and the
    simulator's state ends the same."""
    reference, lean_env = (gym.make(env_id, max_episode_steps=22) for _ in range(2))
    lean = lean_step_for(lean_env)
    assert lean is not None
    rng = np.random.default_rng(7)
    high = reference.action_space.high
    reference.reset(seed=3)
    lean_env.reset(seed=3)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(400):
        action = (rng.uniform(-high, high) * action_scale).astype(np.float32)
        obs, reward, terminated, truncated, _ = reference.step(action)
        lean_obs, lean_reward, lean_terminated, lean_truncated, info = lean(action)
        assert info is None
        assert _same_bits(obs, lean_obs)
        assert _same_bits(reward, lean_reward)
        assert (terminated, truncated) == (lean_terminated, lean_truncated)
        assert type(terminated) is type(lean_terminated)
        if terminated or truncated:
            ends["terminated" if terminated else "truncated"] += 1
            assert _same_bits(reference.reset()[0], lean_env.reset()[0])
    assert ends["truncated"] > 0  # the time limit was crossed
    if env_id != "HalfCheetah-v5":  # the cheetah never falls
        assert ends["terminated"] > 0
    for field in ("qpos", "qvel", "act", "time"):
        assert _same_bits(getattr(reference.unwrapped.data, field), getattr(lean_env.unwrapped.data, field))


def test_a_lean_batch_samples_what_a_gymnasium_batch_samples():
    """EnvBatch(lean=True) against EnvBatch(): the same observations, rewards, ends and episode
    returns; only the step infos stay empty."""
    plain, lean = EnvBatch("Hopper-v5", 2, seed=5), EnvBatch("Hopper-v5", 2, seed=5, lean=True)
    rng = np.random.default_rng(0)
    for _ in range(300):
        action = rng.uniform(-1.5, 1.5, (2, 3)).astype(np.float32)
        for a, b in zip(plain.step(action), lean.step(action), strict=True):
            if isinstance(a, dict):
                assert a.keys() == b.keys() and all(_same_bits(a[k], b[k]) for k in a)
            else:
                assert _same_bits(a, b)
    assert plain.completed_returns == lean.completed_returns and plain.completed_returns
    assert plain.completed_lengths == lean.completed_lengths
    assert plain.infos[0] and lean.infos == [{}, {}]


class _CustomHopper(HopperEnv):
    pass


@pytest.mark.parametrize("build", [
    lambda: gym.make("CartPole-v1"),  # not a lean env
    lambda: gym.make("Walker2d-v5"),  # MuJoCo, but not one of the three
    lambda: gym.make("Hopper-v4"),  # another version's dynamics
    lambda: gym.wrappers.ClipReward(gym.make("Hopper-v5"), -1.0, 1.0),  # a wrapper that changes the step
    lambda: gym.make("Hopper-v5", render_mode="rgb_array"),
    lambda: gym.wrappers.TimeLimit(_CustomHopper(), 100),  # a subclass may override anything
    lambda: gym.make("Hopper-v5", max_episode_steps=None).unwrapped,  # no time limit to keep
])
def test_envs_the_lean_step_does_not_know_step_through_gymnasium(build):
    env = build()
    try:
        assert lean_step_for(env) is None
    finally:
        env.close()


def test_custom_parameters_are_read_from_the_env():
    """A Hopper made with a narrower healthy z range terminates where gymnasium's does."""
    reference, lean_env = (make_env("Hopper-v5") for _ in range(2))
    for env in (reference, lean_env):
        env.unwrapped._healthy_z_range = (1.2, float("inf"))
    lean = lean_step_for(lean_env)
    reference.reset(seed=1)
    lean_env.reset(seed=1)
    action = np.zeros(3, dtype=np.float32)
    for _ in range(200):
        expected = reference.step(action)
        got = lean(action)
        assert expected[2] == got[2] and _same_bits(expected[1], got[1])
        if expected[2]:
            break
    assert expected[2], "the narrower range never ended an episode"


def test_velocities_beyond_hoppers_observation_clip_are_clipped_alike():
    reference, lean_env = (make_env("Hopper-v5") for _ in range(2))
    lean = lean_step_for(lean_env)
    for env in (reference, lean_env):
        env.reset(seed=2)
        u = env.unwrapped
        u.set_state(u.init_qpos, np.linspace(-30.0, 30.0, u.model.nv))
    action = np.full(3, 0.5, dtype=np.float32)
    expected, got = reference.step(action), lean(action)
    assert np.abs(expected[0][5:]).max() == 10.0  # the clip was exercised
    assert _same_bits(expected[0], got[0]) and _same_bits(expected[1], got[1])

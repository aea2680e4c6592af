"""One actor's fragment: shapes, episode bookkeeping, terminated vs truncated, determinism."""

from __future__ import annotations

import dataclasses
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from models.envs.batch import EnvBatch, env_spaces
from models.rl.policy import ActorCritic, weights_to_bytes
from models.rl.rollout import ActorJob, RolloutBatch, run_actor, sample_fragment

T, N = 300, 2


@functools.cache
def cartpole_weights() -> bytes:
    # Built once: orthogonal init is not bit-identical across torch thread counts, and run_actor
    # sets one thread, so weights rebuilt after a run could differ in the last bit.
    torch.manual_seed(0)
    return weights_to_bytes(ActorCritic(env_spaces("CartPole-v1"), (64, 64)))


def cartpole_job(seed: int = 4) -> ActorJob:
    return ActorJob(env_id="CartPole-v1", round_index=2, actor_index=1, seed=seed, steps_per_env=T,
                    envs_per_actor=N, hidden=(64, 64), weights=cartpole_weights(), requested_at=0.0)


@pytest.fixture(scope="module")
def cartpole() -> RolloutBatch:
    return run_actor(cartpole_job())


def episodes_from_buffers(b: RolloutBatch) -> tuple[list[float], list[int]]:
    """Returns and lengths of episodes that ended in the fragment, in (t, env) order of their end."""
    done = b.terminated | b.truncated
    running_return = np.zeros(b.rewards.shape[1])
    running_length = np.zeros(b.rewards.shape[1], dtype=int)
    returns, lengths = [], []
    for t in range(b.rewards.shape[0]):
        running_return += b.rewards[t]
        running_length += 1
        for i in np.flatnonzero(done[t]):
            returns.append(float(running_return[i]))
            lengths.append(int(running_length[i]))
            running_return[i], running_length[i] = 0.0, 0
    return returns, lengths


def test_cartpole_shapes(cartpole):
    b = cartpole
    assert b.obs.shape == (T, N, 4) and b.obs.dtype == np.float32
    assert b.actions.shape == (T, N) and b.actions.dtype == np.int64
    for name in ("logp", "rewards", "terminated", "truncated"):
        assert getattr(b, name).shape == (T, N), name
    assert b.last_obs.shape == (N, 4)
    assert b.trunc_index.shape[1] == 2 and b.trunc_obs.shape[1:] == (4,)
    assert b.steps == T * N
    assert set(np.unique(b.actions)) <= {0, 1}
    assert np.all(b.logp <= 0) and np.all(b.logp > np.log(0.2))  # near-uniform initial policy
    assert b.actor_index == 1


def test_cartpole_terminated_truncated_consistency(cartpole):
    b = cartpole
    assert not np.any(b.terminated & b.truncated)
    # 300 steps from fresh envs cannot reach CartPole's 500-step limit: every end is a termination.
    assert not b.truncated.any() and len(b.trunc_index) == 0 and len(b.trunc_obs) == 0
    assert b.terminated.sum() >= 5  # a random policy falls over within ~10-40 steps
    # The step after a termination starts a new episode: CartPole resets to |state| <= 0.05.
    for t, i in zip(*np.nonzero(b.terminated[:-1]), strict=True):
        assert np.all(np.abs(b.obs[t + 1, i]) <= 0.05)


def test_cartpole_episode_returns_are_sums_of_rewards(cartpole):
    b = cartpole
    assert np.all(b.rewards == 1.0)
    returns, lengths = episodes_from_buffers(b)
    assert len(returns) == int(b.terminated.sum()) == len(b.episode_returns)
    assert b.episode_returns == returns
    assert b.episode_lengths == lengths
    assert b.episode_returns == [float(n) for n in b.episode_lengths]  # reward 1 per step
    assert all(1 <= n <= T for n in b.episode_lengths)


def test_run_actor_timings(cartpole):
    t = cartpole.timings
    assert t.dispatched_at is None and t.received_at is None  # the backend's to fill
    assert t.requested_at == t.started_at  # requested_at=0.0 falls back to the start time
    assert min(t.startup_s, t.weight_load_s, t.sampling_s) >= 0
    assert t.sampled_at >= t.started_at + t.sampling_s


def assert_same_batch(a: RolloutBatch, b: RolloutBatch) -> None:
    for f in dataclasses.fields(RolloutBatch):
        if f.name == "timings":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


def test_same_job_gives_identical_batch(cartpole):
    assert_same_batch(run_actor(cartpole_job()), cartpole)


def test_different_seed_gives_a_different_batch(cartpole):
    other = run_actor(cartpole_job(seed=5))
    assert not np.array_equal(other.obs, cartpole.obs)
    assert not np.array_equal(other.actions, cartpole.actions)


# -- truncation, with a tiny env whose observations say where the episode is -------------------

class Counter(gym.Env):
    """obs = [steps so far, sum of actions]; reward = 1 + action; terminates when the sum hits 4.

    Registered with a 6-step time limit, so episodes end both ways, sometimes on the same step.
    """

    observation_space = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = np.zeros(2, np.float32)
        return self.state.copy(), {}

    def step(self, action):
        self.state += np.array([1.0, float(action)], np.float32)
        return self.state.copy(), 1.0 + float(action), bool(self.state[1] >= 4), False, {}


COUNTER_ID = "MinionsTestCounter-v0"
if COUNTER_ID not in gym.registry:
    gym.register(id=COUNTER_ID, entry_point=Counter, max_episode_steps=6)


def coin_flips(seed: int):
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray):
        return rng.integers(0, 2, size=obs.shape[0]), np.full(obs.shape[0], np.log(0.5), np.float32)

    return act


@pytest.fixture(scope="module")
def counter() -> RolloutBatch:
    envs = EnvBatch(COUNTER_ID, 3, seed=0)
    try:
        return sample_fragment(coin_flips(0), envs, 200)
    finally:
        envs.close()


def test_truncated_steps_are_recorded_with_their_final_obs(counter):
    b = counter
    assert b.truncated.any() and b.terminated.any()
    assert not np.any(b.terminated & b.truncated)
    np.testing.assert_array_equal(np.argwhere(b.truncated), b.trunc_index)  # (t, n), row-major order
    assert len(b.trunc_obs) == len(b.trunc_index)
    # The final observation of a truncated episode is step 6 with an action sum below 4 ...
    np.testing.assert_array_equal(b.trunc_obs[:, 0], 6.0)
    assert np.all(b.trunc_obs[:, 1] < 4)
    # ... and the stored next observation is the reset one.
    for t, i in b.trunc_index:
        if t + 1 < len(b.obs):
            np.testing.assert_array_equal(b.obs[t + 1, i], [0.0, 0.0])


def test_an_episode_ending_both_ways_counts_as_terminated(counter):
    b = counter
    acts_sum = np.zeros(3)
    steps = np.zeros(3)
    both = 0
    for t in range(len(b.obs)):
        steps += 1
        acts_sum += b.actions[t]
        for i in range(3):
            term, limit = acts_sum[i] >= 4, steps[i] >= 6
            assert b.terminated[t, i] == term and b.truncated[t, i] == (limit and not term)
            both += int(term and limit)
            if term or limit:
                acts_sum[i], steps[i] = 0, 0
    assert both > 0  # the case was exercised


def test_counter_episode_returns_are_sums_of_rewards(counter):
    b = counter
    np.testing.assert_array_equal(b.rewards, 1.0 + b.actions)
    returns, lengths = episodes_from_buffers(b)
    assert b.episode_returns == returns
    assert b.episode_lengths == lengths
    assert len(returns) == int((b.terminated | b.truncated).sum())
    # the observation after the fragment continues each env's open episode
    np.testing.assert_array_equal(b.last_obs[:, 0], (b.obs[-1, :, 0] + 1) * ~(b.terminated[-1] | b.truncated[-1]))


# -- env reuse in warm workers -------------------------------------------------------------------

def test_envs_are_kept_for_the_next_batch_of_the_same_env():
    from models.envs.batch import close_idle_envs

    def same(a, b):  # the very objects (ids alone could be reused by new objects)
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))

    close_idle_envs()
    first = EnvBatch("CartPole-v1", 2, seed=0, reuse=True)
    built = list(first.envs)
    first.close()
    again = EnvBatch("CartPole-v1", 3, seed=7, reuse=True)
    assert same(again.envs[:2], built) and all(again.envs[2] is not env for env in built)
    again.close()
    other = EnvBatch("Acrobot-v1", 1, seed=0, reuse=True)  # another env: the kept ones are closed
    assert all(other.envs[0] is not env for env in built)
    other.close()
    assert all(EnvBatch("CartPole-v1", 1, seed=0, reuse=True).envs[0] is not env for env in built)
    close_idle_envs()


def test_reused_envs_sample_what_new_envs_sample(cartpole):
    """run_actor reuses its process's envs; a job after another job (which left its episodes
    mid-way) samples exactly what the same job samples on newly built envs."""
    from models.envs.batch import close_idle_envs

    close_idle_envs()
    fresh = run_actor(cartpole_job())  # built here
    run_actor(dataclasses.replace(cartpole_job(seed=9), steps_per_env=37))
    assert_same_batch(run_actor(cartpole_job()), fresh)
    assert_same_batch(fresh, cartpole)

"""models/envs/snapshot.py and carry_episodes: an episode handed from one actor to the next
continues exactly where it was left, through the wire format and the checkpoint too."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.envs.batch import EnvBatch, make_env
from models.envs.snapshot import EnvSnapshot, supports_snapshots
from models.errors import ConfigError
from models.rl.normalization import Moments, NormStats
from models.rl.policy import ActorCritic, weights_to_bytes
from models.rl.rollout import ActorJob, RolloutBatch, run_actor, sample_fragment
from models.run.wire import Codec


def tanh_policy(env_id: str):
    """A deterministic policy, so that two runs take the same actions in the same states."""
    n_actions = make_env(env_id).action_space.shape[0]

    def act(obs: np.ndarray):
        return np.tanh(obs[:, :n_actions] * 1.7 + 0.1).astype(np.float32), np.zeros(len(obs), dtype=np.float32)

    return act


def first_reset_after(batch_done: np.ndarray, start: int) -> int:
    """Steps up to and including the first episode end at or after `start`, per env (min)."""
    ends = [np.nonzero(batch_done[start:, i])[0] for i in range(batch_done.shape[1])]
    return min(start + (e[0] + 1 if len(e) else batch_done.shape[0] - start) for e in ends)


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5"])
def test_a_carried_episode_continues_exactly_where_it_was_left(env_id):
    act = tanh_policy(env_id)
    whole = sample_fragment(act, EnvBatch(env_id, 2, 5), 400)
    first = sample_fragment(act, EnvBatch(env_id, 2, 5), 200, carry=True)
    assert len(first.carry) == 2 and all(s.episode_length > 0 or s.elapsed_steps == 0 for s in first.carry)
    # the next actor's envs are new, reset with another seed, then put into the snapshot's state
    second = sample_fragment(act, EnvBatch(env_id, 2, 991, resume=first.carry), 200, carry=True)
    done = np.concatenate([first.terminated | first.truncated, second.terminated | second.truncated])
    upto = first_reset_after(done, 200)  # after a reset the two runs' reset seeds differ
    assert upto > 200
    joined = {k: np.concatenate([getattr(first, k), getattr(second, k)])[:upto] for k in ("obs", "rewards", "actions")}
    for key, values in joined.items():
        np.testing.assert_array_equal(values, getattr(whole, key)[:upto], err_msg=key)


def test_time_limits_returns_and_reward_returns_carry_over():
    """HalfCheetah never terminates: its 1000-step time limit must fall on the same step, with
    the whole episode's return, and the reward scaler's discounted return must carry over."""
    act = tanh_policy("HalfCheetah-v5")
    norm = NormStats(obs=None, reward=Moments(0.0, np.zeros(()), np.ones(())), gamma=0.99)
    whole = sample_fragment(act, EnvBatch("HalfCheetah-v5", 1, 3), 999, norm, carry=True)
    whole_episode = sample_fragment(act, EnvBatch("HalfCheetah-v5", 1, 3), 1000, norm)
    parts = [sample_fragment(act, EnvBatch("HalfCheetah-v5", 1, 3), 700, norm, carry=True)]
    for steps, seed in ((299, 77), (1, 78)):
        envs = EnvBatch("HalfCheetah-v5", 1, seed, resume=parts[-1].carry)
        parts.append(sample_fragment(act, envs, steps, norm, carry=True))
    assert parts[0].episode_returns == [] == parts[1].episode_returns
    assert parts[1].carry[0].elapsed_steps == 999 == whole.carry[0].elapsed_steps
    assert parts[0].carry[0].reward_return != 0.0
    assert parts[1].carry[0].reward_return == pytest.approx(whole.carry[0].reward_return, rel=1e-12)
    assert parts[1].carry[0].episode_return == pytest.approx(whole.carry[0].episode_return, rel=1e-12)
    assert parts[2].truncated[0, 0] and whole_episode.truncated[999, 0]
    assert parts[2].episode_lengths == [1000] == whole_episode.episode_lengths
    assert parts[2].episode_returns == pytest.approx(whole_episode.episode_returns, rel=1e-12)


def test_snapshots_travel_through_the_wire_and_the_checkpoint():
    hidden = (16, 16)
    weights = weights_to_bytes(ActorCritic(EnvBatch("Hopper-v5", 1, 0).spaces, hidden))
    job = ActorJob(env_id="Hopper-v5", round_index=0, actor_index=1, seed=4, steps_per_env=50,
                   envs_per_actor=2, hidden=hidden, weights=weights, carry_episodes=True)
    batch = run_actor(job)
    assert len(batch.carry) == 2
    codec = Codec(ActorJob, RolloutBatch)
    back = codec.decode(codec.encode(batch), RolloutBatch)
    for a, b in zip(batch.carry, back.carry, strict=True):
        for f in dataclasses.fields(EnvSnapshot):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name))
    job2 = dataclasses.replace(job, round_index=1, seed=5, resume=back.carry)
    assert codec.decode(codec.encode(job2), ActorJob).resume[1].elapsed_steps == batch.carry[1].elapsed_steps
    # the checkpoint form is plain tensors and numbers (torch.load(weights_only=True) reads it)
    state = batch.carry[0].to_state()
    assert all(isinstance(v, torch.Tensor | float | int) for v in state.values())
    again = EnvSnapshot.from_state(state)
    for f in dataclasses.fields(EnvSnapshot):
        np.testing.assert_array_equal(getattr(again, f.name), getattr(batch.carry[0], f.name))
    # and the next actor's first step answers the observation the snapshot left
    np.testing.assert_array_equal(run_actor(job2).obs[0], np.stack([s.obs for s in batch.carry]))


def test_only_mujoco_envs_carry_episodes_and_the_config_says_so_before_anything_runs():
    from models.run.presets import resolve_parameters

    assert supports_snapshots(make_env("Hopper-v5"))
    assert not supports_snapshots(make_env("CartPole-v1"))
    assert resolve_parameters({"env": "Hopper-v5", "carry_episodes": True}).carry_episodes
    assert not resolve_parameters({"env": "Hopper-v5"}).carry_episodes
    with pytest.raises(ConfigError, match="carry_episodes: CartPole-v1 is not a MuJoCo env"):
        resolve_parameters({"env": "CartPole-v1", "carry_episodes": True})
    with pytest.raises(ConfigError, match="carry_episodes must be true or false"):
        resolve_parameters({"env": "Hopper-v5", "carry_episodes": "yes"})


def test_a_snapshot_of_another_body_is_refused():
    snapshot = sample_fragment(tanh_policy("Hopper-v5"), EnvBatch("Hopper-v5", 1, 0), 5, carry=True).carry
    with pytest.raises(ValueError, match="does not fit"):
        EnvBatch("HalfCheetah-v5", 1, 0, resume=snapshot)

"""EnvPool as the actors' env backend (models/envs/envpool_batch.py): what differs from the
gymnasium env it replaces, on the same actions from the same state, and the batch contract the
actors rely on (an ended episode is reset at once, no dummy transition)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from models.errors import ConfigError

envpool = pytest.importorskip("envpool")  # the `envpool` extra; `make setup` installs it


def _both(env_id: str):
    """EnvPool's env and gymnasium's, both reset without noise: the same initial state."""
    pool = envpool.make(env_id, env_type="gymnasium", num_envs=1, seed=0, num_threads=1, reset_noise_scale=0.0)
    env = gym.make(env_id, reset_noise_scale=0.0)
    return pool, env


@pytest.mark.parametrize(("env_id", "obs_tol", "reward_tol"), [
    ("Hopper-v5", 1e-9, 1e-6), ("HalfCheetah-v5", 1e-9, 1e-6),
    # Humanoid: its positions and velocities (the first 45 entries) agree to 1e-4; the derived parts
    # (inertias, body velocities, actuator and contact forces) differ by up to ~1e-2 by step 10
    ("Humanoid-v5", 0.05, 1e-4),
])
def test_the_same_actions_from_the_same_state_give_the_same_steps(env_id, obs_tol, reward_tol):
    pool, env = _both(env_id)
    pooled, _ = pool.reset()
    obs, _ = env.reset(seed=0)
    assert np.abs(pooled[0] - obs).max() < 1e-12
    rng = np.random.default_rng(0)
    for t in range(20):  # before float rounding (two MuJoCo builds) can grow in a chaotic body
        action = rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32)
        pooled, p_reward, p_term, p_trunc, info = pool.step(action[None])
        obs, reward, term, trunc, g_info = env.step(action)
        assert np.abs(pooled[0] - obs).max() < obs_tol, t
        if env_id == "Humanoid-v5":
            assert np.abs(pooled[0][:45] - obs[:45]).max() < 1e-4, t
        assert abs(p_reward[0] - reward) < reward_tol, t
        assert (bool(p_term[0]), bool(p_trunc[0])) == (term, trunc), t
        if env_id != "Humanoid-v5":  # Humanoid's: gymnasium reports the centre of mass, EnvPool the torso
            assert info["x_position"][0] == pytest.approx(g_info["x_position"], abs=1e-9)
        if term:
            break


def test_a_hopper_falls_at_the_same_step_on_both():
    pool, env = _both("Hopper-v5")
    pool.reset()
    env.reset(seed=0)
    ends = []
    for source in ("pool", "gym"):
        rng = np.random.default_rng(1)
        for t in range(1000):
            action = rng.uniform(-1, 1, 3).astype(np.float32)
            term = pool.step(action[None])[2][0] if source == "pool" else env.step(action)[2]
            if term:
                ends.append(t)
                break
    assert len(ends) == 2 and ends[0] == ends[1]


def test_the_batch_resets_an_ended_episode_at_once_and_counts_it():
    from models.envs.envpool_batch import EnvPoolBatch

    batch = EnvPoolBatch("Hopper-v5", 2, seed=5)
    rng = np.random.default_rng(0)
    rewards_so_far, expected = np.zeros(2), []
    for _ in range(400):
        obs, rewards, term, trunc, final = batch.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
        rewards_so_far += rewards
        for i in sorted(final):  # counted in env order
            expected.append(rewards_so_far[i])
            rewards_so_far[i] = 0.0
            assert batch.reset_infos[i]["elapsed_step"] == 0  # the next episode began on this step
            assert abs(obs[i][0] - 1.25) < 0.01  # a fresh hopper's height, not the fallen one's
            assert not np.allclose(final[i], obs[i])
    assert batch.completed_returns == pytest.approx(expected, rel=1e-5)
    assert len(batch.completed_returns) >= 4 and batch.completed_lengths[0] > 1
    batch.close()


def test_an_actor_samples_with_envpool_when_its_job_says_so():
    from models.envs.batch import env_spaces
    from models.rl.policy import ActorCritic, weights_to_bytes
    from models.rl.rollout import ActorJob, run_actor

    policy = ActorCritic(env_spaces("Hopper-v5"), (64, 64))
    job = ActorJob(env_id="Hopper-v5", round_index=0, actor_index=0, seed=3, steps_per_env=128, envs_per_actor=2,
                   hidden=(64, 64), weights=weights_to_bytes(policy), env_backend="envpool")
    batch = run_actor(job)
    again = run_actor(job)
    assert batch.obs.shape == (128, 2, 11) and batch.episode_returns  # random-ish policy: hoppers fall
    np.testing.assert_array_equal(batch.obs, again.obs)  # a pool per job, seeded from the job


def test_an_atari_lost_life_ends_the_training_episode_and_the_game_goes_on():
    from models.envs.envpool_batch import EnvPoolBatch

    batch = EnvPoolBatch("QbertNoFrameskip-v4", 1, seed=3)
    assert batch.spaces.obs_shape == (4, 84, 84) and batch.spaces.n_actions == 6 and batch.obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    rewards, ends, lives_at_ends = [], 0, []
    for t in range(5000):
        _, reward, term, trunc, final = batch.step(rng.integers(0, 6, 1))
        rewards.append(float(reward[0]))
        if final:
            ends += 1
            lives_at_ends.append(batch.reset_infos[0]["lives"])
            if ends == 1:  # a lost life: the game is not over, and the next episode is the same game
                assert not batch.completed_returns and batch.reset_infos[0]["elapsed_step"] == t + 1
        if batch.completed_returns:
            break
    assert set(rewards) <= {-1.0, 0.0, 1.0}  # training rewards clipped to their sign
    assert ends == 4 and lives_at_ends == [3, 2, 1, 4]  # Qbert's 4 lives: 3 lost, then game over, a new game
    assert batch.completed_lengths == [t + 1]  # the game's agent steps, all its lives together
    score = batch.completed_returns[0]
    assert score % 25 == 0 and score >= 25 * rewards.count(1.0) > 0  # the unclipped score (25 per cube)
    batch.close()


def test_an_atari_evaluation_env_ends_only_with_the_game_and_keeps_raw_rewards():
    from models.envs.envpool_batch import EnvPoolBatch

    batch = EnvPoolBatch("QbertNoFrameskip-v4", 1, seed=3, training=False)
    rng = np.random.default_rng(0)
    total, steps, final = 0.0, 0, {}
    while not final and steps < 5000:
        _, reward, _, _, final = batch.step(rng.integers(0, 6, 1))
        total += float(reward[0])
        steps += 1
    assert batch._info["lives"][0] == 0 and batch.completed_returns == [total] and total % 25 == 0 and total > 25
    assert batch.completed_lengths == [steps]
    batch.close()


def test_an_atari_actor_samples_with_envpool():
    from models.envs.batch import env_spaces
    from models.rl.policy import ActorCritic, weights_to_bytes
    from models.rl.rollout import ActorJob, run_actor
    from models.run.presets import resolve_parameters

    cfg = resolve_parameters({"env": "QbertNoFrameskip-v4", "env_backend": "envpool"})
    assert cfg.env_backend == "envpool"
    policy = ActorCritic(env_spaces("QbertNoFrameskip-v4"), cfg.ppo.hidden)
    job = ActorJob(env_id="QbertNoFrameskip-v4", round_index=0, actor_index=0, seed=2, steps_per_env=64,
                   envs_per_actor=2, hidden=cfg.ppo.hidden, weights=weights_to_bytes(policy), env_backend="envpool")
    batch = run_actor(job)
    assert batch.obs.shape == (64, 2, 4, 84, 84) and batch.obs.dtype == np.uint8
    np.testing.assert_array_equal(batch.obs, run_actor(job).obs)


@pytest.mark.parametrize(("given", "says"), [
    ({"env": "CartPole-v1", "env_backend": "envpool"}, "not one of its envs"),
    ({"env": "Hopper-v5", "preset": "locomotion", "env_backend": "envpool"}, "carry episodes"),
    ({"env": "Hopper-v5", "env_backend": "brax"}, "env_backend must be one of"),
    ({"env": "ALE/Qbert-v5", "env_backend": "envpool"}, "not one of its envs"),  # sticky actions: not ours
])
def test_a_backend_that_cannot_run_the_workload_is_refused_before_anything_starts(given, says):
    from models.run.presets import resolve_parameters

    with pytest.raises(ConfigError, match=says):
        resolve_parameters(given)


def test_the_run_configuration_carries_the_backend_to_every_actor_job():
    from models.run.presets import resolve_parameters
    from models.run.session import TrainingSession

    cfg = resolve_parameters({"env": "Hopper-v5", "env_backend": "envpool", "learner_device": "cpu", "i_max": 2,
                              "scheduler": "fixed:2"})
    assert cfg.env_backend == "envpool"
    session = TrainingSession(cfg)
    assert {job.env_backend for job in session.jobs(2, session.learner.weights())} == {"envpool"}
    assert resolve_parameters({"env": "Hopper-v5"}).env_backend == "gymnasium"  # the presets' own

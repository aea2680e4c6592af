"""The paper's workloads through the same round loop: MuJoCo (Gaussian, normalisers) and Atari."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.envs.batch import env_spaces
from models.rl.normalization import RunningMeanStd
from models.rl.ppo import Learner
from models.rl.rollout import ActorJob, run_actor
from models.run.config import PPOConfig
from models.run.presets import preset_for

ATARI = ["QbertNoFrameskip-v4", "SpaceInvadersNoFrameskip-v4", "GravitarNoFrameskip-v4"]


def _jobs(learner: Learner, env_id: str, actors: int, steps: int, envs: int = 1):
    weights, norm = learner.weights(), learner.norm_state()
    return [ActorJob(env_id, 0, i, 100 + i, steps, envs, learner.cfg.hidden, weights, norm=norm)
            for i in range(actors)]


def test_hopper_normalisers_are_merged_exactly_and_shipped():
    cfg = PPOConfig().replace({"normalize_obs": True, "normalize_reward": True,
                               "minibatch_size": 64, "update_epochs": 1})
    learner = Learner(env_spaces("Hopper-v5"), cfg, seed=0)
    assert learner.norm_state().obs.count == 0
    batches = [run_actor(job) for job in _jobs(learner, "Hopper-v5", actors=3, steps=50, envs=2)]
    deltas = [RunningMeanStd.from_moments(b.norm_deltas.obs) for b in batches]
    learner.update(batches)
    # every observation an actor saw counts once: the first of each env and one per step
    assert learner.obs_rms.count == 3 * 2 * (50 + 1)
    expected = RunningMeanStd.merged(deltas)
    np.testing.assert_allclose(learner.obs_rms.mean, expected.mean, rtol=1e-12)
    np.testing.assert_allclose(learner.obs_rms.var, expected.var, rtol=1e-12)
    assert learner.ret_rms.count == 3 * 2 * 50
    # the next round's actors start from the merged statistics
    shipped = learner.norm_state()
    np.testing.assert_allclose(shipped.obs.mean, expected.mean)
    second = run_actor(_jobs(learner, "Hopper-v5", actors=1, steps=10)[0])
    assert second.norm_deltas.obs.count == 11
    assert second.obs.dtype == np.float32 and np.abs(second.obs).max() <= 10.0


def test_gaussian_actions_are_stored_unclipped_and_rescored_exactly():
    learner = Learner(env_spaces("Hopper-v5"), PPOConfig(), seed=0)
    with torch.no_grad():
        learner.policy.log_std.fill_(1.0)  # wide enough that samples leave [-1, 1]
    batch = run_actor(_jobs(learner, "Hopper-v5", actors=1, steps=200)[0])
    assert np.abs(batch.actions).max() > 1.0  # the env got clipped actions; the batch keeps these
    data = learner.prepare([batch])
    logp, _, _ = learner.policy.evaluate(data.obs, data.actions)
    np.testing.assert_allclose(logp.detach().numpy(), batch.logp.reshape(-1), atol=1e-4)


@pytest.mark.parametrize("env_id", ATARI)
def test_atari_batches_travel_as_bytes_and_score_the_real_game(env_id):
    learner = Learner(env_spaces(env_id), PPOConfig().replace({"minibatch_size": 32, "update_epochs": 1}),
                      seed=0)
    batch = run_actor(_jobs(learner, env_id, actors=1, steps=40, envs=2)[0])
    assert batch.obs.dtype == np.uint8 and batch.obs.shape == (40, 2, 4, 84, 84)
    assert batch.obs.nbytes == 40 * 2 * 4 * 84 * 84  # one byte per pixel
    assert set(np.unique(batch.rewards)) <= {-1.0, 0.0, 1.0}  # clipped for training
    stats = learner.update([batch])
    assert np.isfinite(stats["train/loss"])


def test_presets_cover_the_seven_workloads_with_sources():
    for env_id, target in [("CartPole-v1", 475), ("Hopper-v5", 600), ("Humanoid-v5", 1000),
                           ("HalfCheetah-v5", 1500), ("GravitarNoFrameskip-v4", 300),
                           ("SpaceInvadersNoFrameskip-v4", 1200), ("QbertNoFrameskip-v4", 300)]:
        preset = preset_for(env_id)
        assert preset["target_return"] == target
        assert preset["source"] and preset["source"] != preset_for("Unknown-v0")["source"]
    assert preset_for("Hopper-v5")["ppo"]["normalize_obs"] is True


@pytest.mark.e2e
def test_atari_two_rounds_through_the_flow(prefect_api_url, mlflow_uri, tmp_path):
    """Qbert, Table 2's Atari workload; the three games differ only in their env, each of which
    samples and updates above (~9 s a game through the flow here)."""
    from flows.train import train

    summary = train(env="QbertNoFrameskip-v4", scheduler="fixed:2", max_rounds=2, fragment=64, envs_per_actor=2,
                    ppo={"minibatch_size": 64}, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path), local_workers=2)
    assert summary.rounds == 2 and summary.env_steps == 2 * 2 * 64


@pytest.mark.e2e
def test_hopper_two_rounds_with_evaluation(prefect_api_url, mlflow_uri, tmp_path):
    from mlflow.tracking import MlflowClient

    from flows.train import train

    summary = train(env="Hopper-v5", scheduler="fixed:2", max_rounds=2, fragment=128,
                    eval_every=1, eval_episodes=2, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path), local_workers=2)
    client = MlflowClient(mlflow_uri)
    evals = client.get_metric_history(summary.run_id, "eval/return_mean")
    assert sorted(m.step for m in evals) == [0, 1]
    assert all(np.isfinite(m.value) for m in evals)
    # what the body did, next to the return (models/envs/locomotion.py)
    logged = client.get_run(summary.run_id).data.metrics
    for name in ("eval/forward_displacement_mean", "eval/forward_displacement_min",
                 "eval/forward_reward_sum_mean"):
        assert np.isfinite(logged[name]), name


@pytest.mark.e2e
def test_hopper_same_seed_gives_the_same_returns_on_every_run(prefect_api_url, mlflow_uri, tmp_path):
    """Within one machine a seed fixes every per-round return of a MuJoCo run (actors seed their
    envs and samplers from the run seed, the round and their index; one torch thread). Across
    machines, float-level differences can make curves diverge (README, BENCHMARKS.md)."""
    from mlflow.tracking import MlflowClient

    from flows.train import train

    client = MlflowClient(mlflow_uri)
    histories = []
    for attempt in range(2):
        summary = train(env="Hopper-v5", scheduler="fixed:2", max_rounds=3, fragment=128, seed=11,
                        tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / str(attempt)), local_workers=2)
        histories.append([(m.step, m.value) for m in sorted(
            client.get_metric_history(summary.run_id, "rollout/ep_return_mean"), key=lambda m: m.step)])
        histories.append([(m.step, m.value) for m in sorted(
            client.get_metric_history(summary.run_id, "train/loss"), key=lambda m: m.step)])
    assert len(histories[0]) == 3 and len(histories[1]) == 3
    assert histories[0] == histories[2] and histories[1] == histories[3]

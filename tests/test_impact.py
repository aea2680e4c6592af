"""IMPACT's learner (models/impact/learner.py): buffer reuse, target-network schedule, the surrogate, config."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from flows.impact import prepare_impact
from models.billing.cost import PriceTable, bill_impact, server_cluster_cost
from models.envs.batch import EnvBatch, env_spaces
from models.errors import ConfigError
from models.impact.buffer import FragmentBuffer, ImpactFragment
from models.impact.config import ImpactConfig, resolve_impact_config
from models.impact.learner import ImpactLearner, impact_anchor_logp, load_weights_vector, weights_vector
from models.impact.progress import ImpactProgress
from models.rl.normalization import Moments, NormDeltas, NormStats, RunningMeanStd
from models.rl.policy import ActorCritic
from models.rl.rollout import sample_fragment
from models.run.workload import Workload


def _fake(i: int, version: int = 0) -> ImpactFragment:
    return ImpactFragment(batch=i, behaviour_version=version, actor_index=i)  # type: ignore[arg-type]


def test_each_fragment_is_used_at_most_max_reuse_times_then_evicted():
    buffer = FragmentBuffer(capacity=8, max_reuse=3, rng=np.random.default_rng(0))
    for i in range(5):
        buffer.add(_fake(i))
    used: dict[int, int] = {}
    while len(buffer):
        for frag in buffer.sample(2):
            used[frag.batch] = used.get(frag.batch, 0) + 1
        assert all(u < 3 for u in buffer.uses())  # a spent fragment never stays
    assert used == {i: 3 for i in range(5)}  # each sampled exactly max_reuse times
    assert sorted(buffer.evicted_uses) == [3] * 5
    assert buffer.dropped_unused == 0


def test_a_full_buffer_overwrites_its_oldest_fragment():
    buffer = FragmentBuffer(capacity=3, max_reuse=2, rng=np.random.default_rng(0))
    for i in range(3):
        buffer.add(_fake(i))
    buffer.sample(3)  # all used once
    buffer.add(_fake(3))  # evicts 0 (used once)
    buffer.add(_fake(4))  # evicts 1 (used once)
    assert buffer.evicted_uses == [1, 1] and buffer.dropped_unused == 0
    buffer.add(_fake(5))  # evicts 2 (used once)
    buffer.add(_fake(6))  # evicts 3 (never used)
    assert buffer.dropped_unused == 1
    assert len(buffer) == 3 and buffer.uses() == [0, 0, 0]


def _real_fragments(cfg: ImpactConfig, n: int, version: int = 0) -> list[ImpactFragment]:
    spaces = env_spaces("CartPole-v1")
    policy = ActorCritic(spaces, cfg.hidden)
    envs = EnvBatch("CartPole-v1", cfg.envs_per_actor, seed=0)
    return [ImpactFragment(sample_fragment(policy.sampler(i), envs, cfg.steps_per_env), version, i)
            for i in range(n)]


def test_target_network_is_a_hard_copy_every_target_update_every_steps():
    cfg = ImpactConfig(fragment=64, envs_per_actor=2, batch_fragments=2, buffer_fragments=8,
                       max_reuse=100, target_update_every=3, learning_rate=1e-2)
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    for frag in _real_fragments(cfg, 4):
        learner.add(frag)

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))

    initial = [v.clone() for v in learner.target.state_dict().values()]
    history = []
    for _ in range(7):
        learner.step()
        history.append((learner.version, learner.target_version, same(learner.policy, learner.target)))
    # copied at steps 3 and 6 only; in between the policy moved and the target did not
    assert history == [(1, 0, False), (2, 0, False), (3, 3, True), (4, 3, False), (5, 3, False),
                       (6, 6, True), (7, 6, False)]
    assert not all(torch.equal(a, b) for a, b in zip(initial, learner.target.state_dict().values(), strict=True))


def test_learner_step_reports_lag_and_importance_weights():
    cfg = ImpactConfig(fragment=64, envs_per_actor=2, batch_fragments=2, buffer_fragments=8, max_reuse=2)
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    learner.version = 5  # as if five steps ran since these fragments' weights
    for frag in _real_fragments(cfg, 2, version=3):
        learner.add(frag)
    stats = learner.step()
    assert stats["impact/policy_lag_mean"] == 2.0 and stats["impact/policy_lag_max"] == 2.0
    assert stats["impact/rho_mean"] > 0 and 0 <= stats["impact/rho_clipped_frac"] <= 1
    assert stats["impact/batch_env_steps"] == 128
    assert all(math.isfinite(v) for v in stats.values())


def test_anchor_gives_impacts_clipped_ratio():
    mu = torch.tensor([0.5, 0.5, 0.9, 0.1])
    pi_target = torch.tensor([0.5, 0.2, 0.3, 0.4])  # mu/pi_target = 1, 2.5, 3, 0.25
    pi_theta = torch.tensor([0.6, 0.3, 0.2, 0.5])
    anchor = impact_anchor_logp(mu.log(), pi_target.log(), is_clip=2.0)
    ratio = (pi_theta.log() - anchor).exp()
    expected = (mu / pi_target).clamp(0, 2.0) * pi_theta / mu
    torch.testing.assert_close(ratio, expected)


def test_weights_vector_round_trip():
    spaces = env_spaces("CartPole-v1")
    a, b = ActorCritic(spaces, (8,)), ActorCritic(spaces, (8,))
    load_weights_vector(b, weights_vector(a))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_progress_stop_rules():
    p = ImpactProgress(target_return=10.0, max_env_steps=1000, max_wall_s=60.0, return_window=2)

    class B:  # a fragment's batch, only what record() reads
        def __init__(self, returns, steps=100):
            self.episode_returns, self.steps = returns, steps

    p.record(ImpactFragment(B([12.0]), 0, 0))  # type: ignore[arg-type]
    assert p.check(1.0) is None  # one episode: the window is not full yet
    p.record(ImpactFragment(B([9.0, 11.0]), 0, 0))  # type: ignore[arg-type]
    assert p.mean_return == 10.0 and p.check(1.0) == "target_reached"
    q = ImpactProgress(target_return=10.0, max_env_steps=150, max_wall_s=60.0, return_window=2)
    q.record(ImpactFragment(B([], 200), 0, 0))  # type: ignore[arg-type]
    assert q.check(1.0) == "env_steps"
    r = ImpactProgress(target_return=10.0, max_env_steps=150, max_wall_s=60.0, return_window=2)
    assert r.check(61.0) == "wall_limit"


def test_progress_judged_on_evaluations_ignores_the_training_window():
    p = ImpactProgress(target_return=10.0, max_env_steps=1000, max_wall_s=60.0, return_window=1, judge_on_eval=True)

    class B:
        episode_returns, steps = [50.0], 100

    p.record(ImpactFragment(B(), 0, 0))  # type: ignore[arg-type]
    assert p.mean_return == 50.0 and p.check(1.0) is None  # a training window over J does not stop it
    p.record_evaluation({"eval/return_mean": 12.0, "eval/forward_displacement_min": -0.3}, chunk=3)
    assert p.stop_reason is None  # one episode went backwards: not locomotion
    p.record_evaluation({"eval/return_mean": 9.0}, chunk=4)
    assert p.stop_reason is None
    p.record_evaluation({"eval/return_mean": 12.0, "eval/forward_displacement_min": 0.4}, chunk=5)
    assert p.check(1.0) == "target_reached"
    assert p.stop_detail == "target: the evaluation after chunk 5 returned 12 >= J=10, every episode forward (min 0.40 m)"
    window = ImpactProgress(target_return=10.0, max_env_steps=1000, max_wall_s=60.0, return_window=1)
    window.record_evaluation({"eval/return_mean": 99.0}, chunk=0)
    assert window.stop_reason is None  # judged on the window: an evaluation only reports


def test_bill_is_the_cluster_for_the_cloud_time_on_the_learners_device_and_serverless_for_reference():
    prices = PriceTable.load()
    bill = bill_impact(cloud_s=100.0, wall_s=400.0, actors=2, actor_busy_s=150.0, learner_s=40.0,
                       learner_device="cpu", prices=prices)
    # a CPU learner: 4 actor VMs at $1.008/h and a D4s_v5 at $0.192/h, for 300 s start-up + 100 s
    assert bill.server_cluster_usd == pytest.approx(400 * 4.224 / 3600, rel=1e-12)
    assert bill.server_cluster_no_startup_usd == pytest.approx(100 * 4.224 / 3600, rel=1e-12)
    assert bill.server_cluster_at_wall_usd == pytest.approx(700 * 4.224 / 3600, rel=1e-12)  # labelled, not the cost
    assert bill.always_on_pool_usd == pytest.approx(100 * (2 * 0.04495 + 0.2332) / 3600, rel=1e-12)
    assert math.isclose(bill.serverless_usd, 150.0 * prices.actor_per_second + 40.0 * prices.learner_per_second("cpu"))
    on_cuda = bill_impact(cloud_s=100.0, wall_s=400.0, actors=2, actor_busy_s=150.0, learner_s=40.0,
                          learner_device="cuda", prices=prices)
    assert on_cuda.server_cluster_usd == pytest.approx(400 * 7.092 / 3600, rel=1e-12)  # the paper's V100 cluster
    assert on_cuda.server_cluster_usd == server_cluster_cost(100.0, prices, "cuda")


def test_config_presets_and_bad_input():
    cfg = resolve_impact_config(Workload(env="CartPole-v1"))
    assert cfg.target_return == 475.0 and cfg.impact.is_clip == 2.0 and cfg.impact.target_update_every == 2
    assert resolve_impact_config(Workload(env="CartPole-v1", impact={"max_reuse": 3})).impact.max_reuse == 3
    for env in ("Hopper-v5", "HalfCheetah-v5"):  # the locomotion J: judged on evaluations, as PPO's
        loco = resolve_impact_config(Workload(env=env, preset="locomotion"))
        assert (loco.stop_at_eval, loco.eval_every_chunks, loco.eval_episodes) == (True, 1, 5)
        assert not resolve_impact_config(Workload(env=env)).stop_at_eval
    hopper = resolve_impact_config(Workload(env="Hopper-v5", preset="locomotion")).impact
    assert (hopper.batch_fragments, hopper.learning_rate) == (8, 3e-4)  # the variant's [impact] over Hopper's
    assert resolve_impact_config(Workload(env="Hopper-v5")).impact.batch_fragments == 2
    for bad, match in [({"impact": {"c_bar": 2.0, "rho_bar": 1.0}}, "c_bar"),
                       ({"impact": {"max_reuse": 0}}, "max_reuse"),
                       ({"impact": {"batch_fragments": 40, "buffer_fragments": 8}}, "batch_fragments"),
                       ({"impact": {"rho_barr": 1.0}}, "unknown IMPACT parameter"),
                       ({"impact": {"fragment": 100, "envs_per_actor": 3}}, "multiple"),
                       ({"max_env_steps": 0}, "max_env_steps"),
                       ({"stop_at_eval": True}, "set eval_every_chunks"),
                       ({"eval_every_chunks": 2, "eval_episodes": 0}, "eval_episodes"),
                       ({"env": "NoSuchEnv-v0"}, "unknown gymnasium env id")]:
        with pytest.raises(ConfigError, match=match):
            prepare_impact({"env": "CartPole-v1", **bad})


def _hopper_fragments(learner: ImpactLearner, n: int, steps: int = 40, envs: int = 2) -> list[ImpactFragment]:
    """Fragments sampled as the actors do: normalised with the learner's published statistics."""
    policy = ActorCritic(env_spaces("Hopper-v5"), learner.cfg.hidden)
    out = []
    for i in range(n):
        batch = sample_fragment(policy.sampler(i), EnvBatch("Hopper-v5", envs, seed=i), steps, learner.norm_state())
        out.append(ImpactFragment(batch, learner.version, i))
    return out


def test_hopper_normalisers_are_merged_exactly_once_per_fragment_and_shipped():
    cfg = ImpactConfig(fragment=80, envs_per_actor=2, batch_fragments=2, buffer_fragments=8, max_reuse=2,
                       normalize_obs=True, normalize_reward=True, init_log_std=-0.7)
    learner = ImpactLearner(env_spaces("Hopper-v5"), cfg, seed=0, device="cpu")
    assert learner.norm_state().obs.count == 0 and float(learner.policy.log_std[0].detach()) == pytest.approx(-0.7)
    # fragments with known moments: each delta the moments of its own data
    rng = np.random.default_rng(0)
    data = [rng.normal(loc=i, scale=1 + i, size=(30 + 10 * i, 11)) for i in range(3)]
    rewards = [rng.normal(size=20 + i) for i in range(3)]
    for frag, obs, ret in zip(_hopper_fragments(learner, 3), data, rewards, strict=True):
        deltas = NormDeltas(obs=Moments(len(obs), obs.mean(0), obs.var(0)), reward=Moments(len(ret), ret.mean(), ret.var()))
        learner.add(dataclasses.replace(frag, batch=dataclasses.replace(frag.batch, norm_deltas=deltas)))
    every = np.concatenate(data)
    assert learner.obs_rms.count == len(every)
    np.testing.assert_allclose(learner.obs_rms.mean, every.mean(0), rtol=1e-12)
    np.testing.assert_allclose(learner.obs_rms.var, every.var(0), rtol=1e-12)
    np.testing.assert_allclose(learner.ret_rms.var, np.concatenate(rewards).var(), rtol=1e-12)
    # reusing fragments in learner steps never counts their data again
    for _ in range(3):
        learner.step()
    assert learner.obs_rms.count == len(every)
    # what is published is the merged statistics, and actors normalise with them next
    shipped = learner.norm_state()
    np.testing.assert_allclose(shipped.obs.mean, every.mean(0))
    assert shipped.gamma == cfg.gamma
    real = _hopper_fragments(learner, 2)
    for frag in real:
        learner.add(frag)
    assert learner.obs_rms.count == len(every) + 2 * 2 * (40 + 1)  # first observation of each env + one per step
    assert all(f.batch.obs.dtype == np.float32 and np.abs(f.batch.obs).max() <= 10.0 for f in real)


def test_norm_layout_round_trip_and_presence():
    cfg = ImpactConfig(normalize_obs=True, normalize_reward=True, gamma=0.999)
    layout = cfg.norm_layout((11,))
    rms = RunningMeanStd((11,))
    rms.update(np.random.default_rng(1).normal(size=(7, 11)))
    stats = NormStats(obs=rms.moments(), reward=Moments(5.0, np.array(0.5), np.array(2.0)), gamma=0.999)
    packed = layout.pack(stats)
    assert packed.dtype == np.float64 and packed.size == layout.size == 1 + 22 + 3
    back = layout.unpack(packed)
    assert back.obs.count == 7 and back.gamma == 0.999 and back.reward.var == 2.0
    np.testing.assert_array_equal(back.obs.var, rms.var)
    assert ImpactConfig().norm_layout((4,)) is None  # CartPole's preset: nothing travels
    obs_only = ImpactConfig(normalize_obs=True).norm_layout((11,))
    with pytest.raises(ValueError, match="do not match"):
        obs_only.pack(stats)


def test_hopper_preset_normalises_and_cartpole_preset_does_not():
    cartpole = resolve_impact_config(Workload(env="CartPole-v1")).impact
    assert not cartpole.normalize_obs and not cartpole.normalize_reward and cartpole.init_log_std == 0.0
    hopper = resolve_impact_config(Workload(env="Hopper-v5"))
    assert hopper.target_return == 1000.0 and hopper.impact.normalize_obs and hopper.impact.normalize_reward
    assert hopper.max_env_steps >= 1 and hopper.max_wall_s > 0

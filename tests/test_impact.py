"""IMPACT's learner (models/impact.py): buffer reuse, target-network schedule, the surrogate, config."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.config import ConfigError
from models.cost import PriceTable, server_cluster_cost
from models.envs import EnvBatch, env_spaces
from models.impact import (
    FragmentBuffer,
    ImpactConfig,
    ImpactFragment,
    ImpactLearner,
    ImpactProgress,
    bill_impact,
    impact_anchor_logp,
    load_weights_vector,
    resolve_impact_config,
    weights_vector,
)
from models.policy import ActorCritic
from models.rollout import sample_fragment


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


def test_bill_is_the_cluster_for_the_wall_time_and_serverless_for_reference():
    prices = PriceTable.load()
    bill = bill_impact(wall_s=100.0, actors=2, actor_busy_s=150.0, learner_s=40.0,
                       learner_device="cpu", prices=prices)
    assert bill.server_cluster_usd == server_cluster_cost(100.0, prices)
    assert math.isclose(bill.server_cluster_usd - bill.server_cluster_no_startup_usd,
                        prices.server_startup_s * prices.server_per_s)
    assert math.isclose(bill.serverless_usd, 150.0 * prices.actor_per_second + 40.0 * prices.learner_per_second("cpu"))


def test_config_presets_and_bad_input():
    cfg = resolve_impact_config({"env": "CartPole-v1"})
    assert cfg.target_return == 475.0 and cfg.impact.is_clip == 2.0 and cfg.impact.target_update_every == 2
    assert resolve_impact_config({"env": "CartPole-v1", "impact": {"max_reuse": 3}}).impact.max_reuse == 3
    for bad, match in [({"impact": {"c_bar": 2.0, "rho_bar": 1.0}}, "c_bar"),
                       ({"impact": {"max_reuse": 0}}, "max_reuse"),
                       ({"impact": {"batch_fragments": 40, "buffer_fragments": 8}}, "batch_fragments"),
                       ({"impact": {"rho_barr": 1.0}}, "unknown IMPACT parameter"),
                       ({"impact": {"fragment": 100, "envs_per_actor": 3}}, "multiple"),
                       ({"max_env_steps": 0}, "max_env_steps"),
                       ({"env": "NoSuchEnv-v0"}, "unknown gymnasium env id")]:
        with pytest.raises(ConfigError, match=match):
            resolve_impact_config({"env": "CartPole-v1", **bad})

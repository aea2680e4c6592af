"""The learned scheduler's reward (models/scheduling/reward.py), against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.errors import ConfigError
from models.run.records import STOP_BUDGET, STOP_TARGET
from models.scheduling.features import SchedulerDecision, SchedulerTrace
from models.scheduling.reward import episode_rewards, rewards_from_summary, terminal_penalty

REWARD_TABLE = [
    # (round times, decisions, reached, budget spent, best return, J, beta, expected rewards)
    ([1.0, 2.0, 3.0], 3, True, False, 480.0, 475.0, 0.1, [-0.1, -0.2, -0.3]),
    ([1.0, 1.0], 2, False, False, 400.0, 475.0, 0.1, [-0.1, -0.1 - 75.0]),        # K rounds, J missed
    ([2.0, 2.0], 3, False, True, 300.0, 475.0, 0.1, [-0.2, -0.2, -175.0]),        # 3rd round refused
    ([2.0, 2.0], 2, False, True, 300.0, 475.0, 0.5, [-1.0, -1.0 - 175.0]),        # beta 0.5
    ([1.0], 1, False, False, math.nan, 475.0, 0.1, [-0.1 - 475.0]),               # no episode finished
    ([], 1, False, True, -math.inf, 475.0, 0.1, [-475.0]),                        # refused at once
    ([4.0, 4.0], 2, False, False, -300.0, -100.0, 0.1, [-0.4, -0.4 - 200.0]),     # negative returns
]


@pytest.mark.parametrize(("times", "decisions", "reached", "spent", "best", "target", "beta", "expected"),
                         REWARD_TABLE)
def test_episode_rewards(times, decisions, reached, spent, best, target, beta, expected):
    rewards = episode_rewards(times, decisions, target_reached=reached, budget_spent=spent,
                              best_return=best, target_return=target, beta=beta)
    np.testing.assert_allclose(rewards, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize(("best", "target", "expected"), [
    (400.0, 475.0, -75.0), (0.0, 475.0, -475.0), (math.nan, 475.0, -475.0),
    (-math.inf, 475.0, -475.0), (-150.0, -100.0, -50.0)])
def test_terminal_penalty(best, target, expected):
    assert terminal_penalty(best, target) == pytest.approx(expected)


def test_reward_rejects_bad_input():
    with pytest.raises(ConfigError, match="beta"):
        episode_rewards([1.0], 1, target_reached=True, budget_spent=False, best_return=1.0,
                        target_return=1.0, beta=1.5)
    with pytest.raises(ValueError, match="decisions"):
        episode_rewards([1.0, 1.0, 1.0], 1, target_reached=True, budget_spent=False,
                        best_return=1.0, target_return=1.0)


def test_rewards_from_summary():
    import dataclasses

    from models.run.records import RoundRecord, RunSummary

    rounds = tuple(RoundRecord(round_index=k, actors=2, mean_return=300.0, env_steps=8, round_s=t,
                               wall_s=t, learner_s=0.1, actor_mean_s=0.1, cost_usd=0.0, loss=0.0,
                               policy_kl=0.0) for k, t in enumerate((1.0, 2.0)))
    summary = RunSummary(run_id=None, env_id="CartPole-v1", scheduler="learned", seed=0,
                         stop_reason=STOP_BUDGET, rounds=2, final_return=300.0, best_return=300.0,
                         env_steps=16, cost_usd=0.0, server_cluster_cost_usd=0.0, time_to_stop_s=3.0,
                         wall_time_s=3.0, history=rounds,
                         scheduler_trace=SchedulerTrace(
                             mode="sample", source=None, i_max=4, target_return=475.0, max_rounds=60,
                             budget_usd=None, features=(),
                             steps=tuple(SchedulerDecision(k, (0.0,), 0, 1, 0.0, 0.0) for k in range(3))))
    np.testing.assert_allclose(rewards_from_summary(summary), [-0.1, -0.2, -175.0], rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="trace"):
        rewards_from_summary(dataclasses.replace(summary, scheduler_trace=None))


def test_the_cost_term_prices_each_rounds_cost_in_seconds():
    common = dict(target_reached=True, budget_spent=False, best_return=500.0, target_return=475.0, beta=0.1)
    time_only = episode_rewards([2.0, 1.0], 2, **common)
    assert time_only.tolist() == pytest.approx([-0.2, -0.1])
    assert episode_rewards([2.0, 1.0], 2, round_costs=[0.5, 0.25], **common).tolist() == time_only.tolist()
    priced = episode_rewards([2.0, 1.0], 2, round_costs=[0.5, 0.25], cost_weight=4.0, **common)
    assert priced.tolist() == pytest.approx([-0.1 * (2.0 + 4 * 0.5), -0.1 * (1.0 + 4 * 0.25)])
    with pytest.raises(ValueError, match="one cost per round"):
        episode_rewards([2.0, 1.0], 2, round_costs=[0.5], cost_weight=1.0, **common)
    with pytest.raises(ConfigError, match="cost_weight"):
        episode_rewards([2.0], 1, round_costs=[0.5], cost_weight=-1.0, **common)


def test_the_reward_can_read_each_round_on_the_cloud_clock():
    """clock="cloud": r_k = -beta * (P_k + the round's orchestration), from time/round_cloud_s."""
    import dataclasses

    from models.run.records import RoundRecord, RunSummary
    from models.scheduling.agent import AgentConfig

    def record(k: int, p_k: float, cloud_s: float) -> RoundRecord:
        return RoundRecord.from_metrics(k, {
            "sched/actors": 2, "rollout/ep_return_mean": 500.0, "rollout/env_steps": 8, "time/round_s": p_k,
            "time/round_wall_s": cloud_s + 1.0, "time/learner_s": 0.1, "time/actor_mean_s": 0.1,
            "cost/round_usd": 0.0, "train/loss": 0.0, "train/policy_kl": 0.0, "time/round_cloud_s": cloud_s})

    summary = RunSummary(run_id=None, env_id="CartPole-v1", scheduler="learned", seed=0, stop_reason=STOP_TARGET,
                         rounds=2, final_return=500.0, best_return=500.0, env_steps=16, cost_usd=0.0,
                         server_cluster_cost_usd=0.0, time_to_stop_s=3.0, wall_time_s=5.0,
                         history=(record(0, 1.0, 1.5), record(1, 2.0, 2.25)),
                         scheduler_trace=SchedulerTrace(
                             mode="sample", source=None, i_max=4, target_return=475.0, max_rounds=60,
                             budget_usd=None, features=(),
                             steps=tuple(SchedulerDecision(k, (0.0,), 0, 1, 0.0, 0.0) for k in range(2))))
    assert rewards_from_summary(summary).tolist() == pytest.approx([-0.1, -0.2])
    assert rewards_from_summary(summary, clock="cloud").tolist() == pytest.approx([-0.15, -0.225])
    with pytest.raises(ConfigError, match="reward clock"):
        rewards_from_summary(summary, clock="wall")
    old = dataclasses.replace(summary, history=tuple(dataclasses.replace(h, cloud_s=math.nan) for h in summary.history))
    with pytest.raises(ValueError, match="cloud times"):
        rewards_from_summary(old, clock="cloud")  # a history recorded before the cloud clock
    assert AgentConfig().reward_clock == "p_k"  # the paper's reward stays the default
    assert AgentConfig().replace({"reward_clock": "cloud"}).reward_clock == "cloud"
    with pytest.raises(ConfigError, match="reward_clock"):
        AgentConfig().replace({"reward_clock": "wall"})

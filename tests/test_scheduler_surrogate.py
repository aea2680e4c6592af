"""benchmarks/scheduler_surrogate.py: its workloads keep the measured sweeps' best counts, and the
scheduler settings chosen on it (lambda 0.5, common seeds) find Hopper's best count."""

from __future__ import annotations

import pytest
import torch

from benchmarks.scheduler_surrogate import WORKLOADS, fixed_time, greedy_time, train
from models.scheduling.agent import AgentConfig


@pytest.mark.parametrize(("workload", "best"), [("hopper", 1), ("cartpole", 8)])
def test_the_surrogates_best_fixed_count_is_the_measured_sweeps(workload, best):
    model = WORKLOADS[workload]
    times = {n: fixed_time(model, n) for n in (1, 2, 4, 8, 16, 32)}
    assert min(times, key=times.get) == best


def test_lambda_half_with_common_seeds_finds_the_best_count_on_the_hopper_surrogate():
    torch.set_num_threads(1)
    model = WORKLOADS["hopper"]
    agent, mean_actors = train(model, AgentConfig().replace({"gae_lambda": 0.5}), episodes=100, batch=4,
                               seed=0, common_seeds=True)
    assert sum(mean_actors[:20]) / 20 > 10  # it starts near uniform over 1..32
    _, greedy_actors = greedy_time(model, agent)
    assert greedy_actors == 1.0


def test_the_two_phase_surrogate_keeps_the_measured_order_of_the_switch_compares():
    """CartPole-v1 as the switch compares measured it: 8 actors, then 1 from 30% of J, beats every
    constant (0.69-0.81x Fixed(1)'s time measured); Fixed(1) and Fixed(8) are close; the reverse loses."""
    from benchmarks.scheduler_surrogate import switch_time

    model = WORKLOADS["cartpole-2phase"]
    fixed = {n: fixed_time(model, n) for n in (1, 2, 4, 8, 16, 32)}
    best_fixed = min(fixed.values())
    assert fixed[1] == pytest.approx(fixed[8], rel=0.1)
    assert switch_time(model, 8, 1, 30) < 0.9 * best_fixed
    assert switch_time(model, 8, 1, 15) < 0.9 * best_fixed
    assert switch_time(model, 1, 8, 50) > best_fixed


def test_with_whole_episode_returns_the_agent_learns_to_come_down_on_the_two_phase_surrogate():
    """Issue 13, point 2: lambda 1 and gamma 1 (each decision credited with the whole time to J
    after it) learn a schedule that starts high and comes down, faster than the best constant.
    Over 7 agent seeds, not one: which seeds do best depends on the CPU's float kernels (seed 0 at
    200 episodes: 0.96x the best constant on the Intel machine, under 0.9x on the AMD one)."""
    from benchmarks.scheduler_surrogate import greedy_runs

    torch.set_num_threads(1)
    model = WORKLOADS["cartpole-2phase"]
    config = AgentConfig().replace({"gae_lambda": 1.0, "gamma": 1.0, "learning_rate": 5e-3})
    best_constant = min(fixed_time(model, n) for n in (1, 2, 4, 8, 16, 32))
    ratios, first, second = [], [], []
    for seed in range(7):
        agent, _ = train(model, config, episodes=300, batch=8, seed=seed, common_seeds=True)
        times, actors, _ = greedy_runs(model, agent)
        ratios.append(sum(times) / len(times) / best_constant)
        first += [a for run in actors for a in run[:len(run) // 2]]
        second += [a for run in actors for a in run[len(run) // 2:]]
    assert sum(first) / len(first) > sum(second) / len(second) + 2  # not a constant: it comes down
    assert sum(ratios) / len(ratios) < 0.97, ratios  # faster than the best constant (Intel: 0.93)


def test_the_surrogates_rewards_price_each_rounds_cost_when_asked():
    """r_k = -beta (P_k + w C_k): the surrogate's rewards add -beta w C_k to each round's."""
    import numpy as np

    from models.scheduling.schedulers import Fixed

    model = WORKLOADS["cartpole-2phase"]
    outcome = model.run(Fixed(8, 32), 100)
    time_only, priced = model.rewards(outcome, 0.1), model.rewards(outcome, 0.1, 30_000.0)
    assert outcome.target_reached and len(priced) == len(outcome.round_costs) > 1
    np.testing.assert_allclose(priced - time_only, -0.1 * 30_000.0 * np.asarray(outcome.round_costs))
    assert (priced < time_only).all()

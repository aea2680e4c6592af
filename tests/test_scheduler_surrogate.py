"""benchmarks/scheduler_surrogate.py: its workloads keep the measured sweeps' best counts, and the
scheduler settings chosen on it (lambda 0.5, common seeds) find Hopper's best count."""

from __future__ import annotations

import pytest
import torch

from benchmarks.scheduler_surrogate import WORKLOADS, fixed_time, greedy_time, train
from models.scheduler_agent import AgentConfig


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

"""The scheduler agent (models/scheduling/agent.py): PPO on a synthetic round model, its config.

No Prefect, no environment: tests/scheduler_fixtures.py's synthetic round model stands in for a
training run.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from models.errors import ConfigError
from models.rl.normalization import RunningMeanStd
from models.scheduling.agent import AgentConfig, Episode, SchedulerAgent, target_std
from models.scheduling.features import SchedulerDecision
from tests.fingerprints import assert_same_fingerprint, fingerprint
from tests.scheduler_fixtures import SyntheticRounds, greedy_schedule, train_on

# Per-round cost 12 + I (13, 14, 15, 16 for I = 1..4), round time 1 + 12 / I (13, 7, 5, 4);
# six rounds reach J = 100. A constant I costs 78, 84, 90, 96 in all. Round time is convex in I,
# so within a budget the fastest schedule is the largest constant I that fits; a budget that
# leaves less than one actor-round of slack (< 1) allows no mixed schedule with the same sum.
# Running out of budget one round short costs (max R - J) = -16.7, more than any time saved.
#   budget   fits            optimum   time to J   reward
#   84.5     I <= 2          2 x 6     42          -4.2
#   90.5     I <= 3          3 x 6     30          -3.0
#   200.0    all             4 x 6     24          -2.4
OPTIMUM_TABLE = [(84.5, 2, 42.0), (90.5, 3, 30.0), (200.0, 4, 24.0)]


@pytest.mark.parametrize(("budget", "best_i", "best_time"), OPTIMUM_TABLE)
def test_agent_learns_the_optimum_of_the_synthetic_model(budget, best_i, best_time):
    torch.set_num_threads(1)
    model = SyntheticRounds(budget=budget)
    agent = train_on(model, episodes=320, seed=0)
    actors, outcome = greedy_schedule(agent, model)
    assert actors == [best_i] * model.work
    assert outcome["target_reached"] and not outcome["budget_spent"]
    assert sum(outcome["round_times"]) == pytest.approx(best_time)


# With the cost in the reward, r = -0.1 * (P + w * C): at w = 3 a round with I = 1..4 scores
# -0.1 * (52, 49, 50, 52), so 2 actors every round is the optimum once all fit the budget, where
# time alone (w = 0) picks 4 (the table above).
COST_WEIGHT, COST_OPTIMUM = 3.0, 2


def test_with_the_cost_in_the_reward_the_agent_learns_the_cheaper_schedule():
    torch.set_num_threads(1)
    model = SyntheticRounds(budget=200.0)
    agent = train_on(model, episodes=320, seed=0, cost_weight=COST_WEIGHT)
    actors, outcome = greedy_schedule(agent, model)
    assert actors == [COST_OPTIMUM] * model.work
    assert outcome["target_reached"] and not outcome["budget_spent"]


# A schedule that depends on the state. With a start-up of 5 per actor and the cost weight 3, a
# round scores -0.1 * (64, 73, 86, 100) for I = 1..4, so 1 actor is best for a unit of work; but
# while less than half the work is done, a round of 4 actors does 3 units (100 for 3 units), so
# the optimum is 4 actors once, then 1: (4, 1, 1, 1), -29.2, ahead of every constant (1 x 6:
# -38.4) and of (4, 2, 1, 1), -30.1. The scheduler sees the return from before round 0 (0).
PHASED = {"budget": 400.0, "s": 5.0, "boost_actors": 4, "boost_work": 3, "initial_return": 0.0}
PHASED_OPTIMUM = [4, 1, 1, 1]


def scored_schedules(model, cost_weight: float, counts=range(1, 5)) -> list[tuple[float, tuple[int, ...]]]:
    """Every schedule of `model.work` rounds (padded with 1s for rounds it never reaches), best first."""
    import itertools

    return sorted(((float(model.rewards(model.run(Scripted(sched + (1,) * 4)), cost_weight=cost_weight).sum()),
                    sched) for sched in itertools.product(counts, repeat=model.work)), reverse=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_where_the_best_count_depends_on_the_state_the_agent_learns_a_schedule_that_does(seed):
    torch.set_num_threads(1)
    model = SyntheticRounds(**PHASED)
    best_reward, best = scored_schedules(model, COST_WEIGHT)[0]
    assert list(best[:len(PHASED_OPTIMUM)]) == PHASED_OPTIMUM and best_reward == pytest.approx(-29.2)
    agent = train_on(model, episodes=480, seed=seed, cost_weight=COST_WEIGHT)
    actors, outcome = greedy_schedule(agent, model)
    assert actors == PHASED_OPTIMUM  # not a constant
    assert outcome["target_reached"]


class Scripted:
    """Plays a given schedule through the model (the brute force below); no network involved."""

    def __init__(self, schedule):
        self.schedule, self.steps = list(schedule), []

    def choose(self, state):
        actors = self.schedule[state.round_index]
        self.steps.append(SchedulerDecision(state.round_index, (), actors - 1, actors, 0.0, 0.0))
        return actors

    def trace(self):
        return SimpleNamespace(steps=self.steps)


def test_the_table_is_the_optimum_by_brute_force():
    """Every schedule of six rounds with I in 1..4, run through the model with its penalties."""
    for budget, best_i, best_time in OPTIMUM_TABLE:
        scored = scored_schedules(SyntheticRounds(budget=budget), 0.0)
        assert scored[0][1] == (best_i,) * 6
        assert scored[0][0] == pytest.approx(-0.1 * best_time)
        assert scored[1][0] < scored[0][0] - 0.05  # unique, by a margin
    model = SyntheticRounds(budget=200.0)
    scored = scored_schedules(model, COST_WEIGHT)
    assert scored[0][1] == (COST_OPTIMUM,) * model.work
    assert scored[0][0] == pytest.approx(-0.1 * 49 * model.work)
    assert scored[1][0] < scored[0][0] - 0.05


def test_agent_config_is_validated():
    with pytest.raises(ConfigError, match="beta"):
        AgentConfig().replace({"beta": 0.0})
    with pytest.raises(ConfigError, match="unknown scheduler agent parameter"):
        AgentConfig().replace({"lr": 0.1})
    assert AgentConfig().replace({"learning_rate": 5e-3}).learning_rate == 5e-3
    with pytest.raises(ConfigError, match="cost_weight"):
        AgentConfig().replace({"cost_weight": -1.0})
    assert AgentConfig().cost_weight == 0.0  # the paper's time-only reward unless asked


# Fingerprint (tests/fingerprints.py) of SchedulerAgent(4, seed=0)'s initial parameters, one thread,
# matching the sha256 digests captured before its networks came from models/rl/networks.py: the same
# seed still gives the same agent.
AGENT_INIT_FINGERPRINT = {
    "policy.0.weight": (448.0, -0.2300275, 62.4099842, -0.0950563, -0.0171268, -0.0273682),
    "policy.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "policy.2.weight": (4096.0, -16.0909002, 578.9521669, 0.0603025, -0.0468925, -0.1099171),
    "policy.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "policy.4.weight": (256.0, -0.0125928, 0.2577159, 0.0009362, -0.0012207, 0.0002214),
    "policy.4.bias": (4.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "value.0.weight": (448.0, 2.0803253, 63.9033526, -0.0367844, 0.0476895, 0.1044582),
    "value.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "value.2.weight": (4096.0, -8.0219838, 574.1500262, -0.0427597, 0.0659353, -0.0818246),
    "value.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "value.4.weight": (64.0, -0.6767639, 6.4483734, 0.0182014, 0.1248964, 0.2363749),
    "value.4.bias": (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
}


def test_same_seed_gives_the_recorded_initial_agent():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        agent = SchedulerAgent(4, seed=0)
    finally:
        torch.set_num_threads(threads)
    params = {f"{net}.{k}": v for net in ("policy", "value")
              for k, v in getattr(agent, net).state_dict().items()}
    assert_same_fingerprint(fingerprint(params), AGENT_INIT_FINGERPRINT)


def test_value_scale_is_the_running_statistics_of_the_targets():
    """The value targets' scale: RunningMeanStd's mean and population std, 1 until two targets."""
    stats = RunningMeanStd(())
    assert target_std(stats) == 1.0
    stats.update(np.array([3.0]))
    assert target_std(stats) == 1.0 and float(stats.mean) == 3.0
    stats.update(np.array([-475.0, -0.3, 2.5]))
    xs = np.array([3.0, -475.0, -0.3, 2.5])
    assert float(stats.mean) == pytest.approx(xs.mean(), rel=1e-12)
    assert target_std(stats) == pytest.approx(xs.std(), rel=1e-12)


def test_update_of_a_batch_gives_finite_stats_and_moves_the_scale():
    model = SyntheticRounds()
    agent = SchedulerAgent(4, seed=1)
    from models.scheduling.learned import LearnedScheduler

    sched = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=2)
    outcome = model.run(sched)
    stats = agent.update([Episode.from_trace(sched.trace(), model.rewards(outcome))])
    assert set(stats) == {f"train/{k}" for k in ("loss", "pg_loss", "v_loss", "entropy", "approx_kl",
                                                  "clipfrac", "explained_variance",
                                                  "episode_reward_mean", "decisions")}
    assert stats["train/decisions"] == outcome["decisions"]
    assert stats["train/approx_kl"] >= 0 and 0 <= stats["train/clipfrac"] <= 1
    assert agent.updates == 1 and agent.episodes_seen == 1 and agent.scale.count == stats["train/decisions"]
    assert agent.update([]) == {}

"""The learned scheduler's pure parts: normalisation, reward, PPO on a synthetic round model, checkpoints.

No Prefect, no environment: a synthetic round model stands in for a training run.
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from models.config import ConfigError
from models.scheduler_agent import (
    FEATURES,
    AgentConfig,
    Episode,
    LearnedScheduler,
    SchedulerAgent,
    StateNormaliser,
    compute_gae,
    episode_rewards,
    is_mlflow_uri,
    load_scheduler,
    make_learned_scheduler,
    parse_learned_spec,
    resolve_checkpoint,
    save_scheduler,
    shipped_checkpoint,
    terminal_penalty,
)
from models.schedulers import RoundState, make_scheduler

# -- a synthetic round model ------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticRounds:
    """A training run in miniature, with the shape the scheduler has to trade off.

    A round with I actors takes P(I) = a + b / I (the learner's a, then the fragment's b seconds
    of sampling split over I actors) and costs I * s + b (every actor is billed its start-up s
    plus its share of the sampling): more actors shorten rounds and cost more. Every round does
    one unit of work, so the mean return after round k is J * (k + 1) / work and J is reached
    after `work` rounds. Like the train flow, a round whose cost exceeds the budget left is not
    started and the run ends with stop reason budget_spent.
    """

    a: float = 1.0
    b: float = 12.0
    s: float = 1.0
    work: int = 6
    target: float = 100.0
    budget: float = 90.5
    max_rounds: int = 10

    def run(self, scheduler: LearnedScheduler) -> dict:
        left, ret, best = self.budget, math.nan, -math.inf
        learner_s = actor_s = 0.0
        times: list[float] = []
        reached = spent = False
        for k in range(self.max_rounds):
            actors = scheduler.choose(RoundState(k, 0.1, ret, 0.01, learner_s, actor_s, left))
            cost = self.s * actors + self.b
            if cost > left + 1e-9:
                spent = True
                break
            left -= cost
            times.append(self.a + self.b / actors)
            learner_s, actor_s = self.a, self.s + self.b / actors
            ret = self.target * (k + 1) / self.work
            best = max(best, ret)
            if k + 1 >= self.work:
                reached = True
                break
        return {"round_times": times, "decisions": len(scheduler.trace()["steps"]),
                "target_reached": reached, "budget_spent": spent, "best_return": best}

    def rewards(self, outcome: dict, beta: float = 0.1) -> np.ndarray:
        return episode_rewards(outcome["round_times"], outcome["decisions"],
                               target_reached=outcome["target_reached"],
                               budget_spent=outcome["budget_spent"],
                               best_return=outcome["best_return"], target_return=self.target, beta=beta)

    def normaliser(self) -> StateNormaliser:
        return StateNormaliser(self.target, self.max_rounds, self.budget)


def train_on(model: SyntheticRounds, episodes: int, seed: int, batch: int = 8) -> SchedulerAgent:
    agent = SchedulerAgent(4, seed=seed)
    scheduler = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=seed)
    pending = []
    for _ in range(episodes):
        scheduler.reset()
        outcome = model.run(scheduler)
        pending.append(Episode.from_trace(scheduler.trace(), model.rewards(outcome)))
        if len(pending) == batch:
            agent.update(pending)
            pending = []
    return agent


def greedy_schedule(agent: SchedulerAgent, model: SyntheticRounds) -> tuple[list[int], dict]:
    scheduler = LearnedScheduler(agent, model.normaliser(), mode="greedy")
    outcome = model.run(scheduler)
    return [s["actors"] for s in scheduler.trace()["steps"]], outcome


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


class Scripted:
    """Plays a given schedule through the model (the brute force below); no network involved."""

    def __init__(self, schedule):
        self.schedule, self.steps = list(schedule), []

    def choose(self, state):
        self.steps.append({"actors": self.schedule[state.round_index]})
        return self.steps[-1]["actors"]

    def trace(self):
        return {"steps": self.steps}


def test_the_table_is_the_optimum_by_brute_force():
    """Every schedule of six rounds with I in 1..4, run through the model with its penalties."""
    import itertools

    for budget, best_i, best_time in OPTIMUM_TABLE:
        model = SyntheticRounds(budget=budget)
        scored = sorted(((float(model.rewards(model.run(Scripted(sched + (1,) * 4))).sum()), sched)
                         for sched in itertools.product(range(1, 5), repeat=model.work)), reverse=True)
        assert scored[0][1] == (best_i,) * model.work
        assert scored[0][0] == pytest.approx(-0.1 * best_time)
        assert scored[1][0] < scored[0][0] - 0.05  # unique, by a margin


# -- the reward ---------------------------------------------------------------------------------

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


def test_gae_of_a_finished_episode_by_hand():
    rewards, values = np.array([1.0, 2.0]), np.array([0.5, 1.0])
    adv, ret = compute_gae(rewards, values, gamma=0.9, lam=0.5)
    delta1 = 2.0 - 1.0  # last step: no value after the end
    delta0 = 1.0 + 0.9 * 1.0 - 0.5
    np.testing.assert_allclose(adv, [delta0 + 0.9 * 0.5 * delta1, delta1])
    np.testing.assert_allclose(ret, adv + values)


# -- normalisation ------------------------------------------------------------------------------

EXTREMES = [math.nan, math.inf, -math.inf, 1e300, -1e300, 0.0, -5.0, 1e-300]


@pytest.mark.parametrize("x", EXTREMES)
def test_normalisation_is_bounded_for_extreme_inputs(x):
    for budget in (1.0, None, math.inf, 0.0):
        norm = StateNormaliser(475.0, 60, budget)
        first = norm(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 1.0))
        assert first.shape == (len(FEATURES),)
        for field_index in range(7):
            raw = [1, 0.5, 100.0, 0.01, 0.2, 0.3, 0.5]
            raw[field_index] = x
            raw[0] = int(raw[0]) if math.isfinite(raw[0]) and abs(raw[0]) < 1e18 else raw[0]
            out = norm(RoundState(*raw))
            assert np.all(np.isfinite(out)), (field_index, x, out)
            assert np.all(out >= -1.0) and np.all(out <= 1.5), (field_index, x, out)


@pytest.mark.parametrize("first", [1e-300, 1e300, 0.2])
@pytest.mark.parametrize("later", EXTREMES)
def test_normalisation_is_bounded_whatever_the_references(first, later):
    """References set by an extreme first round, then extreme values against them."""
    norm = StateNormaliser(475.0, 60, 0.05)
    norm(RoundState(1, first, first, first, first, first, first))
    for _ in range(2):
        out = norm(RoundState(2, later, later, later, later, later, later))
        assert np.all(np.isfinite(out)) and np.all(out >= -1.0) and np.all(out <= 1.5), out


def test_normalisation_means_what_it_says():
    norm = StateNormaliser(target_return=475.0, max_rounds=60, budget_usd=0.05)
    start = norm(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05))
    np.testing.assert_allclose(start, [0, 0, 0, 0, 0, 0, 1], atol=1e-7)
    first = norm(RoundState(1, 0.0, 25.0, 0.02, 0.1, 0.2, 0.04))  # sets the references
    assert first[2] == 0.0 and first[4] == 0.0 and first[5] == 0.0
    assert first[3] == pytest.approx(math.tanh(1.0))
    assert first[6] == pytest.approx(0.8)
    later = norm(RoundState(30, 20.0, 250.0, 0.0, 0.2, 0.1, 0.01))
    assert later[0] == pytest.approx(0.5)
    assert later[1] == pytest.approx(math.tanh(math.log1p(20.0) / 3.0))
    assert later[2] == pytest.approx(0.5)  # halfway from the first return (25) to J
    assert later[4] == pytest.approx(math.tanh(math.log(2.0) / 2.0))  # learner twice its first time
    assert later[5] == pytest.approx(math.tanh(math.log(0.5) / 2.0))
    held = norm(RoundState(31, 20.0, math.nan, 0.0, 0.2, 0.1, 0.01))  # no episode finished
    assert held[2] == pytest.approx(0.5)
    assert norm(RoundState(32, 0.0, 475.0, 0.0, 0.2, 0.1, 0.0))[2] == pytest.approx(1.0)
    # Another workload, another scale: the same progress reads the same.
    other = StateNormaliser(target_return=-100.0, max_rounds=200, budget_usd=2.0)
    other(RoundState(1, 0.0, -500.0, 0.0, 1.0, 1.0, 2.0))
    assert other(RoundState(100, 0.0, -300.0, 0.0, 1.0, 1.0, 1.0))[[0, 2, 6]] == pytest.approx([0.5, 0.5, 0.5])


# -- the scheduler, its trace and its checkpoints ------------------------------------------------

def some_states(n: int = 12) -> list[RoundState]:
    rng = np.random.default_rng(0)
    return [RoundState(k, float(rng.normal()), float(rng.uniform(0, 500)), float(rng.uniform(0, .05)),
                       float(rng.uniform(.05, 1)), float(rng.uniform(.05, 1)), float(rng.uniform(0, .05)))
            for k in range(n)]


def test_actions_are_in_range_and_the_trace_is_json_and_pickle_friendly():
    agent = SchedulerAgent(5, seed=1)
    sched = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=2)
    chosen = [sched.choose(s) for s in some_states()]
    assert all(1 <= i <= 5 for i in chosen)
    assert len(set(chosen)) > 1  # an untrained policy is close to uniform
    trace = sched.trace()
    assert json.loads(json.dumps(trace)) == trace
    assert pickle.loads(pickle.dumps(trace)) == trace
    assert [s["actors"] for s in trace["steps"]] == chosen
    assert [s["action"] + 1 for s in trace["steps"]] == chosen
    assert all(len(s["obs"]) == 7 and s["logp"] <= 0 for s in trace["steps"])
    assert trace["i_max"] == 5 and trace["target_return"] == 475.0


def test_checkpoint_round_trip_gives_identical_actions(tmp_path):
    model = SyntheticRounds()
    agent = train_on(model, episodes=16, seed=3)
    path = save_scheduler(tmp_path / "s.pt", agent, meta={"trained_on": [{"env": "synthetic", "episodes": 16}]})
    loaded, norm_config, meta = load_scheduler(path)
    assert meta["trained_on"][0]["episodes"] == 16
    assert loaded.updates == agent.updates == 2
    obs = np.random.default_rng(0).uniform(-1, 1.5, size=(64, 7)).astype(np.float32)
    np.testing.assert_array_equal(agent.probabilities(obs), loaded.probabilities(obs))
    for mode in ("greedy", "sample"):
        runs = []
        for a in (agent, loaded):
            sched = LearnedScheduler(a, StateNormaliser(475.0, 60, 0.05, norm_config), mode=mode, seed=7)
            runs.append([sched.choose(s) for s in some_states()])
        assert runs[0] == runs[1], mode
    # Optimiser state travels too: one more identical update gives identical weights.
    episode = Episode.from_trace(*_one_episode(model, agent))
    agent.update([episode])
    loaded.update([episode])
    for p, q in zip(agent.policy.parameters(), loaded.policy.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def _one_episode(model: SyntheticRounds, agent: SchedulerAgent):
    sched = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=11)
    outcome = model.run(sched)
    return sched.trace(), model.rewards(outcome)


def test_scheduler_state_dict_resumes_a_run_exactly():
    agent = SchedulerAgent(8, seed=0)
    states = some_states(10)
    whole = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=5)
    expected = [whole.choose(s) for s in states]
    first = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=5)
    head = [first.choose(s) for s in states[:4]]
    saved = pickle.loads(pickle.dumps(first.state_dict()))
    resumed = LearnedScheduler(SchedulerAgent(8, seed=99), StateNormaliser(475.0, 60, 0.05), mode="sample", seed=0)
    resumed.load_state_dict(saved)
    assert head + [resumed.choose(s) for s in states[4:]] == expected
    assert resumed.trace()["steps"] == whole.trace()["steps"]


# -- the spec string -----------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "ref", "mode"), [
    ("learned", "", "greedy"),
    ("learned:sample", "", "sample"),
    ("learned:/tmp/My Sched.pt", "/tmp/My Sched.pt", "greedy"),
    ("learned:/tmp/A.pt:sample", "/tmp/A.pt", "sample"),
    ("learned:runs:/abc123/scheduler/scheduler.pt", "runs:/abc123/scheduler/scheduler.pt", "greedy"),
    ("learned:runs:/abc/scheduler/scheduler.pt:SAMPLE", "runs:/abc/scheduler/scheduler.pt", "sample"),
    ("  learned:cartpole:greedy ", "cartpole", "greedy"),
])
def test_parse_learned_spec(spec, ref, mode):
    assert parse_learned_spec(spec) == (ref, mode)


def test_make_scheduler_learned_by_path(tmp_path):
    path = save_scheduler(tmp_path / "Mixed Case" / "Sched.pt", SchedulerAgent(4, seed=0))
    greedy = make_scheduler(f"learned:{path}", 4, 20, 475.0, budget_usd=0.05, seed=1)
    assert isinstance(greedy, LearnedScheduler) and greedy.mode == "greedy" and greedy.name == "learned"
    sample = make_scheduler(f"learned:{path}:sample", 4, 20, 475.0, budget_usd=0.05, seed=1)
    assert sample.mode == "sample"
    assert sample.normaliser.budget_usd == 0.05 and sample.normaliser.max_rounds == 20
    with pytest.raises(ConfigError, match="i_max=4"):
        make_scheduler(f"learned:{path}", 32, 20, 475.0)
    with pytest.raises(ConfigError, match="no scheduler checkpoint"):
        make_learned_scheduler(f"learned:{tmp_path / 'missing.pt'}", 4, 20, 475.0)
    not_ours = tmp_path / "other.pt"
    torch.save({"weights": 1}, not_ours)
    with pytest.raises(ConfigError, match="not a scheduler checkpoint"):
        make_scheduler(f"learned:{not_ours}", 4, 20, 475.0)


@pytest.mark.parametrize(("ref", "expected"), [
    ("runs:/abc/scheduler/scheduler.pt", True), ("models:/sched/1", True),
    ("mlflow-artifacts:/1/abc/artifacts/scheduler.pt", True), ("http://host/x.pt", True),
    ("file:///tmp/x.pt", False), ("/tmp/runs/x.pt", False), ("cartpole", False), ("", False),
])
def test_is_mlflow_uri(ref, expected):
    assert is_mlflow_uri(ref) is expected


def test_models_resolve_only_local_checkpoints(tmp_path):
    """Which MLflow store a URI names is the run's business (flows/train.py downloads it from
    train's tracking_uri); models/ refuses rather than guessing one from the environment."""
    path = save_scheduler(tmp_path / "a b" / "s.pt", SchedulerAgent(4, seed=0))
    assert resolve_checkpoint(str(path)) == path
    assert resolve_checkpoint(path.as_uri()) == path  # file:// is local
    assert resolve_checkpoint("") == resolve_checkpoint("cartpole") == shipped_checkpoint()
    with pytest.raises(ConfigError, match="MLflow URI"):
        make_scheduler("learned:runs:/abc/scheduler/scheduler.pt", 4, 20, 475.0)


def test_models_never_import_mlflow():
    import ast
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[1] / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "mlflow" for n in names), f"{path.name} imports mlflow"


def test_the_packaged_scheduler_loads():
    sched = make_scheduler("learned", 32, 60, 475.0, budget_usd=0.05)
    assert isinstance(sched, LearnedScheduler)
    _, _, meta = load_scheduler(shipped_checkpoint())
    assert meta["trained_on"], "the packaged scheduler must say how it was trained"
    assert 1 <= sched.choose(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05)) <= 32


def test_agent_config_is_validated():
    with pytest.raises(ConfigError, match="beta"):
        AgentConfig().replace({"beta": 0.0})
    with pytest.raises(ConfigError, match="unknown scheduler agent parameter"):
        AgentConfig().replace({"lr": 0.1})
    assert AgentConfig().replace({"learning_rate": 5e-3}).learning_rate == 5e-3

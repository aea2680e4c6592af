"""A training run in miniature for the learned scheduler's tests (no Prefect, no environment)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.run.workload import Workload
from models.scheduling.agent import Episode, SchedulerAgent
from models.scheduling.features import RoundState, StateNormaliser
from models.scheduling.learned import LearnedScheduler
from models.scheduling.provenance import SchedulerTrainingRun
from models.scheduling.reward import episode_rewards


@dataclass(frozen=True)
class SyntheticRounds:
    """A training run in miniature, with the shape the scheduler has to trade off.

    A round with I actors takes P(I) = a + b / I (the learner's a, then the fragment's b seconds
    of sampling split over I actors) and costs I * s + b (every actor is billed its start-up s
    plus its share of the sampling): more actors shorten rounds and cost more. Every round does
    one unit of work, so the mean return after round k is J * (k + 1) / work and J is reached
    after `work` rounds. Like the train flow, a round whose cost exceeds the budget left is not
    started and the run ends with stop reason budget_spent.

    With `boost_actors` > 0 the best count depends on the state: while less than half the work
    is done, a round with at least boost_actors actors does `boost_work` units (early rounds
    gain from a big batch, later ones do not). `initial_return` is the return the scheduler
    sees before round 0 (the untrained policy's; NaN: none, as in the train flow).
    """

    a: float = 1.0
    b: float = 12.0
    s: float = 1.0
    work: int = 6
    target: float = 100.0
    budget: float = 90.5
    max_rounds: int = 10
    boost_actors: int = 0
    boost_work: int = 1
    initial_return: float = math.nan

    def run(self, scheduler: LearnedScheduler) -> dict:
        left, ret, best = self.budget, self.initial_return, -math.inf
        learner_s = actor_s = 0.0
        times: list[float] = []
        costs: list[float] = []
        reached = spent = False
        done = 0
        for k in range(self.max_rounds):
            actors = scheduler.choose(RoundState(k, 0.1, ret, 0.01, learner_s, actor_s, left))
            cost = self.s * actors + self.b
            if cost > left + 1e-9:
                spent = True
                break
            left -= cost
            costs.append(cost)
            times.append(self.a + self.b / actors)
            learner_s, actor_s = self.a, self.s + self.b / actors
            boosted = self.boost_actors and actors >= self.boost_actors and 2 * done < self.work
            done += self.boost_work if boosted else 1
            ret = self.target * min(done, self.work) / self.work
            best = max(best, ret)
            if done >= self.work:
                reached = True
                break
        return {"round_times": times, "round_costs": costs, "decisions": len(scheduler.trace().steps),
                "target_reached": reached, "budget_spent": spent, "best_return": best}

    def rewards(self, outcome: dict, beta: float = 0.1, cost_weight: float = 0.0) -> np.ndarray:
        return episode_rewards(outcome["round_times"], outcome["decisions"],
                               target_reached=outcome["target_reached"],
                               budget_spent=outcome["budget_spent"],
                               best_return=outcome["best_return"], target_return=self.target, beta=beta,
                               round_costs=outcome["round_costs"], cost_weight=cost_weight)

    def normaliser(self) -> StateNormaliser:
        return StateNormaliser(self.target, self.max_rounds, self.budget)


def train_on(model: SyntheticRounds, episodes: int, seed: int, batch: int = 8,
             cost_weight: float = 0.0) -> SchedulerAgent:
    agent = SchedulerAgent(4, seed=seed)
    scheduler = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=seed)
    pending = []
    for _ in range(episodes):
        scheduler.reset()
        outcome = model.run(scheduler)
        pending.append(Episode.from_trace(scheduler.trace(), model.rewards(outcome, cost_weight=cost_weight)))
        if len(pending) == batch:
            agent.update(pending)
            pending = []
    return agent


def greedy_schedule(agent: SchedulerAgent, model: SyntheticRounds) -> tuple[list[int], dict]:
    scheduler = LearnedScheduler(agent, model.normaliser(), mode="greedy")
    outcome = model.run(scheduler)
    return [s.actors for s in scheduler.trace().steps], outcome


def some_states(n: int = 12) -> list[RoundState]:
    rng = np.random.default_rng(0)
    return [RoundState(k, float(rng.normal()), float(rng.uniform(0, 500)), float(rng.uniform(0, .05)),
                       float(rng.uniform(.05, 1)), float(rng.uniform(.05, 1)), float(rng.uniform(0, .05)))
            for k in range(n)]


def trained_session(env: str, episodes: int = 0) -> SchedulerTrainingRun:
    """A `trained_on` entry for a checkpoint made in a test."""
    return SchedulerTrainingRun(env=env, mlflow_run_id="test", seed=0, mode="scratch",
                           workload=Workload(env=env), beta=0.1, batch_episodes=1, episodes=episodes)

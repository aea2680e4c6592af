"""How fast the scheduler agent learns, on a surrogate of a measured workload (seconds, not hours).

A real scheduler episode is a whole training run (Hopper-v5 at J = 600: ~23 s here), so each
setting of the scheduler's PPO costs 40+ minutes to try for real. This surrogate replays what the
sweep measured on that workload (BENCHMARKS.md "Issue 13: schedulers for Hopper-v5", held-out
seeds 100-102) with the spread the training episodes showed, and trains `SchedulerAgent`s on it
through the same `LearnedScheduler`, `StateNormaliser` and reward as the flows:

- a round with I actors takes P(I) = learner 0.02 + 0.12 I s (10 epochs of minibatch 64 over
  1024 I samples) plus the slowest actor 0.12 s, each with 10% noise: 0.26 s at I = 1, 1.1 s at
  8, 4.0 s at 32 (measured: 0.27, 1.19, 4.2);
- rounds to J: the seed's difficulty W (median 10 rounds, lognormal spread 0.35: time to J
  varied 9-65 s between training seeds) divided by the round's efficiency, 0.8 at I = 1 rising
  to 1 at I >= 8 (measured rounds to J: 12.3 at I = 1, 10 at 4 and 8, 11 at 32);
- the time-only reward (-beta P_k, the terminal penalty if J is not reached in K = 100 rounds).

So the best schedule in hindsight is Fixed(1) (as the sweep found), and the question is how many
episodes each agent setting needs to find it. Prints, per setting and seed, the mean actors the
sampling policy chose over each block of episodes and the greedy schedule at the end.

    .venv/bin/python -m benchmarks.scheduler_surrogate --workload hopper --episodes 100 --seeds 0 1 2
    .venv/bin/python -m benchmarks.scheduler_surrogate --agent '{"gae_lambda": 0.5}' --common-seeds
    .venv/bin/python -m benchmarks.scheduler_surrogate --transfer --seeds 0 1 2
    .venv/bin/python -m benchmarks.scheduler_surrogate --workload cartpole-2phase --switch-scan

`--workload cartpole-2phase` (`TwoPhaseWorkload`) is CartPole-v1 as the switch compares measured
it, where the best schedule depends on progress (8 actors, then 1): can the agent learn a
schedule that depends on the state, and in how many episodes?

`--agent` trains only that setting; `--transfer` trains a source on the CartPole surrogate (100
episodes) and fine-tunes it on the Hopper one (10 episodes in batches of 2) at three learning
rates, next to Hopper from scratch after 10, 20 and 40 episodes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from models.scheduling.agent import AgentConfig, Episode, SchedulerAgent
from models.scheduling.features import RoundState, StateNormaliser
from models.scheduling.learned import LearnedScheduler
from models.scheduling.reward import episode_rewards
from models.scheduling.schedulers import Fixed, Switch


@dataclass(frozen=True)
class SurrogateRun:
    """One surrogate training run: each round's time (P_k) and cost, and its actors, until J."""

    round_times: list[float]
    round_costs: list[float]
    actors: list[int]
    target_reached: bool
    best_return: float


@dataclass(frozen=True)
class MeasuredWorkload:
    """A training run in miniature whose round times and rounds to J follow a measured sweep.

    rounds_to_j: the sweep's mean rounds to J at each fixed count (interpolated in log I); a
    seed's difficulty scales them all by exp(N(0, difficulty_spread)). A round takes the
    learner's learner_base_s + learner_per_actor_s * I plus the slowest actor's actor_s, each
    with time_noise.
    """

    name: str
    target: float
    rounds_to_j: tuple[tuple[int, float], ...]
    learner_base_s: float
    learner_per_actor_s: float
    actor_s: float
    difficulty_spread: float
    max_rounds: int = 100
    budget: float = 1.0
    time_noise: float = 0.10
    usd_per_core_s: float = 1.25e-5

    def rounds_at(self, actors: int) -> float:
        counts = [c for c, _ in self.rounds_to_j]
        rounds = [r for _, r in self.rounds_to_j]
        return float(np.interp(math.log(actors), np.log(counts), rounds))

    def efficiency(self, actors: int) -> float:
        """Progress per round relative to the count that needs the fewest rounds."""
        return min(r for _, r in self.rounds_to_j) / self.rounds_at(actors)

    def new_run(self, rng: np.random.Generator):
        """The progress of one run: a function from a round's actors to its R_k."""
        work = min(r for _, r in self.rounds_to_j) * math.exp(rng.normal(0.0, self.difficulty_spread))
        done = 0.0

        def advance(actors: int) -> float:
            nonlocal done
            done += self.efficiency(actors) * math.exp(rng.normal(0.0, 0.1))
            return self.target * min(done / work, 1.05) * (1 + rng.normal(0.0, 0.02))
        return advance

    def run(self, scheduler, seed: int) -> SurrogateRun:
        return play(self, scheduler, seed)

    def rewards(self, outcome: SurrogateRun, beta: float, cost_weight: float = 0.0) -> np.ndarray:
        return episode_rewards(outcome.round_times, len(outcome.actors),
                               target_reached=outcome.target_reached, budget_spent=False,
                               best_return=outcome.best_return, target_return=self.target, beta=beta,
                               round_costs=outcome.round_costs, cost_weight=cost_weight)

    def normaliser(self) -> StateNormaliser:
        return StateNormaliser(self.target, self.max_rounds, self.budget)


@dataclass(frozen=True)
class TwoPhaseWorkload:
    """CartPole-v1 as the switch compares measured it: a schedule that depends on progress wins.

    A latent skill s grows each round from 0 to 1 (J), at early_rates[I] per round while s < knee
    and at late_rate for every count after (one actor's single-episode R_k reaches J as soon as
    a larger batch's mean does); R_k = J s^shape (CartPole's return rises late). Calibrated on
    BENCHMARKS.md "a two-phase schedule against the constants" (held-out seeds 100-104): rounds
    to J 26.7 at Fixed(1), 8.8 at Fixed(8) and at switch:8:1:30, 12.1 at switch:8:1:15 (measured
    27, 8.8, 8.8, 13.4). Round times as `MeasuredWorkload` "cartpole". Best schedule: 8 (or 16)
    actors until R_k ~ 0.3 J, then 1, about 0.8x Fixed(1)'s time, as measured (0.69-0.81x).
    """

    name: str = "cartpole-2phase"
    target: float = 475.0
    knee: float = 0.70
    shape: float = 3.4
    early_rates: tuple[tuple[int, float], ...] = ((1, 0.0287), (2, 0.029), (4, 0.043), (8, 0.113),
                                                   (16, 0.13), (32, 0.125))
    late_rate: float = 0.114
    learner_base_s: float = 0.02
    learner_per_actor_s: float = 0.022
    actor_s: float = 0.04
    difficulty_spread: float = 0.3
    max_rounds: int = 60
    budget: float = 1.0
    time_noise: float = 0.10
    usd_per_core_s: float = 1.25e-5

    def rate(self, actors: int, skill: float) -> float:
        if skill >= self.knee:
            return self.late_rate
        counts = [c for c, _ in self.early_rates]
        return float(np.interp(math.log(actors), np.log(counts), [r for _, r in self.early_rates]))

    def new_run(self, rng: np.random.Generator):
        """The progress of one run: a function from a round's actors to its R_k."""
        work = math.exp(rng.normal(0.0, self.difficulty_spread))
        skill = 0.0

        def advance(actors: int) -> float:
            nonlocal skill
            skill += self.rate(actors, skill) / work * math.exp(rng.normal(0.0, 0.1))
            return self.target * min(skill, 1.05) ** self.shape * (1 + rng.normal(0.0, 0.02))
        return advance

    run = MeasuredWorkload.run
    rewards = MeasuredWorkload.rewards
    normaliser = MeasuredWorkload.normaliser


def play(model, scheduler, seed: int) -> SurrogateRun:
    """One run of a surrogate workload under `scheduler`: each round's time and cost from the
    model's learner and actor times (with noise), its R_k from the model's progress, until J."""
    rng = np.random.default_rng(seed)
    advance = model.new_run(rng)
    ret, best, left = math.nan, -math.inf, model.budget
    learner_s = actor_s = math.nan
    times, costs, actors_seen = [], [], []
    for k in range(model.max_rounds):
        actors = scheduler.choose(RoundState(k, 0.5, ret, 0.01, learner_s, actor_s, left))
        noise = np.exp(rng.normal(0.0, model.time_noise, size=2))
        learner_s = (model.learner_base_s + model.learner_per_actor_s * actors) * noise[0]
        actor_s = model.actor_s * noise[1]
        times.append(learner_s + actor_s)
        costs.append(model.usd_per_core_s * (learner_s + actors * actor_s))
        left -= costs[-1]
        actors_seen.append(actors)
        ret = advance(actors)
        best = max(best, ret)
        if ret >= model.target:
            break
    return SurrogateRun(times, costs, actors_seen, best >= model.target, best)


def train(model: MeasuredWorkload, config: AgentConfig, episodes: int, batch: int, seed: int,
          common_seeds: bool, i_max: int = 32, agent: SchedulerAgent | None = None) -> tuple[SchedulerAgent, list[float]]:
    """Train (or go on training) an agent; returns it and the mean actors of every episode."""
    agent = agent or SchedulerAgent(i_max, config, seed=seed)
    scheduler = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=seed)
    pending, mean_actors = [], []
    for e in range(episodes):
        scheduler.reset()
        workload_seed = 1000 * seed + (e - e % batch if common_seeds else e)
        outcome = model.run(scheduler, workload_seed)
        pending.append(Episode.from_trace(scheduler.trace(), model.rewards(outcome, config.beta, config.cost_weight)))
        mean_actors.append(float(np.mean(outcome.actors)))
        if len(pending) == batch:
            agent.update(pending)
            pending = []
    return agent, mean_actors


def greedy_time(model: MeasuredWorkload, agent: SchedulerAgent, seeds=range(100, 110)) -> tuple[float, float]:
    """Mean time to J and mean actors of the greedy schedule on held-out workload seeds."""
    times, actors, _ = greedy_runs(model, agent, seeds)
    return statistics.mean(times), statistics.mean(a for run in actors for a in run)


def greedy_runs(model, agent: SchedulerAgent, seeds=range(100, 110)) -> tuple[list[float], list[list[int]], str]:
    """Times to J and actors per round of the greedy schedule on held-out seeds, and its shape:
    the mean actors of the first and the second half of the rounds."""
    times, actors = [], []
    for s in seeds:
        outcome = model.run(LearnedScheduler(agent, model.normaliser(), mode="greedy"), s)
        times.append(sum(outcome.round_times))
        actors.append(outcome.actors)
    first = statistics.mean(a for run in actors for a in run[:len(run) // 2] or run)
    second = statistics.mean(a for run in actors for a in run[len(run) // 2:])
    return times, actors, f"{first:4.1f} -> {second:4.1f}"


def time_and_cost(model, make_scheduler, seeds) -> tuple[float, float]:
    """Mean time to J and mean cost of a scheduler (made fresh per seed) on the model's seeds."""
    outcomes = [model.run(make_scheduler(), s) for s in seeds]
    return (statistics.mean(sum(o.round_times) for o in outcomes),
            statistics.mean(sum(o.round_costs) for o in outcomes))


def fixed_time(model: MeasuredWorkload, n: int, seeds=range(100, 110)) -> float:
    """Mean time to J of Fixed(n) on held-out workload seeds."""
    return time_and_cost(model, partial(Fixed, n, 32), seeds)[0]


def switch_time(model, before: int, after: int, percent: int, seeds=range(100, 110)) -> float:
    """Mean time to J of switch:before:after:percent on held-out workload seeds."""
    return time_and_cost(model, partial(Switch, before, after, percent, model.target, 32), seeds)[0]


WORKLOADS = {
    # BENCHMARKS.md "Issue 13: schedulers for Hopper-v5 (the paper's J = 600)": held-out sweep
    "hopper": MeasuredWorkload("hopper", 600.0, ((1, 12.3), (2, 14.0), (4, 10.0), (8, 10.0), (16, 10.3), (32, 11.0)),
                               learner_base_s=0.02, learner_per_actor_s=0.12, actor_s=0.12, difficulty_spread=0.35),
    # BENCHMARKS.md "Issue 13: a cost term in the scheduler's reward": held-out sweep, 5 seeds
    "cartpole": MeasuredWorkload("cartpole", 475.0, ((1, 37.2), (2, 29.4), (4, 21.0), (8, 8.6), (16, 8.8), (32, 9.0)),
                                 learner_base_s=0.02, learner_per_actor_s=0.022, actor_s=0.04, difficulty_spread=0.3),
    "cartpole-2phase": TwoPhaseWorkload(),
}

SETTINGS = {
    "default (lr 1e-3, lambda 0.95, batch 4)": ({}, 4, False),
    "common seeds": ({}, 4, True),
    "lambda 0.7, common seeds": ({"gae_lambda": 0.7}, 4, True),
    "lambda 0.5, common seeds": ({"gae_lambda": 0.5}, 4, True),
    "lambda 0, common seeds": ({"gae_lambda": 0.0}, 4, True),
    "lr 2e-3, lambda 0.5, common seeds": ({"learning_rate": 2e-3, "gae_lambda": 0.5}, 4, True),
}


def switch_scan(model, seeds=range(100, 140)) -> None:
    """Every switch:A:1:P against Fixed(1) on time and cost: is any two-phase schedule both
    within 5% of the constant 1's cost and faster (issue 13's goal against the best fixed count)?"""
    t1, c1 = time_and_cost(model, lambda: Fixed(1, 32), seeds)
    print(f"Fixed(1): {t1:.2f} s, ${c1:.7f} (mean of {len(seeds)} seeds); ratios below are against it")
    for n in (2, 4, 8, 16):
        t, c = time_and_cost(model, partial(Fixed, n, 32), seeds)
        print(f"  Fixed({n}): time {t / t1:.2f}x, cost {c / c1:.2f}x")
    rows = []
    for before in (2, 3, 4, 6, 8, 10, 12, 16):
        for percent in (5, 10, 15, 20, 30, 40, 50, 60, 70):
            t, c = time_and_cost(model, partial(Switch, before, 1, percent, model.target, 32), seeds)
            rows.append((c / c1, t / t1, f"switch:{before}:1:{percent}"))
    print("cheapest switches: " + ", ".join(f"{name} {c:.2f}x cost / {t:.2f}x time" for c, t, name in sorted(rows)[:5]))
    print("fastest switches:  " + ", ".join(f"{name} {c:.2f}x cost / {t:.2f}x time"
                                           for c, t, name in sorted(rows, key=lambda r: r[1])[:5]))
    meeting = [name for c, t, name in rows if c <= 1.05 and t <= 1.0]
    print(f"within 5% of Fixed(1)'s cost at no more time: {', '.join(meeting) or 'none'}")


def transfer(seeds: list[int], config: AgentConfig) -> None:
    """Fine-tuning a CartPole-surrogate scheduler on the Hopper surrogate against Hopper from scratch."""
    import copy

    source_model, target = WORKLOADS["cartpole"], WORKLOADS["hopper"]
    for seed in seeds:
        source, _ = train(source_model, config, 100, 4, seed, True)
        _, zero_shot = greedy_time(target, source)
        print(f"seed {seed}: source greedy {greedy_time(source_model, source)[1]:.1f} actors on CartPole, "
              f"{zero_shot:.1f} on Hopper (zero-shot)")
        for lr in (1e-3, 5e-3, 1e-2):
            agent = copy.deepcopy(source)
            agent.config = agent.config.replace({"learning_rate": lr})
            for group in agent.optimizer.param_groups:
                group["lr"] = lr
            agent, _ = train(target, agent.config, 10, 2, seed + 50, True, agent=agent)
            t, a = greedy_time(target, agent)
            print(f"  fine-tuned 10 episodes, lr {lr:g}: greedy {a:4.1f} actors, {t:6.2f} s to J")
        for episodes in (10, 20, 40):
            agent, _ = train(target, config, episodes, 4, seed + 50, True)
            t, a = greedy_time(target, agent)
            print(f"  from scratch {episodes} episodes:      greedy {a:4.1f} actors, {t:6.2f} s to J")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="hopper")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--block", type=int, default=20, help="episodes per column of mean actors")
    parser.add_argument("--setting", action="append", help="only these settings (names above)")
    parser.add_argument("--agent", type=json.loads, help="one more setting: AgentConfig overrides as JSON")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--common-seeds", action="store_true")
    parser.add_argument("--transfer", action="store_true", help="CartPole surrogate -> Hopper surrogate")
    parser.add_argument("--switch-scan", action="store_true",
                        help="every switch:A:1:P against Fixed(1) on time and cost (no training)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = WORKLOADS[args.workload]
    if args.switch_scan:
        return switch_scan(model)
    if args.transfer:
        return transfer(args.seeds, AgentConfig().replace(args.agent or {"gae_lambda": 0.5}))
    if args.setting:
        settings = {k: v for k, v in SETTINGS.items() if k in args.setting}
    else:  # --agent alone trains just that setting
        settings = {} if args.agent is not None else dict(SETTINGS)
    if args.agent is not None:
        settings[f"custom {json.dumps(args.agent)}"] = (args.agent, args.batch, args.common_seeds)
    print("fixed counts, mean time to J on held-out seeds: "
          + ", ".join(f"{n}: {fixed_time(model, n):.2f} s" for n in (1, 2, 4, 8, 16, 32)))
    print("switch:A:1:P, mean time to J: " + ", ".join(
        f"{a}:1:{p}: {switch_time(model, a, 1, p):.2f} s" for a in (8, 16) for p in (15, 30, 50)))
    held_out = range(100, 110)
    t1, c1 = time_and_cost(model, lambda: Fixed(1, 32), held_out)
    for name, (overrides, batch, common) in settings.items():
        config = AgentConfig().replace(overrides)
        for seed in args.seeds:
            agent, actors = train(model, config, args.episodes, batch, seed, common)
            blocks = [statistics.mean(actors[i:i + args.block]) for i in range(0, len(actors), args.block)]
            _, _, shape = greedy_runs(model, agent, held_out)
            t, c = time_and_cost(model, partial(LearnedScheduler, agent, model.normaliser(), mode="greedy"), held_out)
            print(f"{name:45s} seed {seed}: mean actors per {args.block} episodes "
                  f"{' '.join(f'{b:5.1f}' for b in blocks)} | greedy: {shape} actors, "
                  f"{t:6.2f} s to J; x Fixed(1): time {t / t1:.2f}, cost {c / c1:.2f}")


if __name__ == "__main__":
    main()

"""A training run's state across rounds: the bookkeeping of the one round loop.

No Prefect here: the flows call into this, and tests drive it directly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from models.checkpoint import save_checkpoint
from models.config import RunConfig
from models.cost import PriceTable, estimate_round_cost, server_cluster_cost
from models.envs import env_spaces
from models.metrics import round_metrics
from models.ppo import Learner
from models.rollout import ActorJob, RolloutBatch
from models.schedulers import RoundState, make_scheduler

STOP_TARGET, STOP_BUDGET, STOP_MAX_ROUNDS = "target_reached", "budget_spent", "max_rounds"

HISTORY_KEYS = ("sched/actors", "rollout/ep_return_mean", "time/round_s", "time/learner_s",
                "time/actor_mean_s", "cost/round_usd", "train/loss", "train/policy_kl",
                "rollout/env_steps")

# A round's cost is estimated from the last round's durations; rounds vary, so leave headroom
# (measured on CartPole: round-to-round duration changes stay well under 20%).
BUDGET_MARGIN = 1.2


class TrainingSession:
    def __init__(self, cfg: RunConfig, prices: PriceTable):
        self.cfg = cfg
        self.prices = prices
        self.spaces = env_spaces(cfg.env_id)
        self.learner = Learner(self.spaces, cfg.ppo, seed=cfg.seed, device=cfg.learner_device,
                               max_rounds=cfg.max_rounds)
        self.scheduler = make_scheduler(cfg.scheduler, cfg.i_max, cfg.max_rounds, cfg.target_return,
                                        budget_usd=cfg.budget_usd, seed=cfg.seed)
        self.round_index = 0  # the next round to run
        self.spent_usd = 0.0
        self.env_steps = 0
        self.sum_round_s = 0.0  # sum of P_k: time to here with one core per actor
        self.sum_wall_s = 0.0  # sum of round wall times on this machine
        self.best_return = -math.inf
        self.last: dict[str, float] = {}
        self.stop_reason: str | None = None
        self.run_id: str | None = None
        self.history: list[dict[str, float]] = []  # per-round figures a scheduler learns from

    # -- before a round ------------------------------------------------------------------
    def state(self) -> RoundState:
        """s_k for the scheduler, from the last round's figures (zeros before the first)."""
        last = self.last
        return RoundState(
            round_index=self.round_index,
            last_loss=last.get("train/loss", 0.0),
            last_return=last.get("rollout/ep_return_mean", math.nan),
            policy_kl=last.get("train/policy_kl", 0.0),
            last_learner_s=last.get("time/learner_s", 0.0),
            last_actor_s=last.get("time/actor_mean_s", 0.0),
            budget_left_usd=self.budget_left_usd,
        )

    @property
    def budget_left_usd(self) -> float:
        return self.cfg.budget_usd - self.spent_usd

    def next_round_fits_budget(self, actors: int) -> bool:
        """False when the last round's durations say this round would overspend the budget."""
        if not self.last:
            return self.budget_left_usd > 0
        estimate = estimate_round_cost(actors, self.last["time/learner_s"],
                                       self.last["time/actor_mean_s"], self.prices)
        return estimate * BUDGET_MARGIN <= self.budget_left_usd

    def jobs(self, actors: int, weights: bytes) -> list[ActorJob]:
        cfg = self.cfg
        now = time.time()
        norm = self.learner.norm_state()
        return [ActorJob(env_id=cfg.env_id, round_index=self.round_index, actor_index=i,
                         seed=actor_seed(cfg.seed, self.round_index, i, cfg.i_max),
                         steps_per_env=cfg.steps_per_env, envs_per_actor=cfg.envs_per_actor,
                         hidden=cfg.ppo.hidden, weights=weights, requested_at=now,
                         norm=norm)
                for i in range(actors)]

    # -- after a round -------------------------------------------------------------------
    def record(self, batches: list[RolloutBatch], learner_stats: dict[str, float],
               wall_s: float, failed_billed_s: list[float] | None = None) -> dict[str, float]:
        """Fold a finished round into the run's totals; returns the round's metrics."""
        metrics = round_metrics(batches, learner_stats["time/learner_s"], wall_s, self.prices,
                                failed_billed_s)
        metrics.update(learner_stats)
        if "time/round_body_s" in learner_stats:  # split the overhead: subflow vs tasks
            metrics["time/subflow_overhead_s"] = max(wall_s - learner_stats["time/round_body_s"], 0.0)
        self.spent_usd += metrics["cost/round_usd"]
        self.env_steps += int(metrics["rollout/env_steps"])
        self.sum_round_s += metrics["time/round_s"]
        self.sum_wall_s += wall_s
        ret = metrics["rollout/ep_return_mean"]
        if not math.isnan(ret):
            self.best_return = max(self.best_return, ret)
        metrics.update({
            "cost/total_usd": self.spent_usd,
            "cost/budget_left_usd": self.budget_left_usd,
            "cost/server_cluster_usd": server_cluster_cost(self.sum_round_s, self.prices),
            "rollout/env_steps_total": float(self.env_steps),
            "time/total_round_s": self.sum_round_s,
            "time/total_wall_s": self.sum_wall_s,
        })
        self.last = metrics
        self.history.append({key: metrics[key] for key in HISTORY_KEYS if key in metrics})
        self.round_index += 1
        if not math.isnan(ret) and ret >= self.cfg.target_return:
            self.stop_reason = STOP_TARGET
        elif self.round_index >= self.cfg.max_rounds:
            self.stop_reason = STOP_MAX_ROUNDS
        return metrics

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "env_id": self.cfg.env_id,
            "scheduler": self.scheduler.name,
            "seed": self.cfg.seed,
            "stop_reason": self.stop_reason,
            "rounds": self.round_index,
            "target_reached": self.stop_reason == STOP_TARGET,
            "final_return": self.last.get("rollout/ep_return_mean", math.nan),
            "best_return": self.best_return,
            "env_steps": self.env_steps,
            "cost_usd": self.spent_usd,
            "server_cluster_cost_usd": server_cluster_cost(self.sum_round_s, self.prices),
            "time_to_stop_s": self.sum_round_s,
            "wall_time_s": self.sum_wall_s,
            "history": list(self.history),
            "scheduler_trace": (self.scheduler.trace() if hasattr(self.scheduler, "trace") else None),
        }

    # -- checkpoints ---------------------------------------------------------------------
    def policy_artifact(self) -> dict[str, Any]:
        """What a user needs to run the trained policy: weights, spaces and normaliser stats."""
        return {"env_id": self.cfg.env_id, "hidden": self.cfg.ppo.hidden,
                "policy": {k: v.cpu() for k, v in self.learner.policy.state_dict().items()},
                "norm": self.learner.norm_state()}

    def save(self, path: str | Path) -> Path:
        return save_checkpoint(path, {
            "config": dataclasses.asdict(self.cfg),
            "learner": self.learner.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "round_index": self.round_index,
            "spent_usd": self.spent_usd,
            "env_steps": self.env_steps,
            "sum_round_s": self.sum_round_s,
            "sum_wall_s": self.sum_wall_s,
            "best_return": self.best_return,
            "last": self.last,
            "stop_reason": self.stop_reason,
            "run_id": self.run_id,
            "history": self.history,
        })

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last finished round of a checkpoint."""
        self.learner.load_state_dict(state["learner"])
        self.scheduler.load_state_dict(state["scheduler"])
        for key in ("round_index", "spent_usd", "env_steps", "sum_round_s", "sum_wall_s",
                    "best_return", "last", "stop_reason", "run_id", "history"):
            setattr(self, key, state[key])


def actor_seed(seed: int, round_index: int, actor_index: int, i_max: int) -> int:
    """Distinct, reproducible seeds for every actor of every round (RLlib: seed + worker index)."""
    return seed * 1_000_003 + round_index * i_max + actor_index

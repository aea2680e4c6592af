"""A training run's state across rounds: the round loop's bookkeeping and its three stop rules.

No Prefect here: the `train` flow (flows/train.py) calls into this, and tests drive it directly.
A run stops when a round's mean return reaches J (target), when an upper bound of the next
round's cost (models/billing/budget.py) does not fit in what is left of B (budget; round 0 included),
or after K rounds (max_rounds).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict
from pathlib import Path

from models.billing.budget import (
    RoundBound,
    RunShape,
    calibrate_learner,
    cluster_round_bound,
    round_bound,
)
from models.billing.cost import RoundBill, bill_cluster_round, round_cost, server_cluster_cost
from models.envs.batch import env_spaces
from models.envs.snapshot import EnvSnapshot
from models.errors import ConfigError
from models.rl.evaluation import evaluation_reaches
from models.rl.ppo import Learner
from models.rl.rollout import ActorJob, RolloutBatch
from models.run.checkpoint import PolicyArtifact, RunCheckpoint, save_policy, save_run_checkpoint
from models.run.config import RunConfig
from models.run.journal import LostAttempt
from models.run.metrics import actor_billed_s, one_core_per_actor_wall_s, round_metrics
from models.run.records import STOP_BUDGET, STOP_TARGET, RoundRecord, RunProgress, RunSummary
from models.scheduling.schedulers import RoundState, make_scheduler


class TrainingSession:
    """The learner, the scheduler and the run's progress; one `record` per finished round."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.prices = cfg.prices
        self.spaces = env_spaces(cfg.env_id)
        # The learner's start-up, measured once and billed in the first round this session runs
        # (a resumed run starts a new learner and pays again): building it on its device and
        # timing one minibatch step there, which the budget bound needs before round 0.
        started = time.perf_counter()
        self.learner = Learner(self.spaces, cfg.ppo, seed=cfg.seed, device=cfg.learner_device,
                               max_rounds=cfg.max_rounds, max_env_steps=cfg.max_env_steps)
        step_s = calibrate_learner(self.learner.policy, self.spaces.obs_shape, self.spaces.obs_dtype,
                                   self.spaces.discrete, self.spaces.n_actions, cfg.ppo.minibatch_size)
        self.learner_startup_s = time.perf_counter() - started
        self._learner_startup_due = True
        self._pool_startup_due_s = 0.0  # the backend's pre-warm boots, billed in the next round
        self.shape = RunShape(fragment=cfg.fragment, update_epochs=cfg.ppo.update_epochs,
                              minibatch_size=cfg.ppo.minibatch_size, backend=cfg.backend.name,
                              learner_device=self.learner_device, learner_s_per_unit_calibrated=step_s,
                              host_cores=max(os.cpu_count() or 1, 1))
        # A server cluster is billed for its wall time from its first round on (the clock the
        # flow starts once its actors are up) and its start-up once, as the user asked.
        self._cluster_startup_due = cfg.cluster and cfg.bill_cluster_startup
        self._cluster_clock: float | None = None
        self._admitted: RoundBound | None = None
        self.scheduler = make_scheduler(cfg.scheduler, cfg.i_max, cfg.max_rounds, cfg.target_return,
                                        budget_usd=cfg.budget_usd,
                                        seed=cfg.seed if cfg.scheduler_seed is None else cfg.scheduler_seed)
        self.progress = RunProgress()
        # carry_episodes: each actor index's episodes in progress, continued by the next round's
        # actor of that index (an index not run, or failed, starts fresh episodes next time)
        self.carry: dict[int, tuple[EnvSnapshot, ...]] = {}

    # -- before a round ------------------------------------------------------------------
    @property
    def round_index(self) -> int:
        return self.progress.round_index

    @property
    def stop_reason(self) -> str | None:
        return self.progress.stop_reason

    @property
    def run_id(self) -> str | None:
        return self.progress.run_id

    @property
    def last(self) -> RoundRecord | None:
        return self.progress.history[-1] if self.progress.history else None

    def state(self) -> RoundState:
        """s_k for the scheduler, from the last round's figures (zeros before the first)."""
        last = self.last
        return RoundState(
            round_index=self.round_index,
            last_loss=last.loss if last else 0.0,
            last_return=last.mean_return if last else math.nan,
            policy_kl=last.policy_kl if last else 0.0,
            last_learner_s=last.learner_s if last else 0.0,
            last_actor_s=last.actor_mean_s if last else 0.0,
            budget_left_usd=self.budget_left_usd,
        )

    @property
    def budget_left_usd(self) -> float:
        return self.cfg.budget_usd - self.progress.spent_usd

    @property
    def learner_device(self) -> str:
        """'cuda' or 'cpu': what the learner runs on, and so what it is billed as."""
        return self.learner.device.type

    def round_bound(self, actors: int) -> RoundBound:
        """An upper bound of the next round's cost with `actors` actors (models/billing/budget.py)."""
        if self.cfg.cluster:
            return cluster_round_bound(actors, self.shape, self.progress.measured, self.prices,
                                       self.learner_device, self._cluster_startup_due)
        return round_bound(actors, self.shape, self.progress.measured, self.prices,
                           self.learner_startup_s if self._learner_startup_due else 0.0,
                           self._pool_startup_due_s, learner_resident=self.cfg.learner_resident)

    def note_backend_startup(self, seconds: float) -> None:
        """Actor start-up the backend incurred before a round and outside any actor (its worker
        processes booting before round 0): billed in the next round, inside its budget bound."""
        self._pool_startup_due_s += max(seconds, 0.0)

    def start_cluster_clock(self) -> None:
        """Server cluster: its billed wall time runs from now on (its actors are up); each
        round is billed the span since the previous one, so the sum is the whole run's wall."""
        self._cluster_clock = time.perf_counter()

    def admit_round(self, actors: int) -> bool:
        """The budget rule: a round starts only when an upper bound of its cost fits in what is
        left of B, round 0 included; otherwise the run stops (stop_reason budget_spent, and
        stop_detail says which round and why)."""
        bound = self.round_bound(actors)
        left = self.budget_left_usd
        if bound.total_usd <= left:
            self._admitted = bound
            return True
        p = self.progress
        p.stop_reason = STOP_BUDGET
        p.stop_detail = (f"budget: round {p.round_index} not started: the upper bound of its cost "
                         f"with {actors} actors, ${bound.total_usd:.3g} (actors ${bound.actors_usd:.3g}, "
                         f"learner ${bound.learner_usd:.3g}, start-up ${bound.startup_usd:.3g}), "
                         f"exceeds the ${left:.3g} left of B=${self.cfg.budget_usd:.3g}")
        return False

    def jobs(self, actors: int, weights: bytes) -> list[ActorJob]:
        cfg = self.cfg
        now = time.time()
        norm = self.learner.norm_state()
        return [ActorJob(env_id=cfg.env_id, round_index=self.round_index, actor_index=i,
                         seed=actor_seed(cfg.seed, self.round_index, i, cfg.i_max),
                         steps_per_env=cfg.steps_per_env, envs_per_actor=cfg.envs_per_actor,
                         hidden=cfg.ppo.hidden, weights=weights, requested_at=now,
                         norm=norm, carry_episodes=cfg.carry_episodes, resume=self.carry.get(i, ()),
                         env_backend=cfg.env_backend)
                for i in range(actors)]

    # -- after a round -------------------------------------------------------------------
    def record(self, batches: list[RolloutBatch], learner_stats: dict[str, float],
               wall_s: float, failed_billed_s: list[float] | None = None,
               warm_idle_s: float = 0.0, pool_startup_s: float = 0.0, outside_s: float = 0.0) -> dict[str, float]:
        """Fold a finished round into the run's totals and apply the target and K rules;
        returns the round's metrics (MLflow names).

        warm_idle_s: idle seconds of kept-warm actors waiting for this round, billed at the actor
        price (models/billing/cost.py warm_idle_cost); 0 until the backend reports them.
        pool_startup_s: the backend's actor start-up outside any actor during this round (a
        replacement worker that booted idle), billed as start-up with what note_backend_startup
        left due.
        outside_s: the round's cycle outside its subflow on this machine's clock (scheduling, the
        budget check, the round before's checkpoint and MLflow writes): orchestration, on both clocks.
        """
        if self.cfg.carry_episodes:
            self.carry = {b.actor_index: b.carry for b in batches if b.carry}
        learner_s = learner_stats["time/learner_s"]
        cluster_bill, billed_wall_s, cluster_metrics = self._bill_cluster_round(batches, learner_s, wall_s)
        metrics = round_metrics(batches, learner_s, wall_s, self.prices, failed_billed_s,
                                learner_device=self.learner_device,
                                learner_startup_s=self.learner_startup_s if self._learner_startup_due else 0.0,
                                warm_idle_s=warm_idle_s,
                                pool_startup_s=self._pool_startup_due_s + pool_startup_s,
                                bill=cluster_bill)
        metrics.update(cluster_metrics)
        metrics["time/round_cycle_wall_s"] = wall_s + outside_s
        metrics["time/round_cloud_s"] = one_core_per_actor_wall_s(batches, learner_s, wall_s) + outside_s
        self._bill_learner_both_ways(metrics)
        self._learner_startup_due = False
        self._pool_startup_due_s = 0.0
        metrics.update(learner_stats)
        if self._admitted is not None:
            metrics["cost/round_bound_usd"] = self._admitted.total_usd
            self._admitted = None
        self.progress.measured.observe(actor_billed_s(batches, failed_billed_s), learner_s,
                                       sum(b.steps for b in batches), self.shape, warm_idle_s, billed_wall_s)
        if "time/round_body_s" in learner_stats:  # split the overhead: subflow vs tasks
            metrics["time/subflow_overhead_s"] = max(wall_s - learner_stats["time/round_body_s"], 0.0)
        self._add_to_totals(metrics, wall_s)
        self._apply_stop_rules(metrics["rollout/ep_return_mean"])
        return metrics

    def _bill_cluster_round(self, batches: list[RolloutBatch], learner_s: float, wall_s: float
                            ) -> tuple[RoundBill | None, float, dict[str, float]]:
        """Server cluster: the round's bill, its billed wall seconds and its cluster/... metrics
        (a serverless run: None, 0 and none). The cluster bills all its time, idle included, but
        the round itself as it would run on the cluster's own cores, not as this machine ran it."""
        if not self.cfg.cluster:
            return None, 0.0, {}
        p = self.progress
        now = time.perf_counter()
        span_s = wall_s if self._cluster_clock is None else now - self._cluster_clock
        cluster_round_s = one_core_per_actor_wall_s(batches, learner_s, wall_s)
        billed_wall_s = max(span_s - wall_s, 0.0) + cluster_round_s
        self._cluster_clock = now
        bill = bill_cluster_round(billed_wall_s, self.learner_device, self.prices,
                                  with_startup=self._cluster_startup_due)
        self._cluster_startup_due = False
        pids = {b.timings.worker_pid for b in batches if b.timings.worker_pid is not None}
        new = pids - set(p.worker_pids)
        p.worker_pids = sorted(set(p.worker_pids) | pids)
        p.sum_billed_wall_s += billed_wall_s
        return bill, billed_wall_s, {"time/billed_wall_s": billed_wall_s, "time/cluster_round_s": cluster_round_s,
                                     "cluster/worker_processes": float(len(p.worker_pids)),
                                     "cluster/new_worker_processes": float(len(new))}

    def _bill_learner_both_ways(self, metrics: dict[str, float]) -> None:
        """The learner's bill per round (its update) and resident (the round's cloud time), both
        as metrics; a resident learner's is the one billed (a cluster's learner VM is its own)."""
        if self.cfg.cluster:
            return
        per_round = metrics["cost/learner_usd"]
        resident = metrics["time/round_cloud_s"] * self.prices.learner_per_second(self.learner_device)
        metrics["cost/learner_per_round_usd"] = per_round
        metrics["cost/learner_resident_usd"] = resident
        if self.cfg.learner_resident:
            metrics["cost/learner_usd"] = resident
            metrics["cost/round_usd"] += resident - per_round
        self.progress.learner_per_round_usd += per_round
        self.progress.learner_resident_usd += resident

    def _add_to_totals(self, metrics: dict[str, float], wall_s: float) -> None:
        """Fold the round's figures into the run's totals, and its totals into its metrics."""
        p = self.progress
        p.actors_usd += metrics["cost/actors_usd"]
        p.learner_usd += metrics["cost/learner_usd"]
        p.startup_usd += metrics["cost/startup_usd"]
        p.projected_aci_startup_usd += metrics["cost/projected_aci_startup_usd"]
        p.spent_usd += metrics["cost/round_usd"]
        p.env_steps += int(metrics["rollout/env_steps"])
        p.sum_round_s += metrics["time/round_s"]
        p.sum_wall_s += wall_s
        p.sum_cycle_wall_s += metrics["time/round_cycle_wall_s"]
        p.sum_cloud_s += metrics["time/round_cloud_s"]
        ret = metrics["rollout/ep_return_mean"]
        if not math.isnan(ret):
            p.best_return = max(p.best_return, ret)
        metrics.update({
            "cost/total_usd": p.spent_usd,
            "cost/budget_left_usd": self.budget_left_usd,
            "cost/server_cluster_usd": server_cluster_cost(self._cluster_basis_s(), self.prices, self.learner_device),
            "cost/server_cluster_no_startup_usd": server_cluster_cost(self._cluster_basis_s(), self.prices, self.learner_device,
                                                                      with_startup=False),
            "rollout/env_steps_total": float(p.env_steps),
            "time/total_round_s": p.sum_round_s,
            "time/total_wall_s": p.sum_wall_s,
            "time/total_cycle_wall_s": p.sum_cycle_wall_s,
            "time/total_cloud_s": p.sum_cloud_s,
            "cost/lost_attempts_usd": p.lost_usd,
        })
        p.history.append(RoundRecord.from_metrics(p.round_index, metrics))
        p.round_index += 1

    def _apply_stop_rules(self, ret: float) -> None:
        """J on R_k (unless judged on evaluations), then K, then S (max_env_steps)."""
        p = self.progress
        if not self.cfg.stop_at_eval and not math.isnan(ret) and ret >= self.cfg.target_return:
            p.stop_reason = STOP_TARGET
            p.stop_detail = f"target: round {p.round_index - 1} returned {ret:.4g} >= J={self.cfg.target_return:g}"
        else:
            p.apply_limits(self.cfg.max_rounds, self.cfg.max_env_steps)

    def add_orchestration(self, seconds: float) -> None:
        """Orchestration after the last round (its checkpoint and MLflow writes, the stop): on
        both clocks."""
        self.progress.sum_cycle_wall_s += max(seconds, 0.0)
        self.progress.sum_cloud_s += max(seconds, 0.0)

    def record_evaluation(self, metrics: dict[str, float]) -> None:
        """With stop_at_eval, stop when this evaluation (eval/ metrics of the round just
        recorded) reaches J with every episode moving forward where displacement is measured."""
        if not self.cfg.stop_at_eval or self.progress.stop_reason == STOP_TARGET:
            return
        reached = evaluation_reaches(metrics, self.cfg.target_return)
        if reached is None:
            return
        p = self.progress
        p.stop_reason = STOP_TARGET
        p.stop_detail = f"target: the evaluation after round {p.round_index - 1} {reached}"

    def _cluster_basis_s(self) -> float:
        """The wall time the server cluster is priced for: what a server-cluster run was billed;
        for a serverless run, its time with one core per actor (sum of P_k)."""
        p = self.progress
        return p.sum_billed_wall_s if self.cfg.cluster else p.sum_round_s

    def summary(self, tracking_uri: str = "", checkpoint: str = "") -> RunSummary:
        p = self.progress
        last = self.last
        return RunSummary(
            run_id=p.run_id, env_id=self.cfg.env_id, scheduler=self.scheduler.name,
            seed=self.cfg.seed, stop_reason=p.stop_reason, rounds=p.round_index,
            final_return=last.mean_return if last else math.nan, best_return=p.best_return,
            env_steps=p.env_steps, cost_usd=p.spent_usd,
            server_cluster_cost_usd=server_cluster_cost(self._cluster_basis_s(), self.prices, self.learner_device),
            time_to_stop_s=p.sum_round_s, wall_time_s=p.sum_cycle_wall_s, cloud_time_s=p.sum_cloud_s,
            history=tuple(p.history),
            scheduler_trace=self.scheduler.trace() if hasattr(self.scheduler, "trace") else None,
            tracking_uri=tracking_uri, checkpoint=checkpoint,
            server_cluster_cost_no_startup_usd=server_cluster_cost(self._cluster_basis_s(), self.prices, self.learner_device,
                                                                   with_startup=False),
            actors_cost_usd=p.actors_usd, learner_cost_usd=p.learner_usd,
            startup_cost_usd=p.startup_usd, projected_aci_startup_usd=p.projected_aci_startup_usd,
            learner_device=self.learner_device, stop_detail=p.stop_detail, system=self.cfg.system,
            learner_billing=self.cfg.learner_billing, learner_per_round_cost_usd=p.learner_per_round_usd,
            learner_resident_cost_usd=p.learner_resident_usd)

    def bill_lost_attempt(self, lost: LostAttempt) -> float:
        """Bill once what an attempt of the next round was billed before a crash cut it short."""
        p = self.progress
        if lost.round_index != p.round_index or lost.attempt_id in p.billed_attempts:
            return 0.0
        if self.cfg.cluster:  # the cluster ran while the attempt did: its span, at least
            cost = server_cluster_cost(lost.learner_s + max(lost.actor_billed_s, default=0.0), self.prices,
                                       self.learner_device,
                                       with_startup=False)
        else:
            cost = round_cost(lost.learner_s, list(lost.actor_billed_s), self.prices, self.learner_device)
        p.spent_usd += cost
        p.lost_usd += cost
        p.billed_attempts.append(lost.attempt_id)
        return cost

    # -- checkpoints ---------------------------------------------------------------------
    def policy_artifact(self) -> PolicyArtifact:
        """What a user needs to run the trained policy: weights, spaces and normaliser stats."""
        learner = self.learner
        return PolicyArtifact(env_id=self.cfg.env_id, hidden=self.cfg.ppo.hidden,
                              policy={k: v.cpu() for k, v in learner.policy.state_dict().items()},
                              obs_rms=learner.obs_rms.moments() if learner.obs_rms else None)

    def save_policy(self, path: str | Path) -> Path:
        return save_policy(path, self.policy_artifact())

    def save(self, path: str | Path, round_metrics: dict[str, float] | None = None) -> Path:
        """Checkpoint after a round; round_metrics: that round's MLflow metrics, logged after
        the checkpoint is written (a resume logs them if the crash came in between)."""
        p = self.progress
        return save_run_checkpoint(path, RunCheckpoint(
            config=self.cfg.to_dict(), learner=self.learner.state_dict(),
            scheduler=self.scheduler.state_dict(),
            progress={**asdict(p), "history": [asdict(r) for r in p.history]},
            round_metrics=dict(round_metrics or {}),
            carry=dict(self.carry)))

    def load(self, checkpoint: RunCheckpoint, where: str = "the checkpoint") -> None:
        """Continue exactly after the last finished round of a checkpoint, checked, not trusted:
        its progress (RunProgress.from_checkpoint) and its weights' shapes against this run's env
        and network (an error names `where`, the file, and the field)."""
        progress = RunProgress.from_checkpoint(checkpoint.progress, where)
        mine = self.learner.policy.state_dict()
        theirs = checkpoint.learner.get("policy", {}) if isinstance(checkpoint.learner, dict) else {}
        wrong = sorted(k for k in set(mine) | set(theirs)
                       if k not in mine or k not in theirs or tuple(mine[k].shape) != tuple(theirs[k].shape))
        if wrong:
            raise ConfigError(f"{where}: learner.policy does not fit config.env_id {self.cfg.env_id} with hidden "
                              f"{self.cfg.ppo.hidden} (weights {wrong[:3]} differ in shape or are missing): the "
                              "checkpoint was edited or belongs to another run")
        self.learner.load_state_dict(checkpoint.learner)
        self.scheduler.load_state_dict(checkpoint.scheduler)
        self.carry = dict(checkpoint.carry)
        self.progress = progress
        progress.reopen_limits(self.cfg.max_rounds, self.cfg.max_env_steps)


def actor_seed(seed: int, round_index: int, actor_index: int, i_max: int) -> int:
    """Distinct, reproducible seeds for every actor of every round (RLlib: seed + worker index)."""
    return seed * 1_000_003 + round_index * i_max + actor_index

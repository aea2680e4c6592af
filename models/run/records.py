"""What a training run records: each finished round (RoundRecord), the running totals a checkpoint
carries (RunProgress), and what a finished run reports (RunSummary)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from models.billing.budget import Measured
from models.errors import ConfigError
from models.json_types import JSONObject
from models.run.config import LEARNER_PER_ROUND, LEARNER_RESIDENT, SYSTEM_SERVERLESS
from models.scheduling.features import SchedulerTrace

STOP_TARGET, STOP_BUDGET, STOP_MAX_ROUNDS = "target_reached", "budget_spent", "max_rounds"
STOP_MAX_ENV_STEPS = "max_env_steps"


@dataclass(frozen=True)
class RoundRecord:
    """One finished round: what the scheduler observes next and what a run's summary lists."""

    round_index: int
    actors: int
    mean_return: float
    """R_k: mean return of the episodes completed in the round (NaN when none did)."""
    env_steps: int
    round_s: float
    """P_k: learner time + the slowest actor's own duration (one core per actor)."""
    wall_s: float
    """What the clock saw on this machine."""
    learner_s: float
    actor_mean_s: float
    cost_usd: float
    loss: float
    policy_kl: float
    bound_usd: float = 0.0
    """The upper bound of the round's cost that admitted it (models/billing/budget.py)."""
    cloud_s: float = math.nan
    """The round on the cloud clock: P_k plus its measured orchestration (models/run/metrics.py);
    NaN in checkpoints written before it was recorded."""

    @classmethod
    def from_metrics(cls, round_index: int, metrics: dict[str, float]) -> RoundRecord:
        return cls(round_index=round_index, actors=int(metrics["sched/actors"]),
                   mean_return=metrics["rollout/ep_return_mean"],
                   env_steps=int(metrics["rollout/env_steps"]), round_s=metrics["time/round_s"],
                   wall_s=metrics["time/round_wall_s"], learner_s=metrics["time/learner_s"],
                   actor_mean_s=metrics["time/actor_mean_s"], cost_usd=metrics["cost/round_usd"],
                   loss=metrics["train/loss"], policy_kl=metrics["train/policy_kl"],
                   bound_usd=metrics.get("cost/round_bound_usd", 0.0),
                   cloud_s=metrics.get("time/round_cloud_s", math.nan))


@dataclass(frozen=True)
class RunSummary:
    """What a finished training run reports (the `train` flow's return value)."""

    run_id: str | None
    env_id: str
    scheduler: str
    seed: int
    stop_reason: str | None
    rounds: int
    final_return: float
    best_return: float
    env_steps: int
    cost_usd: float
    """What the run was billed: actors + learner + start-up (models/billing/cost.py RoundBill)."""
    server_cluster_cost_usd: float
    """The fixed cluster for the run's time, its start-up included."""
    time_to_stop_s: float
    """Sum of P_k: the rounds' learner and slowest-actor time, one core per actor (the paper's measure)."""
    wall_time_s: float
    """This machine's clock, from the start of the first round to the end of the last (every
    attempt's, for a resumed run): the headline."""
    history: tuple[RoundRecord, ...]
    scheduler_trace: SchedulerTrace | None = None
    """A learned scheduler's decisions (models/scheduling/agent.py LearnedScheduler.trace)."""
    tracking_uri: str = ""
    checkpoint: str = ""
    server_cluster_cost_no_startup_usd: float = 0.0
    """The fixed cluster for the run's time alone (its start-up is an assumed price-table value)."""
    actors_cost_usd: float = 0.0
    learner_cost_usd: float = 0.0
    startup_cost_usd: float = 0.0
    projected_aci_startup_usd: float = 0.0
    """Not billed: start-up every container would add as on ACI (price table's aci start-up)."""
    learner_device: str = ""
    stop_detail: str = ""
    """Why the run stopped, in words (e.g. which round the budget refused and its bound)."""
    system: str = SYSTEM_SERVERLESS
    """serverless, or server-cluster: then cost_usd is the cluster's bill, and the two
    server_cluster_* figures are that bill with and without its start-up."""
    cloud_time_s: float = math.nan
    """The cloud clock: the run as on infrastructure with one core per actor, each round's P_k
    plus its measured orchestration (API calls, dispatch, scheduling, checkpoint and MLflow writes),
    leaving out only waits for a free local core (models/run/metrics.py)."""
    rounds_started_at: float = math.nan
    """time.time() when round 0 (or a resumed run's first round) began, its actors ready: a
    caller that noted when it called `train` has the flow's start-up (call to first round)."""
    rounds_finished_at: float = math.nan
    """time.time() when the last round was recorded: from here to the call's return is shut-down
    (final policy, MLflow model and plots, artifacts, Prefect's flow exit)."""
    learner_billing: str = LEARNER_PER_ROUND
    """How the learner was billed in cost_usd: per-round (its updates) or resident (the run)."""
    learner_per_round_cost_usd: float = math.nan
    """The learner billed per round (its updates, without its start-up), whichever way the run was."""
    learner_resident_cost_usd: float = math.nan
    """The learner billed resident: every second of the run's cloud clock (without its start-up)."""

    @property
    def target_reached(self) -> bool:
        return self.stop_reason == STOP_TARGET

    def cost_with_learner_usd(self, billing: str) -> float:
        """What the run would be billed with its learner billed `billing` (per-round or resident),
        the rest of its bill unchanged: both rows of Table 2 from the same run."""
        def learner(how: str) -> float:
            return self.learner_resident_cost_usd if how == LEARNER_RESIDENT else self.learner_per_round_cost_usd
        return self.cost_usd - learner(self.learner_billing) + learner(billing)

    @property
    def orchestration_share(self) -> float:
        """The share of the cloud clock that is orchestration rather than P_k (NaN without one)."""
        cloud = self.cloud_time_s
        return (cloud - self.time_to_stop_s) / cloud if math.isfinite(cloud) and cloud > 0 else math.nan


@dataclass
class RunProgress:
    """The running totals a checkpoint carries from round to round."""

    round_index: int = 0
    """The next round to run."""
    spent_usd: float = 0.0
    env_steps: int = 0
    sum_round_s: float = 0.0
    sum_wall_s: float = 0.0
    best_return: float = -math.inf
    stop_reason: str | None = None
    run_id: str | None = None
    history: list[RoundRecord] = field(default_factory=list)
    actors_usd: float = 0.0
    learner_usd: float = 0.0
    startup_usd: float = 0.0
    projected_aci_startup_usd: float = 0.0
    stop_detail: str = ""
    measured: Measured = field(default_factory=Measured)
    """What the budget bound has measured so far (models/billing/budget.py)."""
    lost_usd: float = 0.0
    """Billed cost of round attempts a crash cut short (models/run/journal.py), in spent_usd too."""
    billed_attempts: list[str] = field(default_factory=list)
    """Ids of the lost attempts already billed: each is billed once."""
    flow_run_ids: list[str] = field(default_factory=list)
    """The orchestrator's runs (Prefect flow runs) that worked on this run, oldest first."""
    sum_billed_wall_s: float = 0.0
    """Server cluster: the wall seconds it was billed (every round's span, idle included)."""
    worker_pids: list[int] = field(default_factory=list)
    """Server cluster: the actor processes that ran its actors so far (sorted)."""
    sum_cycle_wall_s: float = 0.0
    """This machine's clock over the rounds' whole cycles (scheduling to MLflow), orchestration
    included; 0 in checkpoints from before it was kept."""
    sum_cloud_s: float = 0.0
    """The cloud clock over the rounds: each round's P_k plus its orchestration."""
    learner_per_round_usd: float = 0.0
    """The learner billed per round (its updates), whichever way the run is billed."""
    learner_resident_usd: float = 0.0
    """The learner billed resident (every second of the rounds' cloud clock), whichever way."""

    def done_fraction(self, max_rounds: int, max_env_steps: int | None) -> float:
        """How far the run is towards the nearer of its limits, K rounds and S env steps."""
        return min(max(self.round_index / max(max_rounds, 1), self.env_steps / (max_env_steps or math.inf)), 1.0)

    def apply_limits(self, max_rounds: int, max_env_steps: int | None) -> None:
        """After a round that did not reach J: stop at K rounds, else at S env steps."""
        if self.round_index >= max_rounds:
            self.stop_reason, self.stop_detail = STOP_MAX_ROUNDS, f"max_rounds: K={max_rounds} rounds run"
        elif max_env_steps is not None and self.env_steps >= max_env_steps:
            self.stop_reason = STOP_MAX_ENV_STEPS
            self.stop_detail = f"max_env_steps: {self.env_steps} env steps run (S={max_env_steps})"

    def reopen_limits(self, max_rounds: int, max_env_steps: int | None) -> None:
        """A resume may raise K, S or B: those stops are decided again; a reached target stays."""
        if ((self.stop_reason == STOP_MAX_ROUNDS and self.round_index < max_rounds)
                or (self.stop_reason == STOP_MAX_ENV_STEPS and (max_env_steps or math.inf) > self.env_steps)
                or self.stop_reason == STOP_BUDGET):
            self.stop_reason, self.stop_detail = None, ""

    @classmethod
    def from_checkpoint(cls, values: JSONObject, where: str) -> RunProgress:
        """A checkpoint's progress, checked rather than trusted: counts and costs finite and
        non-negative, and its running totals what its own rounds add up to (the round index their
        number, env steps their sum, spent the rounds' bills plus the attempts lost to crashes). A
        field that breaks this is an error naming `where` (the file) and the field."""
        values = dict(values)
        try:
            values["history"] = [RoundRecord(**r) for r in values["history"]]
            values["measured"] = Measured(**values.get("measured", {}))
            progress = cls(**values)
        except (TypeError, KeyError) as exc:
            raise ConfigError(f"{where}: its progress is not a run's record ({exc})") from None
        progress.check(where)
        progress.spent_usd = progress.billed_usd()  # the budget left follows from what was billed
        return progress

    def check(self, where: str) -> None:
        def field(name: str, ok: bool, why: str) -> None:
            if not ok:
                raise ConfigError(f"{where}: progress.{name} = {getattr(self, name)!r} {why}; the checkpoint was "
                                  "edited or damaged: resume from an untouched one")

        for name in ("spent_usd", "lost_usd", "actors_usd", "learner_usd", "startup_usd", "sum_round_s", "sum_wall_s"):
            value = getattr(self, name)
            field(name, isinstance(value, int | float) and math.isfinite(value) and value >= 0,
                  "is not a finite number >= 0")
        for k, record in enumerate(self.history):
            if not (record.round_index == k and record.env_steps >= 0 and math.isfinite(record.cost_usd)
                    and record.cost_usd >= 0):
                raise ConfigError(f"{where}: progress.history[{k}] is not round {k}'s record (round_index "
                                  f"{record.round_index}, env_steps {record.env_steps}, cost_usd {record.cost_usd})")
        field("round_index", self.round_index == len(self.history), f"but the checkpoint holds {len(self.history)} rounds")
        field("env_steps", self.env_steps == sum(r.env_steps for r in self.history),
              f"but its rounds sampled {sum(r.env_steps for r in self.history)}")
        field("spent_usd", math.isclose(self.spent_usd, self.billed_usd(), rel_tol=1e-9, abs_tol=1e-12),
              f"but its rounds and lost attempts were billed {self.billed_usd()!r}")

    def billed_usd(self) -> float:
        """What the run was billed: every round's bill and every attempt a crash cut short (what the
        budget left is computed from, never a field that only restates it)."""
        return math.fsum([r.cost_usd for r in self.history] + [self.lost_usd])

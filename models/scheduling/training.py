"""What a scheduler training records: one row per episode, and the training's result.

An episode is one whole `train` run with the learned scheduler sampling its actor counts
(flows/scheduler_flows.py); its record is what the parent MLflow run logs as episode/...
metrics, what the Prefect episode table shows, and what the flow returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from models.run.records import RunSummary


@dataclass(frozen=True)
class SchedulerEpisodeRecord:
    """One scheduler episode: its training run and how it went."""

    episode: int
    run_id: str
    """The episode's own (nested) MLflow run."""
    actors: list[int]
    """Actors per round, as the scheduler chose them."""
    reward: float
    """Sum of the scheduler's per-round rewards (models/scheduling/reward.py)."""
    time_to_stop_s: float
    cost_usd: float
    server_cluster_cost_usd: float
    server_cluster_cost_no_startup_usd: float
    rounds: int
    target_reached: bool
    best_return: float
    wall_time_s: float

    @property
    def actors_mean(self) -> float:
        return float(np.mean(self.actors)) if self.actors else math.nan

    @classmethod
    def from_summary(cls, episode: int, summary: RunSummary, rewards: np.ndarray) -> SchedulerEpisodeRecord:
        return cls(episode=episode, run_id=summary.run_id, actors=[h.actors for h in summary.history],
                   reward=float(np.sum(rewards)), time_to_stop_s=summary.time_to_stop_s,
                   cost_usd=summary.cost_usd, server_cluster_cost_usd=summary.server_cluster_cost_usd,
                   server_cluster_cost_no_startup_usd=summary.server_cluster_cost_no_startup_usd,
                   rounds=summary.rounds, target_reached=summary.target_reached,
                   best_return=summary.best_return, wall_time_s=summary.wall_time_s)

    def metrics(self) -> dict[str, float]:
        """What the parent run logs for this episode (step = episode)."""
        return {
            "episode/reward": self.reward,
            "episode/time_to_stop_s": self.time_to_stop_s,
            "episode/cost_usd": self.cost_usd,
            "episode/server_cluster_cost_usd": self.server_cluster_cost_usd,
            "episode/server_cluster_cost_no_startup_usd": self.server_cluster_cost_no_startup_usd,
            "episode/rounds": float(self.rounds),
            "episode/target_reached": float(self.target_reached),
            "episode/best_return": self.best_return,
            "episode/actors_mean": self.actors_mean,
            "episode/wall_time_s": self.wall_time_s,
        }


@dataclass(frozen=True)
class SchedulerTrainingResult:
    """What `train-scheduler` (and `finetune-scheduler`) return."""

    run_id: str
    """The training's parent MLflow run."""
    checkpoint: str
    """The trained scheduler's local file."""
    artifact_uri: str
    """The same file as the parent run's artifact (runs:/<id>/scheduler/scheduler.pt)."""
    tracking_uri: str
    experiment: str
    episodes_done: int
    """Episodes trained in all, earlier resumed ones included."""
    updates: int
    wall_s: float
    """Training wall time in all, earlier resumed attempts included."""
    billed_usd: float = 0.0
    """What its episodes were billed in all (each training's cost_usd), earlier attempts included."""
    output: str | None = None
    """Where a copy was written, if asked."""
    episodes: list[SchedulerEpisodeRecord] = field(default_factory=list)
    """This call's episodes."""

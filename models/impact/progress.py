"""An IMPACT training's progress: env steps and episodes delivered and its three stop rules, a
learner chunk's figures, and the training's summary."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from models.impact.buffer import ImpactFragment
from models.rl.evaluation import evaluation_reaches

STOP_TARGET, STOP_ENV_STEPS, STOP_WALL, STOP_CHUNKS = "target_reached", "env_steps", "wall_limit", "max_chunks"


@dataclass
class ImpactProgress:
    """Env steps and episodes delivered by actors, and the three stop rules (J, steps, wall)."""

    target_return: float
    max_env_steps: int
    max_wall_s: float
    return_window: int
    env_steps: int = 0
    fragments: int = 0
    episodes: int = 0
    recent_returns: deque = field(default_factory=deque)
    stop_reason: str | None = None
    judge_on_eval: bool = False
    """J is judged on evaluations (record_evaluation), not on the training episodes' window."""
    stop_detail: str = ""

    def record(self, fragment: ImpactFragment) -> None:
        self.fragments += 1
        self.env_steps += fragment.batch.steps
        for r in fragment.batch.episode_returns:
            self.episodes += 1
            self.recent_returns.append(float(r))
            if len(self.recent_returns) > self.return_window:
                self.recent_returns.popleft()

    @property
    def mean_return(self) -> float:
        """Mean of the last return_window completed episodes (NaN before any)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else math.nan

    def check(self, wall_s: float) -> str | None:
        """Set and return the stop reason, if any rule holds (J needs a full window)."""
        if self.stop_reason is None:
            if (not self.judge_on_eval and len(self.recent_returns) >= self.return_window
                    and self.mean_return >= self.target_return):
                self.stop_reason = STOP_TARGET
            elif self.env_steps >= self.max_env_steps:
                self.stop_reason = STOP_ENV_STEPS
            elif wall_s >= self.max_wall_s:
                self.stop_reason = STOP_WALL
        return self.stop_reason

    def record_evaluation(self, metrics: dict[str, float], chunk: int) -> None:
        """With judge_on_eval, stop at J when this evaluation (eval/ metrics after `chunk`) reaches it."""
        if not self.judge_on_eval or self.stop_reason == STOP_TARGET:
            return
        reached = evaluation_reaches(metrics, self.target_return)
        if reached is not None:
            self.stop_reason = STOP_TARGET
            self.stop_detail = f"target: the evaluation after chunk {chunk} {reached}"


@dataclass(frozen=True)
class ImpactChunkRecord:
    """One learner chunk's figures, as the progress and the chunk table show them."""

    chunk: int
    learner_steps: int
    """Learner steps done so far (the learner's version)."""
    env_steps: int
    """Env steps the actors delivered so far."""
    mean_return: float
    """Mean of the last return_window completed episodes (NaN before any)."""
    policy_lag_mean: float
    wall_s: float
    """The training's wall time so far on this machine, actors' start-up included."""
    cloud_s: float
    """The same on the cloud clock (the wall when the actors ran for real)."""
    server_cluster_usd: float
    """The server cluster's bill so far, with its start-up."""


@dataclass(frozen=True)
class ImpactSummary:
    """What one IMPACT training did, for callers, the CLI and its summary artifact."""

    run_id: str
    env_id: str
    seed: int
    stop_reason: str
    env_steps: int
    learner_steps: int
    chunks: int
    final_return: float
    wall_s: float
    """This machine's wall, from the actors' spawn to the stop."""
    server_cluster_cost_usd: float
    """The cluster billed for cloud_s, its start-up included."""
    server_cluster_cost_no_startup_usd: float
    serverless_cost_usd: float
    orchestration_frac: float
    """(Prefect task overhead + MLflow logging) / the cloud time."""
    actor_replacements: int
    learner_device: str
    tracking_uri: str
    cloud_s: float = math.nan
    """The same run on the cloud clock: actors and learner on a core each (the virtual backend's
    executor), or the wall when the actors ran for real (clock 'wall'). NaN: kept from before it."""
    clock: str = "wall"
    """'virtual' or 'wall': what cloud_s is."""
    server_cluster_at_wall_usd: float = math.nan
    """The cluster billed for this machine's wall instead (labelled: not the run's cost)."""

    @property
    def target_reached(self) -> bool:
        return self.stop_reason == STOP_TARGET

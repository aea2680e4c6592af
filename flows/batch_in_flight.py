"""What an earlier attempt of a scheduler training left of its batch in flight.

A scheduler batch (several complete `train` runs, then one update of the scheduler) can take an
hour on MuJoCo; a Ctrl-C or a crash in it used to lose the whole batch. Each episode is a nested
MLflow run under the training's parent, and its run checkpoint (<checkpoint_dir>/<run id>/latest.pt,
written after every round) holds the round history and the learned scheduler's decisions and
weights. A resumed training takes an episode's run as its own when it is the same episode (its
workload and sampling seeds) and it sampled with the agent's weights now (no update came in
between): a finished run is learned from as it is, an interrupted one is resumed after its last
round (`train --resume`); anything else is played again. A stop so loses at most a round.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flows.tracking import RunTracker
from models.errors import ConfigError
from models.run.checkpoint import RunCheckpoint, load_run_checkpoint
from models.run.config import RunConfig
from models.run.records import RunProgress, RunSummary
from models.run.session import TrainingSession
from models.scheduling.agent import SchedulerAgent

Logger = logging.Logger | logging.LoggerAdapter


@dataclass
class BatchInFlight:
    """Episode index -> what an earlier attempt left of it."""

    finished: dict[int, RunSummary] = field(default_factory=dict)
    """Runs that finished: their summaries, learned from without playing them again."""
    interrupted: dict[int, str] = field(default_factory=dict)
    """Runs stopped after some rounds: their checkpoints, resumed after their last round (one
    whose last round had stopped it just finishes)."""
    earlier_wall_s: float = 0.0
    """This machine's clock the earlier attempt spent on these runs (the finished runs' wall, the
    interrupted runs' rounds): the training's wall counts it once."""


def batch_in_flight(tracker: RunTracker, seeds: dict[int, tuple[int, int]], agent: SchedulerAgent,
                    scheduler_file: Path, logger: Logger) -> BatchInFlight:
    """The runs nested under the tracker's run that played the episodes in `seeds` (index ->
    (workload seed, sampling seed)) with this agent; the newest usable run of each."""
    runs = tracker.client.search_runs([str(tracker.experiment_id)], order_by=["attributes.start_time DESC"],
                                      filter_string=f"tags.mlflow.parentRunId = '{tracker.run_id}'")
    by_seeds = {pair: e for e, pair in seeds.items()}
    found = BatchInFlight()
    for run in runs:  # newest first
        params, run_id = run.data.params, run.info.run_id
        try:
            episode = by_seeds.get((int(params.get("seed", "")), int(params.get("scheduler_seed", ""))))
        except ValueError:
            continue
        if episode is None or episode in found.finished or episode in found.interrupted:
            continue
        path = Path(params.get("checkpoint_dir", "")) / run_id / "latest.pt"
        try:
            checkpoint = agents_checkpoint(path, agent)
            if run.info.status != "FINISHED":  # killed, failed, or its process died (RUNNING)
                earlier_wall_s = float(checkpoint.progress.get("sum_cycle_wall_s", 0.0))  # before any record
                found.interrupted[episode] = str(path)
                found.earlier_wall_s += earlier_wall_s
                logger.info("episode %d: stopped after %d rounds (run %s): resumed after its last round",
                            episode, len(checkpoint.progress.get("history", [])), run_id)
                continue
            summary = finished_run_summary(checkpoint, scheduler_file, str(path))
        except (ConfigError, OSError, KeyError, TypeError, ValueError) as exc:
            logger.warning("episode %d: run %s is not reused: %s", episode, run_id, exc)
            continue
        # the clocks' last writes after the final checkpoint, as the run logged them
        metrics = run.data.metrics
        found.finished[episode] = dataclasses.replace(
            summary, run_id=run_id, tracking_uri=tracker.tracking_uri,
            wall_time_s=metrics.get("summary/wall_time_s", summary.wall_time_s),
            cloud_time_s=metrics.get("summary/cloud_time_s", summary.cloud_time_s))
        found.earlier_wall_s += found.finished[episode].wall_time_s
        logger.info("episode %d: finished before the stop (run %s, %d rounds, %s): reused, not played again",
                    episode, run_id, summary.rounds, summary.stop_reason)
    return found


def agents_checkpoint(path: Path, agent: SchedulerAgent) -> RunCheckpoint:
    """A run's checkpoint, if its learned scheduler sampled with `agent`'s weights (else ConfigError)."""
    if not path.is_file():
        raise ConfigError(f"its checkpoint {path} is not on this machine")
    checkpoint = load_run_checkpoint(path)
    state = checkpoint.scheduler
    if state.get("mode") != "sample" or not _same_weights(state.get("policy"), agent.policy.state_dict()) \
            or not _same_weights(state.get("value"), agent.value.state_dict()):
        raise ConfigError("it sampled with other scheduler weights than the agent's now")
    return checkpoint


def finished_run_summary(checkpoint: RunCheckpoint, scheduler_file: Path, where: str) -> RunSummary:
    """The summary of a finished `train` run from its last checkpoint (read from `where`)."""
    config = dataclasses.replace(RunConfig.from_dict(checkpoint.config),
                                 scheduler=f"learned:{scheduler_file}:sample")
    session = TrainingSession(config)
    session.scheduler.load_state_dict(checkpoint.scheduler)
    session.progress = RunProgress.from_checkpoint(checkpoint.progress, where)
    if session.stop_reason is None:
        raise ConfigError(f"{where} is not the checkpoint of a finished run")
    return session.summary(checkpoint=where)


def _same_weights(theirs: object, mine: dict[str, torch.Tensor]) -> bool:
    return (isinstance(theirs, dict) and set(theirs) == set(mine)
            and all(torch.equal(torch.as_tensor(theirs[k]), v) for k, v in mine.items()))

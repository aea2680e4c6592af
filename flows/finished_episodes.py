"""The episodes of a stopped scheduler training's batch in flight that were already finished.

A scheduler batch (several complete `train` runs, then one update of the scheduler) can take an
hour on MuJoCo; a Ctrl-C or a crash in it used to lose every finished episode of the batch. Each
episode is a nested MLflow run under the training's parent, and its last run checkpoint
(<checkpoint_dir>/<run id>/latest.pt) holds what the update needs: the round history and the
learned scheduler's decisions. A resumed training takes such an episode as played when it is
the same episode (its workload and sampling seeds), it finished, and the scheduler weights it
sampled with are the agent's now (no update came in between); anything else is played again.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from flows.tracking import RunTracker
from models.errors import ConfigError
from models.run.checkpoint import load_run_checkpoint
from models.run.config import RunConfig
from models.run.records import RunProgress, RunSummary
from models.run.session import TrainingSession
from models.scheduling.agent import SchedulerAgent


def finished_episodes(tracker: RunTracker, seeds: dict[int, tuple[int, int]], agent: SchedulerAgent,
                      scheduler_file: Path, logger: logging.Logger | logging.LoggerAdapter
                      ) -> dict[int, RunSummary]:
    """Episode index -> its summary, for the episodes in `seeds` (index -> (workload seed,
    sampling seed)) that a run nested under the tracker's run finished with this agent."""
    runs = tracker.client.search_runs(
        [str(tracker.experiment_id)], order_by=["attributes.start_time DESC"],
        filter_string=f"tags.mlflow.parentRunId = '{tracker.run_id}' and attributes.status = 'FINISHED'")
    by_seeds = {pair: e for e, pair in seeds.items()}
    found: dict[int, RunSummary] = {}
    for run in runs:  # newest first: an episode played twice counts its last play
        params, metrics = run.data.params, run.data.metrics
        try:
            episode = by_seeds.get((int(params.get("seed", "")), int(params.get("scheduler_seed", ""))))
        except ValueError:
            continue
        if episode is None or episode in found or "minionsrl.stop_reason" not in run.data.tags:
            continue
        path = Path(params.get("checkpoint_dir", "")) / run.info.run_id / "latest.pt"
        try:
            summary = finished_run_summary(path, agent, scheduler_file)
        except (ConfigError, OSError, KeyError, ValueError) as exc:
            logger.warning("episode %d (run %s) finished before the stop but is played again: %s",
                           episode, run.info.run_id, exc)
            continue
        # the clocks' last writes after the final checkpoint, as the run logged them
        found[episode] = dataclasses.replace(
            summary, run_id=run.info.run_id, tracking_uri=tracker.tracking_uri,
            wall_time_s=metrics.get("summary/wall_time_s", summary.wall_time_s),
            cloud_time_s=metrics.get("summary/cloud_time_s", summary.cloud_time_s))
        logger.info("episode %d: finished before the stop (run %s, %d rounds, %s): reused, not played again",
                    episode, run.info.run_id, summary.rounds, summary.stop_reason)
    return found


def finished_run_summary(path: Path, agent: SchedulerAgent, scheduler_file: Path) -> RunSummary:
    """The summary of a finished `train` run from its last checkpoint, if its learned scheduler
    sampled with `agent`'s weights (ConfigError otherwise)."""
    if not path.is_file():
        raise ConfigError(f"its checkpoint {path} is not on this machine")
    checkpoint = load_run_checkpoint(path)
    state = checkpoint.scheduler
    if state.get("mode") != "sample" or not _same_weights(state.get("policy"), agent.policy.state_dict()) \
            or not _same_weights(state.get("value"), agent.value.state_dict()):
        raise ConfigError("it sampled with other scheduler weights than the agent's now")
    config = dataclasses.replace(RunConfig.from_dict(checkpoint.config),
                                 scheduler=f"learned:{scheduler_file}:sample")
    session = TrainingSession(config)
    session.scheduler.load_state_dict(state)
    session.progress = RunProgress.from_checkpoint(checkpoint.progress, str(path))
    if session.stop_reason is None:
        raise ConfigError(f"{path} is not the checkpoint of a finished run")
    return session.summary(checkpoint=str(path))


def _same_weights(theirs: object, mine: dict[str, torch.Tensor]) -> bool:
    return (isinstance(theirs, dict) and set(theirs) == set(mine)
            and all(torch.equal(torch.as_tensor(theirs[k]), v) for k, v in mine.items()))

"""Training the learned actor scheduler: the `train-scheduler` and `finetune-scheduler` flows.

One scheduler episode is one complete `train` run of the workload with the learned scheduler
sampling its actor counts (models/scheduling/agent.py). Per batch of episodes:

1. write the scheduler checkpoint to a file (the episodes load it: 'learned:<file>:sample');
2. run the batch's episodes, `concurrency` at a time, each a nested `train` flow run and a
   nested MLflow run under this flow's parent run;
3. compute each episode's rewards from its summary and run one PPO update;
4. save the checkpoint and log it as the parent run's artifact scheduler/scheduler.pt, so a
   crashed scheduler training resumes from the last update (resume_run_id), with what it had
   played of its batch in flight (flows/batch_in_flight.py).

    python -m flows.scheduler_flows train --env CartPole-v1 --episodes 60 --output sched.pt
    python -m flows.scheduler_flows finetune --source cartpole --env Acrobot-v1 --episodes 10

The workload every episode trains is a Workload (models/run/workload.py) and where its actors
run a Placement; the command line has one option per field of each, generated (flows/cli.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run as flow_run_context
from prefect.task_runners import ThreadPoolTaskRunner

from deployments.local_api import prefect_api
from flows import interrupts, prefect_patches
from flows.artifacts import EpisodeArtifacts
from flows.batch_in_flight import BatchInFlight, batch_in_flight
from flows.cli import flow_arguments, flow_call, quiet_console
from flows.run_setup import fetch_scheduler_checkpoint
from flows.served_flow import served_flow
from flows.tracking import RunTracker, project_root, tracked_run
from flows.train import train
from models.errors import ConfigError
from models.json_types import JSONObject
from models.run.presets import resolve_run_config
from models.run.records import RunSummary
from models.run.workload import Placement, Workload, workload_env
from models.scheduling.agent import AgentConfig, Episode, SchedulerAgent
from models.scheduling.learned import load_scheduler, resolve_checkpoint, save_scheduler
from models.scheduling.learned_spec import SHIPPED, is_mlflow_uri
from models.scheduling.provenance import SchedulerProvenance, SchedulerTrainingRun
from models.scheduling.reward import rewards_from_summary
from models.scheduling.training import SchedulerEpisodeRecord, SchedulerTrainingResult

ARTIFACT_DIR = "scheduler"
ARTIFACT_NAME = "scheduler.pt"
MAX_CONCURRENCY = 16
NO_TARGET = 1e8  # presets without a published target use 1e9: "run until budget or K"
DEFAULT_I_MAX = 32


def registered_threshold(env: str) -> float | None:
    """gymnasium's reward_threshold for env (Acrobot-v1: -100), or None."""
    import gymnasium

    try:
        threshold = gymnasium.spec(env).reward_threshold
    except Exception:  # an id gymnasium does not know: the preset check has already said so
        return None
    return None if threshold is None else float(threshold)


def scheduler_target(workload: Workload, placement: Placement | None = None) -> float:
    """J for scheduler runs on the workload: its target_return (None: the preset's) unless that
    is the presets' "no target", then gymnasium's reward_threshold for its env. Validates the
    workload first (a bad value fails here, not in episode 0)."""
    cfg = resolve_run_config(workload, placement, scheduler="max")
    if cfg.target_return < NO_TARGET:
        return cfg.target_return  # the workload's, else the preset's
    threshold = registered_threshold(workload.env)
    if threshold is None:
        raise ConfigError(f"{workload.env} has no target return in its preset nor a gymnasium "
                          "reward_threshold: pass target_return (J); the scheduler's reward needs one")
    return threshold


def name_flow_run(name: str) -> None:
    """Rename this flow run (a resume learns its env from the run it resumes, after the name
    was made from the env parameter's default)."""
    from prefect import get_client
    from prefect.runtime import flow_run

    if flow_run.id and flow_run.name != name:
        with get_client(sync_client=True) as client:
            client.set_flow_run_name(flow_run.id, name)


def _not_a_config_error(task, task_run, state) -> bool:
    """Retry an episode that failed for a transient reason, never a bad parameter."""
    try:
        state.result()
    except ConfigError:
        return False
    except Exception:
        return True
    return False


@task(name="scheduler-episode", task_run_name="episode-{episode}", cache_policy=NO_CACHE,
      persist_result=False, retries=1, retry_condition_fn=_not_a_config_error)
def scheduler_episode(episode: int, checkpoint: str, workload: Workload, placement: Placement, seed: int,
                      scheduler_seed: int, parent_run_id: str, tracking_uri: str, experiment: str,
                      checkpoint_dir: str, resume: str | None = None) -> RunSummary:
    """One scheduler episode: a complete `train` run with the learned scheduler sampling (or an
    interrupted one resumed from its run checkpoint; played afresh if that one is refused)."""
    run = {"scheduler": f"learned:{checkpoint}:sample", "seed": seed, "scheduler_seed": scheduler_seed,
           "parent_run_id": parent_run_id, "tracking_uri": tracking_uri, "experiment": experiment,
           "checkpoint_dir": checkpoint_dir, "log_model": False, **workload.for_ppo(), **placement.given()}
    if resume:
        try:
            return train(resume=resume, **run)
        except ConfigError as exc:
            get_run_logger().warning("episode %d: its run could not be resumed from %s (%s): played again",
                                     episode, resume, exc)
    return train(**run)


@dataclass
class SchedulerTraining:
    """One scheduler training under way: its agent, what its checkpoint records, where it stands."""

    agent: SchedulerAgent
    meta: SchedulerProvenance
    entry: SchedulerTrainingRun
    """This run's entry in meta.trained_on (its workload, placement and seeds)."""
    done: int
    """Episodes done (a resumed training starts after them)."""
    experiment: str
    checkpoint: Path
    resumed: bool = False
    """A resumed training reuses what it had played of its batch in flight (finished episodes, and
    interrupted ones resumed after their last round)."""

    def seeds(self, episode: int, batch_start: int) -> tuple[int, int]:
        """(the workload's seed, the scheduler's sampling seed) of an episode."""
        seed = self.entry.seed
        return seed + (batch_start if self.entry.common_seeds else episode), seed + episode


def scheduler_run_name() -> str:
    """What ran: the workload, episodes and seed; a resume first names the training it continues
    (its log lines say so), renamed for its workload and seed once they are read (resume_training)."""
    p = flow_run_context.parameters
    if p.get("resume_run_id"):
        return f"train-scheduler-resume-{str(p['resume_run_id'])[:12]}-{p.get('episodes', 60)}ep"
    return f"train-scheduler-{workload_env(p)}-{p.get('episodes', 60)}ep-seed{p.get('seed', 0)}"


@served_flow(name="train-scheduler", flow_run_name=scheduler_run_name, persist_result=False, validate_parameters=True,
      task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENCY))
def train_scheduler(
    workload: Workload | None = None, placement: Placement | None = None, episodes: int = 60,
    batch_episodes: int = 4, concurrency: int = 1, init_from: str | None = None, resume_run_id: str | None = None,
    output: str | None = None, beta: float = 0.1, cost_weight: float = 0.0, learning_rate: float | None = None,
    agent: JSONObject | None = None, seed: int = 0, common_seeds: bool = False, tracking_uri: str | None = None,
    experiment: str | None = None, checkpoint_dir: str | None = None,
) -> SchedulerTrainingResult:
    """Train the learned scheduler by PPO over complete training runs of a workload.

    Args:
        workload: what every episode's training run is asked to do (default CartPole-v1 with its
            preset; i_max is the scheduler's action space, default 32; without a preset target, J is
            gymnasium's reward_threshold for the env).
        placement: where the episodes' actors run (default local; with a Dask cluster and
            concurrency > 1, several episodes' actors share it).
        episodes: scheduler episodes in all (a resumed run counts those already done).
        batch_episodes: episodes per PPO update of the scheduler (1 = update after each).
        concurrency: episodes of a batch run at the same time (each its own `train` run).
        init_from: start from this scheduler (path, packaged name or MLflow URI) instead of a fresh one: fine-tuning.
        resume_run_id: a crashed or stopped train-scheduler MLflow run to continue from its last logged checkpoint.
        output: also copy the final checkpoint here.
        beta: weight of a round in the reward r_k = -beta * (P_k + cost_weight * C_k).
        cost_weight: seconds of training time one USD of round cost is worth in the reward; 0 (the
            default) is the paper's time-only reward.
        learning_rate: the scheduler's Adam step size (default 1e-3, or the checkpoint's).
        agent: other scheduler PPO settings (models/scheduling/agent.py AgentConfig).
        seed: episode e trains the workload with seed + e (and samples actions with it).
        common_seeds: the episodes of a batch train the workload on one seed (seed + the batch's
            first episode), each sampling its schedule with its own seed (seed + e): common random
            numbers, so that within a batch the rewards differ by the schedules and not by luck.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested workload runs; default
            minionsrl-scheduler/<env>.
        checkpoint_dir: where scheduler and workload checkpoints go; default ./checkpoints.
    """
    prefect_patches.install()
    if episodes < 1 or batch_episodes < 1 or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ConfigError(f"episodes and batch_episodes must be >= 1 and concurrency in [1, {MAX_CONCURRENCY}]")
    overrides = {**(agent or {}), "beta": beta, "cost_weight": cost_weight}
    if learning_rate is not None:
        overrides["learning_rate"] = learning_rate
    workload, placement = workload or Workload(), placement or Placement()
    if workload.i_max is None:
        workload = workload.with_values(i_max=DEFAULT_I_MAX)
    workload = workload.with_values(target_return=scheduler_target(workload, placement))
    with tracked_run(tracking_uri) as tracker:
        training = (resume_training(tracker, resume_run_id, overrides, placement, episodes) if resume_run_id
                    else start_training(tracker, workload, placement, overrides, init_from, seed, common_seeds,
                                        batch_episodes, experiment, episodes, concurrency))
        training.checkpoint = Path(checkpoint_dir or project_root() / "checkpoints") / "schedulers" / str(
            tracker.run_id) / ARTIFACT_NAME
        result = play_episodes(training, tracker, episodes, batch_episodes, concurrency,
                               str(training.checkpoint.parents[2]))
        if output:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(training.checkpoint, output)
        return dataclasses.replace(result, output=output)


def start_training(tracker: RunTracker, workload: Workload, placement: Placement, overrides: JSONObject,
                   init_from: str | None, seed: int, common_seeds: bool, batch_episodes: int,
                   experiment: str | None, episodes: int, concurrency: int) -> SchedulerTraining:
    """A new training: a fresh agent or one fine-tuned from `init_from`; its MLflow parent run."""
    meta = SchedulerProvenance()
    if init_from:
        with tempfile.TemporaryDirectory() as tmp:  # an MLflow URI: from this flow's store
            source = (fetch_scheduler_checkpoint(init_from, tracker.tracking_uri, tmp)
                      if is_mlflow_uri(init_from) else resolve_checkpoint(init_from))
            agent, _, meta = load_scheduler(source, overrides)
        if agent.i_max != workload.i_max:
            raise ConfigError(f"{init_from} was trained for i_max={agent.i_max}, not {workload.i_max}")
        meta.fine_tuned_from = str(init_from)
    else:
        agent = SchedulerAgent(int(workload.i_max or DEFAULT_I_MAX), AgentConfig().replace(overrides), seed=seed)
    mode = "finetune" if init_from else "scratch"
    experiment = experiment or f"minionsrl-scheduler/{workload.env}"
    params = {"env": workload.env, "episodes": episodes, "batch_episodes": batch_episodes, "concurrency": concurrency,
              "init_from": init_from, "seed": seed, "common_seeds": common_seeds,
              "agent": dataclasses.asdict(agent.config), "workload": workload.to_json(),
              "placement": placement.to_json()}
    run_id = tracker.start(experiment, f"scheduler__{workload.env}__{mode}__{seed}", params=params,
                           tags={"minionsrl.kind": "scheduler-training", "minionsrl.scheduler_init": mode})
    entry = SchedulerTrainingRun(env=workload.env, mlflow_run_id=run_id, seed=seed, mode=mode, workload=workload,
                            placement=placement, beta=float(overrides["beta"]),
                            cost_weight=float(overrides["cost_weight"]), batch_episodes=batch_episodes,
                            common_seeds=common_seeds)
    meta.trained_on.append(entry)
    return SchedulerTraining(agent, meta, entry, 0, experiment, Path())


def resume_training(tracker: RunTracker, run_id: str, overrides: JSONObject, placement: Placement,
                    episodes: int) -> SchedulerTraining:
    """A stopped training from its parent run's last checkpoint, with its own workload and seeds;
    where its actors run may change (the placement's set fields)."""
    tracker.resume(run_id)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = tracker.client.download_artifacts(run_id, f"{ARTIFACT_DIR}/{ARTIFACT_NAME}", tmp)
            agent, _, meta = load_scheduler(local, overrides)
        except Exception as exc:  # MlflowException, OSError, ConfigError
            raise ConfigError(f"run {run_id} has no usable {ARTIFACT_DIR}/{ARTIFACT_NAME} to resume from "
                              f"(it stopped before its first update?): {exc}") from exc
    entry = meta.session(run_id)
    if entry is None:
        raise ConfigError(f"the checkpoint of run {run_id} does not list that run in its trained_on")
    entry.placement = placement.over(entry.placement)
    # the episodes' runs go where the first attempt's went, beside their parent
    experiment = tracker.client.get_experiment(tracker.experiment_id).name
    name_flow_run(f"train-scheduler-{entry.env}-{episodes}ep-seed{entry.seed}")
    get_run_logger().info("resuming scheduler training run %s (%s) after %d episodes", run_id, entry.env,
                          meta.episodes_done)
    return SchedulerTraining(agent, meta, entry, meta.episodes_done, experiment, Path(), resumed=True)


def play_episodes(training: SchedulerTraining, tracker: RunTracker, episodes: int, batch_episodes: int,
                  concurrency: int, checkpoint_root: str) -> SchedulerTrainingResult:
    """Batches of episodes, one PPO update of the scheduler after each, until `episodes` are done."""
    logger, entry, run_id = get_run_logger(), training.entry, str(tracker.run_id)
    results: list[SchedulerEpisodeRecord] = []
    started, wall_before = time.perf_counter(), entry.wall_s
    artifacts = EpisodeArtifacts(run_id, episodes, training.done, logger)  # Prefect: progress, episodes, summary
    try:
        while training.done < episodes:
            batch = list(range(training.done, min(training.done + batch_episodes, episodes)))
            save_scheduler(training.checkpoint, training.agent, meta=training.meta)  # what the batch loads
            earlier = (batch_in_flight(tracker, {e: training.seeds(e, batch[0]) for e in batch}, training.agent,
                                       training.checkpoint, logger) if training.resumed else BatchInFlight())
            training.resumed = False  # later batches are new
            played = earlier.finished
            wall_before += earlier.earlier_wall_s
            to_play = [e for e in batch if e not in played]
            for chunk_start in range(0, len(to_play), concurrency):
                chunk = to_play[chunk_start:chunk_start + concurrency]
                futures = [scheduler_episode.submit(e, str(training.checkpoint), entry.workload, entry.placement,
                                                    *training.seeds(e, batch[0]), run_id, tracker.tracking_uri,
                                                    training.experiment, checkpoint_root, earlier.interrupted.get(e))
                           for e in chunk]
                played.update(zip(chunk, (f.result() for f in futures), strict=True))
            summaries = [played[e] for e in batch]
            results += learn_from_batch(training, tracker, batch, summaries)
            entry.wall_s = wall_before + time.perf_counter() - started
            entry.billed_usd += sum(s.cost_usd for s in summaries)
            tracker.log_metrics({"training/wall_s": entry.wall_s, "training/billed_usd": entry.billed_usd},
                                step=batch[-1])
            save_scheduler(training.checkpoint, training.agent, meta=training.meta)
            tracker.log_artifact(training.checkpoint, ARTIFACT_DIR)
            artifacts.episodes_done(training.done, results[-1].reward if results else None, results)
        uri = f"runs:/{run_id}/{ARTIFACT_DIR}/{ARTIFACT_NAME}"
        artifacts.finished(entry.env, results, training.agent.updates, uri, tracker)
    finally:
        artifacts.close()
    return SchedulerTrainingResult(run_id=run_id, checkpoint=str(training.checkpoint), output=None, artifact_uri=uri,
                                   tracking_uri=tracker.tracking_uri, experiment=training.experiment,
                                   episodes_done=training.done, updates=training.agent.updates, episodes=results,
                                   wall_s=entry.wall_s, billed_usd=entry.billed_usd)


def learn_from_batch(training: SchedulerTraining, tracker: RunTracker, batch: list[int],
                     summaries: list[RunSummary]) -> list[SchedulerEpisodeRecord]:
    """Each episode's rewards and record, then one PPO update of the scheduler on the batch."""
    agent, records, learn_from = training.agent, [], []
    for e, summary in zip(batch, summaries, strict=True):
        rewards = rewards_from_summary(summary, agent.config.beta, agent.config.cost_weight, agent.config.reward_clock)
        learn_from.append(Episode.from_trace(summary.scheduler_trace, rewards))
        record = SchedulerEpisodeRecord.from_summary(e, summary, rewards)
        tracker.log_metrics(record.metrics(), step=e)
        records.append(record)
        get_run_logger().info("episode %d: reward %.2f, %s after %d rounds, time %.2fs, cost $%.5f, mean actors "
                              "%.1f", e, record.reward, summary.stop_reason, summary.rounds, summary.time_to_stop_s,
                              summary.cost_usd, record.actors_mean)
    tracker.log_metrics(agent.update(learn_from), step=batch[-1])
    training.done = batch[-1] + 1
    training.entry.episodes += len(batch)
    training.meta.episodes_done, training.meta.updates = training.done, agent.updates
    return records


@served_flow(name="finetune-scheduler", flow_run_name="finetune-scheduler", persist_result=False, validate_parameters=True)
def finetune_scheduler(source: str = SHIPPED, workload: Workload | None = None, episodes: int = 10,
                       batch_episodes: int = 2, **options: Any) -> SchedulerTrainingResult:
    """Fine-tune a saved scheduler (file path, packaged name or MLflow URI) on another workload.

    A `train-scheduler` subflow started from `source` (its init_from) for `episodes` more
    episodes (default 10, the paper's figure).

    Args:
        source: the scheduler to start from: a file path, a packaged name (cartpole) or an MLflow URI.
        workload: the workload to fine-tune on (default Acrobot-v1).
        episodes: fine-tuning episodes (the paper: about 10).
        batch_episodes: episodes per PPO update of the scheduler.
        options: any other train-scheduler parameter (placement, output, beta, learning_rate, agent,
            seed, common_seeds, tracking_uri, experiment, checkpoint_dir), validated by that flow.
    """
    return train_scheduler(workload=workload or Workload(env="Acrobot-v1"), episodes=episodes,
                           batch_episodes=batch_episodes, init_from=source, **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train or fine-tune the learned actor scheduler.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("train", train_scheduler.fn), ("finetune", finetune_scheduler.fn)):
        sub = commands.add_parser(name, description=(fn.__doc__ or "").split("\n", 1)[0])
        flow_arguments(sub, fn, exclude=("options",))
        if name == "finetune":  # its other options are train-scheduler's
            flow_arguments(sub, train_scheduler.fn, exclude=("workload", "episodes", "batch_episodes", "init_from",
                                                              "resume_run_id"))
        sub.add_argument("--verbose", action="store_true", help="show every task run's and round's log lines too")
    args = vars(parser.parse_args(argv))
    prefect_patches.install()
    quiet_console(args.pop("verbose"))  # one line per episode and round; everything still reaches Prefect
    with interrupts.stop_on_interrupt():
        try:
            with prefect_api():
                if args.pop("command") == "train":
                    result = train_scheduler(**flow_call(args, train_scheduler.fn))
                else:
                    own = flow_call(args, finetune_scheduler.fn)
                    more = flow_call(args, train_scheduler.fn)
                    result = finetune_scheduler(**own, **{k: v for k, v in more.items() if k not in own})
        except KeyboardInterrupt as exc:  # Ctrl-C: the episode in flight stopped; resume with --resume-run-id
            print(f"stopped: {exc or 'interrupted (Ctrl-C)'}; continue with --resume-run-id", file=sys.stderr)
            return interrupts.EXIT_INTERRUPTED
    for e in result.episodes:
        print(f"episode {e.episode:3d}: reward {e.reward:9.2f}  reached {e.target_reached!s:5}  "
              f"rounds {e.rounds:3d}  time {e.time_to_stop_s:7.2f}s  cost ${e.cost_usd:.5f}  "
              f"actors {json.dumps([int(a) for a in e.actors])}")
    print(f"\nscheduler: {result.checkpoint} (MLflow {result.artifact_uri} in "
          f"{result.tracking_uri}); {result.episodes_done} episodes, {result.updates} updates, "
          f"{result.wall_s:.0f}s, episodes billed ${result.billed_usd:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

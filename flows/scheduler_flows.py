"""Training the learned actor scheduler: the `train-scheduler` and `finetune-scheduler` flows.

One scheduler episode is one complete `train` run of the workload with the learned scheduler
sampling its actor counts (models/scheduling/agent.py). Per batch of episodes:

1. write the scheduler checkpoint to a file (the episodes load it: 'learned:<file>:sample');
2. run the batch's episodes, `concurrency` at a time, each a nested `train` flow run and a
   nested MLflow run under this flow's parent run;
3. compute each episode's rewards from its summary and run one PPO update;
4. save the checkpoint and log it as the parent run's artifact scheduler/scheduler.pt, so a
   crashed scheduler training resumes from the last update (resume_run_id).

    python -m flows.scheduler_flows train --env CartPole-v1 --episodes 60 --out sched.pt
    python -m flows.scheduler_flows finetune --source cartpole --env Acrobot-v1 --episodes 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from deployments.local_api import prefect_api
from flows import prefect_patches
from flows.artifacts import EpisodeArtifacts
from flows.cli import quiet_console
from flows.run_setup import fetch_scheduler_checkpoint
from flows.tracking import RunTracker, project_root
from flows.train import train
from models.run.config import ConfigError
from models.run.presets import resolve_parameters
from models.run.session import RunSummary
from models.scheduling.agent import AgentConfig, Episode, SchedulerAgent
from models.scheduling.learned import (
    SHIPPED,
    is_mlflow_uri,
    load_scheduler,
    resolve_checkpoint,
    save_scheduler,
)
from models.scheduling.provenance import SchedulerProvenance, SchedulerWorkload, TrainingSession
from models.scheduling.reward import rewards_from_summary
from models.scheduling.training import SchedulerEpisodeRecord, SchedulerTrainingResult

ARTIFACT_DIR = "scheduler"
ARTIFACT_NAME = "scheduler.pt"
MAX_CONCURRENCY = 16
NO_TARGET = 1e8  # presets without a published target use 1e9: "run until budget or K"


WORKLOAD_KEYS = tuple(f.name for f in dataclasses.fields(SchedulerWorkload) if f.name != "env")
"""The `train` parameters of a scheduler's workload besides env (every episode's run uses them)."""


def registered_threshold(env: str) -> float | None:
    """gymnasium's reward_threshold for env (Acrobot-v1: -100), or None."""
    import gymnasium

    try:
        threshold = gymnasium.spec(env).reward_threshold
    except Exception:  # an id gymnasium does not know: the preset check has already said so
        return None
    return None if threshold is None else float(threshold)


def scheduler_target(workload: SchedulerWorkload) -> float:
    """J for scheduler runs on the workload: its target_return (None: the preset's) unless that
    is the presets' "no target", then gymnasium's reward_threshold for its env. Validates the
    workload first (a bad value fails here, not in episode 0)."""
    given = {k: v for k, v in workload.train_parameters().items() if v is not None}
    cfg = resolve_parameters({**given, "scheduler": "max"})
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
def scheduler_episode(episode: int, checkpoint: str, workload: SchedulerWorkload, seed: int,
                      scheduler_seed: int, parent_run_id: str, tracking_uri: str, experiment: str,
                      checkpoint_dir: str) -> RunSummary:
    """One scheduler episode: a complete `train` run with the learned scheduler sampling."""
    return train(scheduler=f"learned:{checkpoint}:sample", seed=seed, scheduler_seed=scheduler_seed,
                 parent_run_id=parent_run_id,
                 tracking_uri=tracking_uri, experiment=experiment, checkpoint_dir=checkpoint_dir,
                 log_model=False, **workload.train_parameters())


@flow(name="train-scheduler", flow_run_name="train-scheduler-{env}-{episodes}ep-seed{seed}", persist_result=False, validate_parameters=True,
      task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENCY))
def train_scheduler(
    env: str = "CartPole-v1",
    episodes: int = 60,
    batch_episodes: int = 4,
    concurrency: int = 1,
    init_from: str | None = None,
    resume_run_id: str | None = None,
    output: str | None = None,
    beta: float = 0.1,
    cost_weight: float = 0.0,
    learning_rate: float | None = None,
    agent: dict[str, Any] | None = None,
    i_max: int = 32,
    preset: str | None = None,
    target_return: float | None = None,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    fragment: int | None = None,
    ppo: dict[str, Any] | None = None,
    local_workers: int | None = None,
    backend: str | None = None,
    backend_options: dict[str, Any] | None = None,
    eval_every: int | None = None,
    eval_episodes: int | None = None,
    stop_at_eval: bool | None = None,
    seed: int = 0,
    common_seeds: bool = False,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
) -> SchedulerTrainingResult:
    """Train the learned scheduler by PPO over complete training runs of `env`.

    Args:
        env: the workload every episode trains (its preset fills J, B, K, fragment; without a
            preset target, J is gymnasium's reward_threshold for the env).
        episodes: scheduler episodes in all (a resumed run counts those already done).
        batch_episodes: episodes per PPO update of the scheduler (1 = update after each).
        concurrency: episodes of a batch run at the same time (each its own `train` run).
        init_from: start from this scheduler (path, packaged name or MLflow URI) instead of
            a fresh one: fine-tuning.
        resume_run_id: a crashed or stopped train-scheduler MLflow run to continue from its
            last logged checkpoint.
        output: also copy the final checkpoint here.
        beta: weight of a round in the reward r_k = -beta * (P_k + cost_weight * C_k).
        cost_weight: seconds of training time one USD of round cost is worth in the reward; 0
            (the default) is the paper's time-only reward.
        learning_rate: the scheduler's Adam step size (default 1e-3, or the checkpoint's).
        agent: other scheduler PPO settings (models/scheduling/agent.py AgentConfig).
        i_max: the workload's largest actor count I_max (the scheduler's action space).
        preset: a variant of the env's preset for the workload's unset parameters, e.g.
            locomotion (Hopper-v5, HalfCheetah-v5: a J that needs forward motion); default the
            env's own preset.
        target_return: the workload's J; default the env's preset, else gymnasium's reward_threshold.
        budget_usd: the workload's budget B per episode; default the env's preset.
        max_rounds: the workload's round limit K per episode; default the env's preset.
        fragment: env steps per actor per round; default the env's preset.
        ppo: overrides of the workload's PPO settings, e.g. {"learning_rate": 0.002}.
        local_workers: worker processes of the local backend; default one per core.
        backend: where the episodes' actors run (local, dask, ...; default local). With a Dask
            cluster (backend_options {"dask_address": ...}) and concurrency > 1, several episodes'
            actors share the cluster while each episode's learner runs in this flow's process.
        backend_options: that backend's options (tasks/backends.py).
        eval_every: every this many rounds (and at the end) each episode's workload plays whole
            deterministic episodes; default off.
        eval_episodes: episodes of each of those evaluations (default 5).
        stop_at_eval: judge J on those evaluations instead of R_k, so that a schedule of few
            actors cannot reach J on one lucky episode; needs eval_every.
        seed: episode e trains the workload with seed + e (and samples actions with it).
        common_seeds: the episodes of a batch train the workload on one seed (seed + the batch's
            first episode), each sampling its schedule with its own seed (seed + e): common random
            numbers, so that within a batch the rewards differ by the schedules and not by how
            lucky each episode's seed was (on Hopper-v5 rounds to J vary 9-51 from seed to seed).
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested workload runs;
            default minionsrl-scheduler/<env>.
        checkpoint_dir: where scheduler and workload checkpoints go; default ./checkpoints.
    """
    prefect_patches.install()
    logger = get_run_logger()
    if episodes < 1 or batch_episodes < 1 or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ConfigError(f"episodes and batch_episodes must be >= 1 and concurrency in "
                          f"[1, {MAX_CONCURRENCY}]")
    overrides = dict(agent or {})
    overrides["beta"] = beta
    overrides["cost_weight"] = cost_weight
    if learning_rate is not None:
        overrides["learning_rate"] = learning_rate
    workload = SchedulerWorkload(env=env, i_max=i_max, preset=preset, target_return=target_return,
                                 budget_usd=budget_usd, max_rounds=max_rounds, fragment=fragment, ppo=ppo,
                                 local_workers=local_workers, backend=backend, backend_options=backend_options,
                                 eval_every=eval_every, eval_episodes=eval_episodes, stop_at_eval=stop_at_eval)
    workload = workload.with_target(scheduler_target(workload))
    if workload.target_return != target_return:
        logger.info("%s: J = %s (the preset's, else gymnasium's reward_threshold)", env, workload.target_return)
    tracker = RunTracker(tracking_uri)
    experiment = experiment or f"minionsrl-scheduler/{env}"
    ckpt_root = Path(checkpoint_dir or project_root() / "checkpoints")

    # -- the agent: fresh, from a checkpoint, or from a resumed run's last artifact ----------
    done, meta = 0, SchedulerProvenance()
    if resume_run_id:
        tracker.start(experiment, "", params={}, run_id=resume_run_id)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                local = tracker.client.download_artifacts(resume_run_id, f"{ARTIFACT_DIR}/{ARTIFACT_NAME}", tmp)
                sched_agent, _, meta = load_scheduler(local, overrides)
            except Exception as exc:  # MlflowException, OSError, ConfigError
                tracker.finish("FAILED")
                raise ConfigError(f"run {resume_run_id} has no usable {ARTIFACT_DIR}/{ARTIFACT_NAME} to "
                                  f"resume from (it stopped before its first update?): {exc}") from exc
        done = meta.episodes_done
        previous = meta.session(resume_run_id)
        if previous is not None:  # the run's own workload and seeds; where actors run may change
            workload, seed = previous.workload.placed(backend, backend_options, local_workers), previous.seed
            previous.workload, common_seeds = workload, previous.common_seeds
            env = previous.env
        # the episodes' runs go where the first attempt's went, beside their parent
        experiment = tracker.client.get_experiment(tracker.experiment_id).name
        name_flow_run(f"train-scheduler-{env}-{episodes}ep-seed{seed}")
        logger.info("resuming scheduler training run %s (%s) after %d episodes", resume_run_id, env, done)
    else:
        source = None
        if init_from:
            with tempfile.TemporaryDirectory() as tmp:  # an MLflow URI: from this flow's store
                source = (fetch_scheduler_checkpoint(init_from, tracker.tracking_uri, tmp)
                          if is_mlflow_uri(init_from) else resolve_checkpoint(init_from))
                sched_agent, _, meta = load_scheduler(source, overrides)
            if sched_agent.i_max != i_max:
                raise ConfigError(f"{init_from} was trained for i_max={sched_agent.i_max}, not {i_max}")
        else:
            sched_agent = SchedulerAgent(i_max, AgentConfig().replace(overrides), seed=seed)
        params = {"env": env, "episodes": episodes, "batch_episodes": batch_episodes,
                  "concurrency": concurrency, "init_from": init_from, "seed": seed, "common_seeds": common_seeds,
                  "agent": dataclasses.asdict(sched_agent.config), "workload": workload.to_json()}
        tags = {"minionsrl.kind": "scheduler-training",
                "minionsrl.scheduler_init": "finetune" if init_from else "scratch"}
        tracker.start(experiment, f"scheduler__{env}__{'finetune' if init_from else 'scratch'}__{seed}__"
                      f"{time.strftime('%Y%m%d-%H%M%S')}", params=params, tags=tags)
        if source is not None:
            meta.fine_tuned_from = str(init_from)
    run_id = tracker.run_id
    entry = meta.session(run_id)
    if entry is None:
        entry = TrainingSession(env=env, mlflow_run_id=run_id, seed=seed,
                                mode="finetune" if init_from else "scratch", workload=workload,
                                beta=beta, cost_weight=cost_weight, batch_episodes=batch_episodes,
                                common_seeds=common_seeds)
        meta.trained_on.append(entry)
    work = ckpt_root / "schedulers" / run_id
    ckpt = work / ARTIFACT_NAME
    status, results = "FAILED", []
    started = time.perf_counter()
    wall_before = entry.wall_s
    artifacts = EpisodeArtifacts(run_id, episodes, done, logger)  # Prefect: progress, episodes, summary
    try:
        while done < episodes:
            batch = list(range(done, min(done + batch_episodes, episodes)))
            save_scheduler(ckpt, sched_agent, meta=meta)  # what this batch's episodes load
            summaries = []
            for chunk_start in range(0, len(batch), concurrency):
                futures = [scheduler_episode.submit(e, str(ckpt), workload, seed + (batch[0] if common_seeds else e),
                                                    seed + e, run_id,
                                                    tracker.tracking_uri, experiment,
                                                    str(ckpt_root))
                           for e in batch[chunk_start:chunk_start + concurrency]]
                summaries += [f.result() for f in futures]
            learn_from = []
            for e, summary in zip(batch, summaries, strict=True):
                rewards = rewards_from_summary(summary, sched_agent.config.beta, sched_agent.config.cost_weight)
                learn_from.append(Episode.from_trace(summary.scheduler_trace, rewards))
                record = SchedulerEpisodeRecord.from_summary(e, summary, rewards)
                tracker.log_metrics(record.metrics(), step=e)
                results.append(record)
                logger.info("episode %d: reward %.2f, %s after %d rounds, time %.2fs, cost $%.5f, "
                            "mean actors %.1f", e, record.reward, summary.stop_reason,
                            summary.rounds, summary.time_to_stop_s, summary.cost_usd, record.actors_mean)
            stats = sched_agent.update(learn_from)
            done = batch[-1] + 1
            entry.episodes += len(batch)
            entry.wall_s = wall_before + time.perf_counter() - started
            entry.billed_usd += sum(s.cost_usd for s in summaries)
            tracker.log_metrics({**stats, "training/wall_s": entry.wall_s, "training/billed_usd": entry.billed_usd},
                                step=batch[-1])
            meta.episodes_done, meta.updates = done, sched_agent.updates
            save_scheduler(ckpt, sched_agent, meta=meta)
            tracker.log_artifact(ckpt, ARTIFACT_DIR)
            artifacts.episodes_done(done, results[-1].reward if results else None, results)
        artifacts.finished(env, results, sched_agent.updates, f"runs:/{run_id}/{ARTIFACT_DIR}/{ARTIFACT_NAME}", tracker)
        if output:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ckpt, output)
        status = "FINISHED"
        return SchedulerTrainingResult(run_id=run_id, checkpoint=str(ckpt), output=output,
                                       artifact_uri=f"runs:/{run_id}/{ARTIFACT_DIR}/{ARTIFACT_NAME}",
                                       tracking_uri=tracker.tracking_uri, experiment=experiment,
                                       episodes_done=done, updates=sched_agent.updates, episodes=results,
                                       wall_s=entry.wall_s, billed_usd=entry.billed_usd)
    finally:
        artifacts.close()
        tracker.finish(status)


@flow(name="finetune-scheduler", flow_run_name="finetune-scheduler-{env}", persist_result=False, validate_parameters=True)
def finetune_scheduler(
    source: str = SHIPPED,
    env: str = "Acrobot-v1",
    episodes: int = 10,
    batch_episodes: int = 2,
    **options: Any,
) -> SchedulerTrainingResult:
    """Fine-tune a saved scheduler (file path, packaged name or MLflow URI) on another workload.

    A `train-scheduler` subflow started from `source` (its init_from) for `episodes` more
    episodes (default 10, the paper's figure).

    Args:
        source: the scheduler to start from: a file path, a packaged name (cartpole) or an
            MLflow URI.
        env: the workload to fine-tune on.
        episodes: fine-tuning episodes (the paper: about 10).
        batch_episodes: episodes per PPO update of the scheduler.
        options: any other train-scheduler parameter (output, beta, learning_rate, agent,
            i_max, preset, target_return, budget_usd, max_rounds, fragment, ppo, local_workers,
            backend, backend_options, eval_every, eval_episodes, stop_at_eval, seed, tracking_uri,
            experiment, checkpoint_dir), validated by
            that flow.
    """
    return train_scheduler(env=env, episodes=episodes, batch_episodes=batch_episodes, init_from=source,
                           **options)


# -- the command line (flows/experiments/cli.py shares the workload options) -----------------------

CLI_WORKLOAD = (("i_max", int), ("preset", str), ("target_return", float), ("budget_usd", float), ("max_rounds", int),
                ("fragment", int), ("ppo", json.loads), ("local_workers", int), ("backend", str),
                ("backend_options", json.loads), ("eval_every", int), ("eval_episodes", int), ("stop_at_eval", bool),
                ("tracking_uri", str))
"""Options a command passes on to every `train` run it starts (and the MLflow store); --ppo and
--backend-options are JSON, e.g. '{"learning_rate": 0.001}', '{"dask_address": "tcp://host:8786"}';
--stop-at-eval is a switch."""

WORKLOAD_HELP = {
    "eval_every": "every run also plays whole deterministic episodes every this many rounds and at its end "
                  "(eval/... in MLflow: the return and, on MuJoCo, how far the body moved); default off",
    "eval_episodes": "episodes of each of those evaluations (default 5)",
    "stop_at_eval": "judge J on those evaluations instead of R_k (the mean return of the episodes that ended "
                    "in a round, a single episode at one actor); needs --eval-every",
}


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    for name, kind in CLI_WORKLOAD:
        flag = f"--{name.replace('_', '-')}"
        if kind is bool:
            parser.add_argument(flag, action="store_true", default=None, help=WORKLOAD_HELP.get(name))
        else:
            parser.add_argument(flag, type=kind, help=WORKLOAD_HELP.get(name))


def workload_arguments(args: argparse.Namespace, *more: str) -> dict[str, Any]:
    """The workload options (and the `more` named ones) that were given: an option left out
    keeps the flow's default, or the env's preset."""
    names = [name for name, _ in CLI_WORKLOAD] + list(more)
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train or fine-tune the learned actor scheduler.")
    parser.add_argument("command", choices=("train", "finetune"))
    parser.add_argument("--env", help="default: CartPole-v1 (train), Acrobot-v1 (finetune)")
    parser.add_argument("--source", default=SHIPPED, help="finetune: scheduler to start from")
    parser.add_argument("--episodes", type=int, help="default: 60 (train), 10 (finetune)")
    parser.add_argument("--batch-episodes", type=int, help="default: 4 (train), 2 (finetune)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--resume-run-id")
    parser.add_argument("--out", help="copy the final checkpoint here")
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--cost-weight", type=float, default=0.0,
                        help="seconds one USD of round cost is worth in the reward (0: time only, the paper's)")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--agent", type=json.loads,
                        help='other scheduler PPO settings as JSON (AgentConfig), e.g. \'{"gae_lambda": 0.5}\'')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--common-seeds", action="store_true",
                        help="the episodes of a batch train the workload on one seed, each sampling its own "
                             "schedule (common random numbers)")
    parser.add_argument("--experiment")
    parser.add_argument("--verbose", action="store_true", help="show every task run's and round's log lines too")
    add_workload_arguments(parser)
    args = parser.parse_args(argv)
    prefect_patches.install()
    quiet_console(args.verbose)  # one line per episode and round; everything still reaches Prefect
    options = {"concurrency": args.concurrency, "output": args.out, "beta": args.beta,
               "cost_weight": args.cost_weight,
               "learning_rate": args.learning_rate, "agent": args.agent, "seed": args.seed,
               "common_seeds": args.common_seeds, "experiment": args.experiment,
               **workload_arguments(args, "env", "episodes", "batch_episodes")}
    with prefect_api():
        if args.command == "train":
            result = train_scheduler(resume_run_id=args.resume_run_id, **options)
        else:
            result = finetune_scheduler(source=args.source, **options)
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

"""The `impact` flow: IMPACT (Luo et al., ICLR 2020) as a training system beside the serverless PPO.

One flow run per training. Actors sample continuously in persistent worker processes
(tasks/impact/); the learner runs in this flow's process in chunks of learner steps,
each chunk one Prefect task run `learn-chunk-{i}` and one MLflow step. MLflow: one run per
training, with PPO's metric names where they mean the same thing (rollout/ep_return_mean,
rollout/env_steps[_total], time/learner_s, time/total_wall_s, cost/...) and impact/... for the
rest (policy lag, buffer reuse, importance weights). The run is billed as the fixed server
cluster it needs for its cloud time (always-on actors, idle included; cost/total_usd is that
bill, with the cluster's start-up) and, for reference, for this machine's wall and as serverless
(cost/serverless_total_usd). Two clocks: time/total_wall_s (this machine) and time/total_cloud_s
(the virtual backend's executor: a core per actor; the wall when the actors run for real). Prefect
artifacts (flows/artifacts.py ImpactArtifacts, queued to a background thread): progress after
every chunk, a chunk table every few chunks and at the end, and a final or failure summary.

Backends: local (persistent processes), dask (long-running Dask tasks) and virtual (the actors on
the cloud clock, tasks/impact/virtual_pool.py); the work-pool backend is refused: its actors are one flow run per job, one-shot per round by design. Its parameters are a
Workload's (models/run/workload.py: what to train, resolved through the same presets as `train`'s)
and a Placement's (where), flat, plus its own.

    python -m flows.impact --env CartPole-v1 --seed 0
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run as flow_run_context

from flows import interrupts, prefect_patches
from flows.artifacts import ImpactArtifacts
from flows.cli import flow_arguments, given_arguments, quiet_console, run_per_seed
from flows.served_flow import served_flow
from flows.tracking import RunTracker, default_tracking_uri, tracked_run
from models.billing.cost import ImpactBill, bill_impact
from models.envs.batch import env_spaces
from models.impact.config import ImpactRunConfig, resolve_impact_config
from models.impact.learner import ImpactLearner
from models.impact.progress import STOP_CHUNKS, ImpactChunkRecord, ImpactProgress, ImpactSummary
from models.rl.evaluation import evaluate_policy
from models.run.workload import Overrides, split_parameters
from tasks.impact.dask_pool import DaskImpactActorPool
from tasks.impact.inbox import FragmentInbox
from tasks.impact.learn_chunk import ChunkClock
from tasks.impact.learn_chunk import learn_chunk as learn_chunk_body
from tasks.impact.local_pool import ImpactActorPool
from tasks.impact.virtual_pool import VirtualImpactActorPool


@dataclass
class _Training:
    """The live parts one chunk task works on (never a flow parameter)."""

    cfg: ImpactRunConfig
    learner: ImpactLearner
    pool: FragmentInbox
    progress: ImpactProgress
    clock: ChunkClock
    orchestration_s: float = 0.0
    """Every chunk task's Prefect overhead plus MLflow logging so far."""


@task(name="learn-chunk", task_run_name="learn-chunk-{chunk}", cache_policy=NO_CACHE,
      persist_result=False)
def learn_chunk(training: _Training, chunk: int) -> dict[str, float]:
    """Up to chunk_steps IMPACT learner steps on the fragments the actors stream in."""
    return learn_chunk_body(training.learner, training.pool, training.progress, training.clock,
                            training.cfg.chunk_steps, check=interrupts.check)


@task(name="evaluate", task_run_name="evaluate-c{chunk}", cache_policy=NO_CACHE, persist_result=False)
def evaluate(training: _Training, chunk: int) -> dict[str, float]:
    """Deterministic evaluation of the learner's policy on whole episodes, as eval/... metrics
    (for MuJoCo locomotion envs also how far the body moved forward)."""
    learner = training.learner
    return evaluate_policy(learner.policy_on_cpu(), training.cfg.env_id, training.cfg.eval_episodes,
                           seed=10_000 + chunk, obs_rms=learner.obs_rms).metrics()


def impact_run_name() -> str:
    p = flow_run_context.parameters
    return f"{p.get('env') or 'CartPole-v1'}-impact-seed{p.get('seed') or 0}"


def prepare_impact(given: dict[str, object]) -> ImpactRunConfig:
    """The flow's given parameters as one validated configuration, before anything starts."""
    workload, placement, run = split_parameters(given)
    run.setdefault("tracking_uri", default_tracking_uri())
    RunTracker(str(run["tracking_uri"])).check_reachable()  # in seconds, before anything starts
    return resolve_impact_config(workload, placement, **run)


@served_flow(name="impact", flow_run_name=impact_run_name, persist_result=False, validate_parameters=True)
def impact(
    env: str | None = None,
    preset: str | None = None,
    seed: int | None = None,
    target_return: float | None = None,
    max_env_steps: int | None = None,
    max_wall_s: float | None = None,
    chunk_steps: int | None = None,
    return_window: int | None = None,
    max_chunks: int | None = None,
    eval_every_chunks: int | None = None,
    eval_episodes: int | None = None,
    stop_at_eval: bool | None = None,
    impact: Overrides | None = None,
    backend: str | None = None,
    backend_options: Overrides | None = None,
    learner_device: str | None = None,
    prices_file: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
) -> ImpactSummary:
    """Train with IMPACT: always-on actors, a circular buffer, a target network and V-trace.

    Every parameter left unset comes from the env's preset (models/data/presets.toml: the env's
    values, then its [impact_run] and [impact] tables).

    Args:
        env: gymnasium env id with vector observations (default CartPole-v1).
        preset: a variant of the env's preset, e.g. locomotion (its J applies to IMPACT too).
        seed: run seed (default 0).
        target_return: J; stop once the mean of the last return_window completed episodes reaches it.
        max_env_steps: env-step budget: stop once actors have delivered this many steps.
        max_wall_s: time limit of the training, seconds (the cloud clock with the virtual backend).
        chunk_steps: learner steps per learn-chunk task (and per MLflow step).
        return_window: completed episodes averaged for the return compared with J.
        max_chunks: stop after this many chunks (smoke tests); 0 or unset: no limit.
        eval_every_chunks: every this many chunks (and at the stop) evaluate the deterministic policy
            on eval_episodes whole episodes; 0: off. The evaluation is the learner's time, on both clocks.
        eval_episodes: episodes per evaluation (default 5).
        stop_at_eval: judge J on the evaluations (mean >= J, every episode moving forward on MuJoCo
            locomotion envs) instead of the training episodes: the locomotion presets' rule.
        impact: overrides of models/impact/config.py ImpactConfig, e.g. {"max_reuse": 3, "actors": 4}.
        backend: where actors run: local (persistent processes here, the default), dask
            (long-running Dask tasks) or virtual (impact.actors actors as on a core each, computed
            here on the cloud clock: the paper's 32-core cluster on any machine); work-pool is
            refused (its actors are one-shot by design).
        backend_options: dask backend: {"dask_address": ...}, a running cluster's scheduler;
            default a LocalCluster with one worker per actor.
        learner_device: auto (CUDA when present, the default), cpu or cuda.
        prices_file: TOML price table overriding the packaged models/data/prices.toml.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment name; default minionsrl/<env>.
        parent_run_id: MLflow run to nest this run under (an experiment's parent run).
    """
    prefect_patches.install()
    cfg = prepare_impact(given_arguments(locals()))
    with tracked_run(cfg.tracking_uri) as tracker:
        tracker.open()  # before the actors: the cluster's wall time is not spent opening MLflow
        learner = ImpactLearner(env_spaces(cfg.env_id), cfg.impact, seed=cfg.seed, device=cfg.learner_device)
        tracker.start(cfg.experiment, f"{cfg.env_id}__impact__{cfg.seed}", params=cfg.to_dict(),
                      tags={"minionsrl.system": "impact", "minionsrl.scheduler": "impact",
                            "minionsrl.backend": cfg.backend, "minionsrl.learner_device": learner.device.type},
                      parent_run_id=cfg.parent_run_id)
        artifacts = ImpactArtifacts(cfg, tracker, get_run_logger())  # Prefect: progress, chunk table, summary
        try:
            summary = run_impact(cfg, learner, tracker, artifacts)
        except BaseException as exc:
            artifacts.failed(exc)
            raise
        artifacts.finished(summary)
        return summary


def run_impact(cfg: ImpactRunConfig, learner: ImpactLearner, tracker: RunTracker,
               artifacts: ImpactArtifacts) -> ImpactSummary:
    """Start the actors, learn chunk by chunk until a stop rule holds, log each chunk."""
    logger = get_run_logger()
    clock = ChunkClock(started_at=time.time())  # the cluster's time starts with its actors
    with actor_pool(cfg, len(learner.weights_vector()), clock) as pool, \
            interrupts.deferred(abandon=pool.close):  # a Ctrl-C: raised at the checks, the actors closed
        pool.publish(learner.weights_vector(), learner.version, learner.norm_state())
        progress = ImpactProgress(cfg.target_return, cfg.max_env_steps, cfg.max_wall_s, cfg.return_window,
                                  judge_on_eval=cfg.stop_at_eval)
        training = _Training(cfg, learner, pool, progress, clock)
        chunk = 0
        while progress.stop_reason is None:
            interrupts.check()
            t0 = time.perf_counter()
            metrics = learn_chunk(training, chunk)
            if cfg.eval_every_chunks and ((chunk + 1) % cfg.eval_every_chunks == 0 or progress.stop_reason):
                metrics.update(evaluate(training, chunk))  # on the learner's clock: between pool calls
                progress.record_evaluation(metrics, chunk)
            bill = chunk_figures(training, metrics, time.perf_counter() - t0)
            t_log = time.perf_counter()
            tracker.log_metrics(metrics, step=chunk)
            training.orchestration_s += time.perf_counter() - t_log
            logger.info("chunk %d: %d learner steps, return %.1f, %d env steps, lag %.1f, cloud %.1fs, wall %.1fs",
                        chunk, learner.version, metrics["rollout/ep_return_mean"], progress.env_steps,
                        metrics.get("impact/policy_lag_mean", math.nan), metrics["time/total_cloud_s"],
                        metrics["time/total_wall_s"])
            chunk += 1
            if cfg.max_chunks and chunk >= cfg.max_chunks and progress.stop_reason is None:
                progress.stop_reason = STOP_CHUNKS
            # queued only (Prefect calls on the publisher's thread), so it stays out of orchestration_s
            artifacts.chunk_done(ImpactChunkRecord(
                chunk=chunk - 1, learner_steps=learner.version, env_steps=progress.env_steps,
                mean_return=progress.mean_return, policy_lag_mean=metrics.get("impact/policy_lag_mean", math.nan),
                wall_s=metrics["time/total_wall_s"], cloud_s=metrics["time/total_cloud_s"], server_cluster_usd=bill.server_cluster_usd), progress.stop_reason)
        summary = impact_summary(training, chunk, pool.counters.replacements, tracker)
    tracker.set_tags({"minionsrl.stop_reason": summary.stop_reason,
                      **({"minionsrl.stop_detail": progress.stop_detail} if progress.stop_detail else {})})
    tracker.log_metrics({"summary/target_reached": float(summary.target_reached),
                         "summary/time_to_stop_s": summary.cloud_s, "summary/wall_time_s": summary.wall_s,
                         "summary/cloud_time_s": summary.cloud_s,
                         "summary/server_cluster_at_wall_usd": summary.server_cluster_at_wall_usd,
                         "summary/env_steps": float(summary.env_steps),
                         "summary/cost_usd": summary.server_cluster_cost_usd,
                         "summary/server_cluster_cost_usd": summary.server_cluster_cost_usd,
                         "summary/server_cluster_cost_no_startup_usd": summary.server_cluster_cost_no_startup_usd,
                         "summary/serverless_cost_usd": summary.serverless_cost_usd,
                         "summary/orchestration_frac": summary.orchestration_frac},
                        step=max(chunk - 1, 0))
    logger.info("stopped: %s after %d chunks, %d env steps, cloud %.1fs (%s), wall %.1fs; MLflow run %s",
                summary.stop_reason, chunk, summary.env_steps, summary.cloud_s, summary.clock, summary.wall_s,
                tracker.run_id)
    return summary


def actor_pool(cfg: ImpactRunConfig, n_weights: int, clock: ChunkClock) -> FragmentInbox:
    """The run's actors: real processes (local), Dask tasks, or on the cloud clock (virtual, which
    then keeps the clock's cloud time)."""
    if cfg.backend == "dask":
        return DaskImpactActorPool(cfg.env_id, cfg.impact, n_weights, cfg.seed, address=cfg.dask_address)
    if cfg.backend == "virtual":
        pool = VirtualImpactActorPool(cfg.env_id, cfg.impact, n_weights, cfg.seed)
        clock.cloud = pool.cloud_s
        return pool
    return ImpactActorPool(cfg.env_id, cfg.impact, n_weights, cfg.seed)


def clock_name(cfg: ImpactRunConfig) -> str:
    """Which clock the run's cloud time is: the virtual executor's, or this machine's wall."""
    return "virtual" if cfg.backend == "virtual" else "wall"


def training_bill(training: _Training) -> ImpactBill:
    cfg, clock = training.cfg, training.clock
    return bill_impact(clock.cloud_s(), clock.wall_s(), cfg.impact.actors, clock.actor_busy_s, clock.learner_s,
                       training.learner.device.type, cfg.prices)


def chunk_figures(training: _Training, metrics: dict[str, float], task_s: float) -> ImpactBill:
    """Add a chunk's wall time, bill and orchestration to its metrics; the bill so far."""
    wall_s, cloud_s = training.clock.wall_s(), training.clock.cloud_s()
    bill = training_bill(training)
    metrics.update({"time/total_wall_s": wall_s, "time/total_cloud_s": cloud_s,
                    "time/task_overhead_s": max(task_s - metrics["time/chunk_body_s"], 0.0),
                    "cost/learner_on_cuda": float(training.learner.device.type == "cuda"), **bill.metrics()})
    # Orchestration so far: every chunk task's Prefect overhead plus MLflow logging (the earlier
    # chunks'; this chunk's own log is counted with the next one and in the summary).
    training.orchestration_s += metrics["time/task_overhead_s"]
    metrics["time/orchestration_s"] = training.orchestration_s
    metrics["time/orchestration_frac"] = training.orchestration_s / max(cloud_s, 1e-9)
    if training.clock.first_fragment_s is not None:
        metrics["time/actors_first_fragment_s"] = training.clock.first_fragment_s
    return bill


def impact_summary(training: _Training, chunks: int, replacements: int, tracker: RunTracker) -> ImpactSummary:
    cfg, progress, learner = training.cfg, training.progress, training.learner
    wall_s, cloud_s = training.clock.wall_s(), training.clock.cloud_s()
    bill = training_bill(training)
    return ImpactSummary(
        run_id=str(tracker.run_id), env_id=cfg.env_id, seed=cfg.seed, stop_reason=str(progress.stop_reason),
        env_steps=progress.env_steps, learner_steps=learner.version, chunks=chunks,
        final_return=progress.mean_return, wall_s=wall_s, cloud_s=cloud_s, clock=clock_name(cfg),
        server_cluster_cost_usd=bill.server_cluster_usd, server_cluster_at_wall_usd=bill.server_cluster_at_wall_usd,
        server_cluster_cost_no_startup_usd=bill.server_cluster_no_startup_usd,
        serverless_cost_usd=bill.serverless_usd, orchestration_frac=training.orchestration_s / max(cloud_s, 1e-9),
        actor_replacements=replacements, learner_device=learner.device.type, tracking_uri=tracker.tracking_uri)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train with IMPACT (asynchronous baseline) on Prefect.")
    flow_arguments(parser, impact.fn)
    parser.add_argument("--seeds", type=int, nargs="*", help="run one training per seed (overrides --seed)")
    parser.add_argument("--verbose", action="store_true", help="show every task run's log lines too")
    args = vars(parser.parse_args(argv))
    prefect_patches.install()
    quiet_console(args.pop("verbose"))
    status, summaries = run_per_seed(impact, args, prepare_impact)
    if status == 2:
        return status
    for s in summaries:
        print(f"seed {s.seed}: {s.stop_reason}, final return {s.final_return:.1f}, {s.env_steps} env steps, "
              f"{s.learner_steps} learner steps, cloud {s.cloud_s:.1f}s ({s.clock} clock), wall {s.wall_s:.1f}s, "
              f"server cluster ${s.server_cluster_cost_usd:.4f} "
              f"(${s.server_cluster_cost_no_startup_usd:.4f} without start-up), serverless ${s.serverless_cost_usd:.5f}, "
              f"orchestration {100 * s.orchestration_frac:.1f}% of the cloud time, actors replaced {s.actor_replacements}")
    if summaries:
        print(f"\nMLflow store: {summaries[0].tracking_uri}")
    return status


if __name__ == "__main__":
    sys.exit(main())

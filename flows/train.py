"""The `train` flow: rounds of schedule -> rollout (mapped I_k wide) -> update until J, B or K.

Each round is a `train-round` subflow. Run it with embedded defaults:

    python -m flows.train                      # CartPole-v1, Fixed(8), temporary local Prefect API
    python -m flows.train --env CartPole-v1 --scheduler adapt --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# A fresh temporary server takes 20+ s to migrate its database on a busy 2-core machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from prefect import flow, get_run_logger, unmapped  # noqa: E402
from prefect.runtime import flow_run as flow_run_context  # noqa: E402
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # noqa: E402

from deployments.local_api import prefect_api  # noqa: E402
from flows import prefect_patches  # noqa: E402
from flows.artifacts import RunArtifacts  # noqa: E402
from flows.cli import flow_arguments, given_arguments, quiet_console  # noqa: E402
from flows.prefect_patches.lean_subflow import lean_start  # noqa: E402
from flows.prefect_patches.shared_task_runner import SharedThreadPoolTaskRunner, results_of  # noqa: E402
from flows.tracking import RunTracker, default_tracking_uri, project_root  # noqa: E402
from models.rl.rollout import RolloutBatch  # noqa: E402
from models.run.checkpoint import RunCheckpoint, load_run_checkpoint  # noqa: E402
from models.run.config import SYSTEM_CLUSTER, ConfigError, RunConfig  # noqa: E402
from models.run.journal import RoundJournal  # noqa: E402
from models.run.presets import resolve_run_changes, resolve_run_config  # noqa: E402
from models.run.session import RunSummary, TrainingSession  # noqa: E402
from models.scheduling.learned import is_learned_spec, is_mlflow_uri, parse_learned_spec  # noqa: E402
from tasks.backends import ActorBackend, make_backend  # noqa: E402
from tasks.chaos import chaos_point  # noqa: E402
from tasks.rounds import ActorFailure, evaluate, rollout, schedule, update  # noqa: E402


def fetch_scheduler_checkpoint(ref: str, tracking_uri: str, dest: str | Path) -> Path:
    """Download the scheduler checkpoint an MLflow URI names (runs:/<id>/scheduler/scheduler.pt,
    models:/...) from `tracking_uri`, never from MLFLOW_TRACKING_URI or a default, into the
    folder `dest`; a folder artifact gives its first .pt file."""
    import mlflow.artifacts

    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=ref, tracking_uri=tracking_uri,
                                                         dst_path=str(dest)))
    except Exception as exc:  # MlflowException, OSError: say which URI and store failed
        raise ConfigError(f"cannot download scheduler checkpoint {ref!r} from {tracking_uri}: {exc}") from exc
    if local.is_dir():
        found = sorted(local.rglob("*.pt"))
        if not found:
            raise ConfigError(f"no .pt scheduler checkpoint under {ref!r} in {tracking_uri}")
        local = found[0]
    return local


def localise_scheduler_spec(spec: str | None, tracking_uri: str, dest_root: str | Path) -> str | None:
    """'learned:<MLflow URI>[:mode]' -> 'learned:<local copy>:<mode>', the copy downloaded from
    `tracking_uri` into a fresh folder under dest_root (kept: a resumed run loads it again).
    Every other spec comes back unchanged."""
    if not is_learned_spec(spec):
        return spec
    learned = parse_learned_spec(spec)
    if not is_mlflow_uri(learned.ref):
        return spec
    Path(dest_root).mkdir(parents=True, exist_ok=True)
    local = fetch_scheduler_checkpoint(learned.ref, tracking_uri, tempfile.mkdtemp(prefix="scheduler-", dir=dest_root))
    return f"learned:{local}:{learned.mode}"


class RoundFailedError(RuntimeError):
    """Fewer actors returned than the quorum needs; the last checkpoint is intact."""

    def __init__(self, message: str, round_index: int, returned: int, failed: int):
        super().__init__(message)
        self.round_index, self.returned, self.failed = round_index, returned, failed

    def __reduce__(self):  # Prefect may pickle a flow's exception
        return type(self), (str(self), self.round_index, self.returned, self.failed)


def round_flow(session: TrainingSession, backend: ActorBackend, journal: RoundJournal,
               task_runner: SharedThreadPoolTaskRunner):
    """The `train-round` subflow, bound to this run's session and actor backend.

    A closure rather than a module-level flow with the session as a parameter: Prefect
    JSON-encodes flow parameters for the API, and walking a learner would cost more than a
    round. The run's visible parameters stay the round index and the actor count.
    """

    cfg = session.cfg

    @flow(name="train-round", flow_run_name="round-{round_index}-x{actors}", persist_result=False,
          validate_parameters=False, task_runner=task_runner)
    def train_round(round_index: int, actors: int):
        body_started = time.perf_counter()
        jobs = session.jobs(actors, session.learner.weights())
        results = results_of(rollout.map(unmapped(backend), jobs, timeout_s=unmapped(cfg.actor_timeout_s),
                                         retries=unmapped(cfg.actor_retries), journal=unmapped(journal)))
        batches = [r for r in results if isinstance(r, RolloutBatch)]
        failures = [r for r in results if isinstance(r, ActorFailure)]
        needed = math.ceil(cfg.quorum * actors)
        if len(batches) < needed:
            raise RoundFailedError(
                f"round {round_index}: {len(batches)} of {actors} actors returned, quorum needs "
                f"{needed}; failures: {[f.error for f in failures]}",
                round_index, len(batches), len(failures))
        if failures:
            get_run_logger().warning("round %d continues with %d of %d batches (%d actors failed)",
                                     round_index, len(batches), actors, len(failures))
        stats = update(session.learner, batches, round_index, journal)
        stats["time/round_body_s"] = time.perf_counter() - body_started
        return batches, [f.billed_s for f in failures], stats

    return lean_start(train_round)  # 5 API calls to start a round instead of 8 (flows/prefect_patches/lean_subflow.py)


def train_run_name() -> str:
    """The Prefect flow-run name says what ran: workload, scheduler and seed (or the resume)."""
    p = flow_run_context.parameters
    if p.get("resume"):
        return f"resume-{Path(p['resume']).parent.name[:12]}"
    scheduler = p.get("scheduler") or "preset"
    if is_learned_spec(scheduler):  # a checkpoint's name, not its whole path
        scheduler = parse_learned_spec(scheduler).short_name
    if p.get("system") == SYSTEM_CLUSTER:  # its own system: say so, next to the workload
        scheduler = f"{SYSTEM_CLUSTER}-{p.get('scheduler') or 'fixed'}"
    workload = p.get("env") or "CartPole-v1"
    if p.get("preset"):
        workload += f"-{p['preset']}"
    return f"{workload}-{scheduler.replace(':', '')}-seed{p.get('seed') or 0}"


@flow(name="train", flow_run_name=train_run_name, persist_result=False, validate_parameters=True)
def train(
    env: str | None = None,
    scheduler: str | None = None,
    target_return: float | None = None,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    i_max: int | None = None,
    fragment: int | None = None,
    envs_per_actor: int | None = None,
    carry_episodes: bool | None = None,
    seed: int | None = None,
    scheduler_seed: int | None = None,
    backend: str | None = None,
    ppo: dict[str, Any] | None = None,
    actor_memory_gb: float | None = None,
    learner_device: str | None = None,
    prices_file: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    local_workers: int | None = None,
    parent_run_id: str | None = None,
    actor_timeout_s: float | None = None,
    actor_retries: int | None = None,
    quorum: float | None = None,
    eval_every: int | None = None,
    eval_episodes: int | None = None,
    stop_at_eval: bool | None = None,
    resume: str | None = None,
    warm_actors: int | None = None,
    backend_options: dict[str, Any] | None = None,
    register_model: str | None = None,
    log_model: bool | None = None,
    system: str | None = None,
    bill_cluster_startup: bool | None = None,
    preset: str | None = None,
) -> RunSummary:
    """Train PPO on `env` with per-round actor counts chosen by `scheduler`.

    Every parameter left unset comes from the workload's preset (models/data/presets.toml), then
    from models/run/config.py RunConfig's defaults; all of them become one RunConfig.

    Args:
        env: gymnasium env id or 'module:EnvName' (default CartPole-v1).
        scheduler: fixed:N, max, adapt, increase:N[:step[:every]], decrease:N[:step[:every]],
            switch:A:B:P (A actors until R_k reaches P% of J, then B) or
            learned[:<path, packaged name or MLflow URI>][:sample]; an MLflow URI is downloaded
            from this run's tracking_uri (into checkpoint_dir/scheduler-artifacts).
        target_return: J; training stops once a round's mean episode return reaches it.
        budget_usd: B, a hard limit: a round starts only when an upper bound of its cost fits in
            what is left (round 0 included; models/billing/budget.py).
        max_rounds: K; at most this many rounds.
        i_max: largest actor count a scheduler may choose (default 32).
        fragment: env steps each actor samples per round.
        envs_per_actor: environments one actor steps in lockstep (divides fragment).
        carry_episodes: each round's actor i continues the episodes that actor i of the round
            before left unfinished, instead of resetting its envs (MuJoCo envs; the locomotion
            presets turn it on).
        seed: run seed (default 0); actor i of round k uses a seed derived from (seed, k, i).
        scheduler_seed: seed of a learned scheduler's sampling (learned:...:sample); default the
            run's seed.
        backend: where actors run: local (warm processes on this machine, the default),
            work-pool (each actor its own flow run on a Prefect work pool: process, ACI, ...)
            or dask.
        ppo: overrides of PPO hyperparameters, e.g. {"learning_rate": 0.001}.
        actor_memory_gb: memory billed per actor.
        learner_device: auto (CUDA when present, the default), cpu or cuda.
        prices_file: TOML price table overriding the packaged models/data/prices.toml.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment name; default minionsrl/<env>.
        checkpoint_dir: where per-round checkpoints go; default ./checkpoints.
        local_workers: worker processes of the local or dask backend; default one per core.
        parent_run_id: MLflow run to nest this run under (sweeps, scheduler training).
        actor_timeout_s: an actor running longer is killed and retried (default 300 s).
        actor_retries: extra attempts for a crashed or timed-out actor (default 1).
        quorum: fraction of a round's actors whose batches must arrive for the round to go on
            (default 0.75).
        eval_every: every this many rounds (and at the end), evaluate the policy's deterministic
            actions on whole episodes, logged as eval/...; 0 (the default) turns it off.
        eval_episodes: episodes per evaluation (default 5).
        stop_at_eval: judge J on the evaluations, not on R_k: stop once an evaluation's mean
            return reaches J with every episode moving forward (MuJoCo locomotion); needs eval_every.
        resume: a run's checkpoint (checkpoints/<run id>/latest.pt): continue it after its last
            finished round, in the same MLflow run, with its stored configuration; only
            max_rounds, budget_usd, the backend and its options, actor_timeout_s,
            actor_retries, quorum, evaluation and learner_device may be changed (recorded as
            the MLflow tag minionsrl.resume_changes); any other differing value is refused.
        warm_actors: work-pool backend: warm actor servers to keep between rounds (default 0).
        backend_options: further options of the backend (models/run/config.py *BackendSpec), e.g.
            {"actor_deployment": "actor/aci-actor"} or {"dask_address": "tcp://host:8786"}.
        register_model: register the final policy's MLflow model under this name (a new
            version each run); it is logged as a model of the run either way.
        log_model: log the final policy as an MLflow model and the per-round plots (default
            true; scheduler-training episodes turn it off: ~1-2 s each).
        system: serverless (the default: actors per round, billed per second of execution) or
            server-cluster (the price table's fixed cluster: its actor_cores actors every round
            as local worker processes started once, billed for all its wall time).
        bill_cluster_startup: server-cluster: bill the cluster's start-up in the first round
            (default true); the summary reports its cost with and without it either way.
        preset: a variant of the env's preset to fill the unset parameters from, e.g.
            locomotion (Hopper-v5, HalfCheetah-v5: a J that needs forward motion and its step
            budget; models/data/presets.toml); default the env's own preset (the paper's J).
    """
    prefect_patches.install()  # idempotent: the CLI has, a caller from Python may not have
    setup = prepare_run(given_arguments(locals(), exclude=("resume",)), resume)
    cfg = setup.config
    logger = get_run_logger()
    tracker = RunTracker(cfg.tracking_uri)
    tracker.check_reachable()  # fail in seconds, before any actor starts
    if setup.checkpoint is not None:
        tracker.require_run(setup.checkpoint.progress["run_id"])
    # Start-up in parallel: actor processes spawn while MLflow opens its store (a thread) and
    # the learner is built here; measured ~4 s + 2.6 s + 2.5 s one after the other.
    # a server cluster's actor processes run on this machine's cores, one actor per core at a time
    actor_backend = make_backend(cfg.backend, cfg.env_id, max_running=os.cpu_count() if cfg.cluster else None)
    status, failure, artifacts = "FAILED", None, None
    try:
        with ThreadPoolExecutor(1) as opener:
            opening = opener.submit(tracker.open)
            try:
                session = TrainingSession(cfg)
            finally:
                opening.result()
        start_tracking(session, tracker, setup)
        artifacts = RunArtifacts(session, tracker, logger)  # Prefect artifacts, MLflow plots and model
        ckpt_path = Path(resume).resolve() if resume else Path(cfg.checkpoint_dir) / session.run_id / "latest.pt"
        journal = RoundJournal(ckpt_path.with_name("journal.jsonl"))
        if setup.checkpoint is not None:
            settle_crashed_round(session, setup.checkpoint, tracker, journal, ckpt_path)
        await_actors(session, actor_backend)
        rounds_started_at = time.time()
        run_rounds(session, actor_backend, tracker, ckpt_path, journal, logger, on_round=artifacts.round_done)
        rounds_finished_at = time.time()
        if cfg.log_model:
            artifacts.start_plots()
        final = session.save_policy(ckpt_path.with_name("final_policy.pt"))
        tracker.log_artifact(final, "policy")
        model = artifacts.log_model(final, cfg.register_model) if cfg.log_model else None
        summary = dataclasses.replace(session.summary(tracking_uri=tracker.tracking_uri, checkpoint=str(ckpt_path)),
                                      rounds_started_at=rounds_started_at, rounds_finished_at=rounds_finished_at)
        tracker.set_tags({"minionsrl.stop_reason": str(session.stop_reason),
                          "minionsrl.stop_detail": summary.stop_detail,
                          "minionsrl.learner_device": summary.learner_device})
        if cfg.cluster:  # its actors were these processes in every round
            tracker.set_tags({"minionsrl.worker_pids": json.dumps(session.progress.worker_pids)})
        tracker.log_metrics({"summary/target_reached": float(summary.target_reached),
                             "summary/time_to_stop_s": summary.time_to_stop_s,
                             "summary/cost_usd": summary.cost_usd,
                             "summary/actors_usd": summary.actors_cost_usd,
                             "summary/learner_usd": summary.learner_cost_usd,
                             "summary/startup_usd": summary.startup_cost_usd,
                             "summary/lost_attempts_usd": session.progress.lost_usd,
                             "summary/projected_aci_startup_usd": summary.projected_aci_startup_usd,
                             "summary/server_cluster_cost_usd": summary.server_cluster_cost_usd,
                             "summary/server_cluster_cost_no_startup_usd":
                                 summary.server_cluster_cost_no_startup_usd},
                            step=session.round_index)
        artifacts.finished(summary, model, plots=cfg.log_model)
        status = "FINISHED"
        logger.info("stopped: %s after %d rounds; MLflow run %s in %s", session.stop_reason,
                    session.round_index, session.run_id, tracker.tracking_uri)
        return summary
    except BaseException as exc:
        failure = exc
        if artifacts is not None:
            artifacts.failed(exc)
        raise
    finally:
        actor_backend.close()
        tracker.finish(status, failure)


def start_tracking(session: TrainingSession, tracker: RunTracker, setup: RunSetup) -> None:
    """A new MLflow run with the configuration as params, or the resumed run reopened."""
    cfg = session.cfg
    this_flow_run = str(flow_run_context.id) if flow_run_context.id else None
    if setup.checkpoint is not None:
        session.load(setup.checkpoint)
        mark_crashed(session.progress.flow_run_ids)
        tracker.start("", "", {}, run_id=session.run_id)
        if setup.changes:
            tracker.set_tags({"minionsrl.resume_changes": json.dumps(setup.changes, default=str)})
        if this_flow_run:
            session.progress.flow_run_ids.append(this_flow_run)
            tracker.set_tags({"prefect.flow_run_id": this_flow_run})
        get_run_logger().info("resuming run %s at round %d", session.run_id, session.round_index)
        return
    system = f"{SYSTEM_CLUSTER}__" if cfg.cluster else ""  # its own row in the runs view
    run_name = f"{cfg.env_id}__{system}{session.scheduler.name}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
    tags = {"minionsrl.scheduler": session.scheduler.name, "minionsrl.backend": cfg.backend.name,
            "minionsrl.learner_device": session.learner_device, "minionsrl.system": cfg.system}
    if cfg.parent_run_id:
        tags["mlflow.parentRunId"] = cfg.parent_run_id
    if setup.scheduler_source:  # the MLflow URI the local copy came from
        tags["minionsrl.scheduler_source"] = setup.scheduler_source
    if this_flow_run:
        tags["prefect.flow_run_id"] = this_flow_run
        session.progress.flow_run_ids.append(this_flow_run)
    session.progress.run_id = tracker.start(cfg.experiment, run_name, params=cfg.to_dict(), tags=tags)


def mark_crashed(flow_run_ids: list[str]) -> None:
    """The flow runs of earlier attempts that died without a final state (a SIGKILL leaves a
    flow run Running for ever) are marked Crashed when the run is resumed."""
    from prefect import get_client
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        for flow_run_id in flow_run_ids:
            try:
                run = client.read_flow_run(flow_run_id)
            except Exception:  # ObjectNotFound: another Prefect API, or a deleted run
                continue
            if run.state is not None and not run.state.is_final():
                client.set_flow_run_state(flow_run_id, Crashed(message="the training process died; "
                                                               "the run was resumed by a later flow run"),
                                          force=True)


def settle_crashed_round(session: TrainingSession, checkpoint: RunCheckpoint, tracker: RunTracker,
                         journal: RoundJournal, ckpt_path: Path) -> None:
    """After a crash: log the last round's metrics if the crash came between its checkpoint and
    its MLflow record, and bill once the attempt of the next round that the crash cut short."""
    last = session.round_index - 1
    if checkpoint.round_metrics and last >= 0 and not tracker.has_metric_at("time/round_s", last):
        tracker.log_metrics(checkpoint.round_metrics, step=last)
    lost = journal.lost_attempt()
    if lost is not None and session.bill_lost_attempt(lost) > 0:
        get_run_logger().info("billed $%.6f of round %d's attempt cut short by the crash",
                              session.progress.lost_usd, lost.round_index)
        session.save(ckpt_path, checkpoint.round_metrics)  # billed once, even if we crash again


def await_actors(session: TrainingSession, backend: ActorBackend) -> None:
    """Wait for the actors started before round 0 (they boot while the learner is built and
    MLflow opens); their boots are billed in round 0, inside its budget bound."""
    backend.await_prewarm()
    session.note_backend_startup(backend.take_startup_s())
    if session.cfg.cluster:  # its actors are up: the cluster's billed wall time starts
        session.start_cluster_clock()


def run_rounds(session: TrainingSession, backend: ActorBackend, tracker: RunTracker, ckpt_path: Path,
               journal: RoundJournal, logger, on_round=None) -> None:
    """The round loop: schedule, admit (budget), run the round subflow, record, checkpoint, log.

    The checkpoint is written before the round's MLflow record and holds it, so a crash at any
    point loses no round and logs none twice (settle_crashed_round); the journal bills a round
    attempt that a crash cut short. on_round(session) runs after each recorded round."""
    cfg = session.cfg
    task_runner = SharedThreadPoolTaskRunner(max_workers=cfg.i_max)  # its threads serve every round
    run_round = round_flow(session, backend, journal, task_runner)
    warned_no_episodes = False
    # Round subflows skip heartbeats: each costs up to 1 s at flow exit (the heartbeat
    # thread sleeps in 1 s steps before join). The parent `train` run keeps its own.
    with contextlib.ExitStack() as stack:
        stack.callback(task_runner.close)
        stack.enter_context(temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        while session.stop_reason is None:
            k = session.round_index
            actors = schedule(session.scheduler, session.state())
            if not session.admit_round(actors):
                logger.info("stopped by the %s", session.progress.stop_detail)
                break
            chaos_point("round_start", k)
            journal.begin(k, actors)
            started = time.perf_counter()
            try:
                batches, failed_billed_s, stats = run_round(round_index=k, actors=actors)
            except RoundFailedError as exc:  # the failures still count, in MLflow too
                tracker.log_metrics({"rollout/actor_failures": float(exc.failed),
                                     "rollout/batches": float(exc.returned)}, step=k)
                raise
            chaos_point("round_work", k)
            metrics = session.record(batches, stats, time.perf_counter() - started, failed_billed_s,
                                     warm_idle_s=backend.idle_billed_s(),
                                     pool_startup_s=backend.take_startup_s())
            if cfg.eval_every and (session.round_index % cfg.eval_every == 0 or session.stop_reason):
                metrics.update(evaluate(session, cfg.eval_episodes))
                session.record_evaluation(metrics)
            chaos_point("recorded", k)
            session.save(ckpt_path, metrics)
            chaos_point("saved", k)
            tracker.log_metrics(metrics, step=k)
            chaos_point("logged", k)
            # "round k/K (p%)" is the terminal's progress bar: how far the run is towards K rounds
            logger.info("round %d/%d (%d%%): %d actors, return %.1f (J %g), P_k %.2fs, wall %.2fs, "
                        "$%.6f ($%.6f of B left)", k, cfg.max_rounds, 100 * (k + 1) // max(cfg.max_rounds, 1),
                        actors, metrics["rollout/ep_return_mean"], cfg.target_return, metrics["time/round_s"],
                        metrics["time/round_wall_s"], metrics["cost/round_usd"], session.budget_left_usd)
            if on_round is not None:
                on_round(session)
            if metrics["rollout/episodes"] == 0 and not cfg.eval_every and not warned_no_episodes:
                warned_no_episodes = True
                message = (f"round {k}: no episode of {cfg.env_id} ended inside a {cfg.fragment}-step "
                           "fragment, so R_k is undefined and J can never be reached; use eval_every "
                           "to evaluate whole episodes (or a longer fragment)")
                logger.warning(message)
                tracker.set_tags({"minionsrl.warning": message})


@dataclass(frozen=True)
class RunSetup:
    """A run's resolved configuration, and for a resumed run its checkpoint and what changed."""

    config: RunConfig
    checkpoint: RunCheckpoint | None = None
    changes: dict[str, Any] | None = None
    scheduler_source: str | None = None


def prepare_run(given: dict[str, Any], resume: str | None) -> RunSetup:
    """The train flow's parameters (those given) as one validated RunConfig, before anything starts.

    A new run: presets fill what is unset; a learned scheduler named by an MLflow URI is
    downloaded from the run's own store. A resumed run: the checkpoint's stored configuration,
    with only the changes a resume may make.
    """
    if resume:
        checkpoint = load_run_checkpoint(resume)
        stored = RunConfig.from_dict(checkpoint.config)
        changes = resolve_run_changes(given, stored)
        return RunSetup(stored.with_changes(changes), checkpoint, changes)
    given.setdefault("tracking_uri", default_tracking_uri())
    given.setdefault("checkpoint_dir", str(project_root() / "checkpoints"))
    source = given.get("scheduler")
    given["scheduler"] = localise_scheduler_spec(source, given["tracking_uri"],
                                                 Path(given["checkpoint_dir"]) / "scheduler-artifacts")
    if given["scheduler"] is None:
        del given["scheduler"]
    cfg = resolve_run_config(given)
    return RunSetup(cfg, scheduler_source=str(source).strip() if source != given.get("scheduler") else None)


def warm_up() -> None:
    """One-off work the first training would otherwise pay for, done while the temporary API
    starts: MLflow's SQL store and torch's optimiser machinery (~1.4 s each measured here), the
    actors' preloaded fork server (~3 s, tasks/worker_processes.py), and what the first
    shut-down imports and loads (MLflow's pyfunc model and its map of installed packages, ~0.5 s),
    and the Prefect clients' TLS context. (The plots are drawn in the fork server's children,
    which preload matplotlib: tasks/worker_processes.py.)"""
    import torch
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401
    from mlflow.utils import requirements_utils

    from flows.prefect_patches.tls_context import context_for_current_settings
    from tasks.worker_processes import start_worker_server

    start_worker_server()
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    context_for_current_settings()
    # what logging a model checks its pip requirements against: every installed distribution's
    # files, scanned once per process (MLflow caches it); private, so only where it exists
    getattr(requirements_utils, "_init_packages_to_modules_map", lambda: None)()

    import flows.policy_model  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train PPO with MinionsRL on Prefect.")
    flow_arguments(parser, train.fn)
    parser.add_argument("--seeds", type=int, nargs="*", help="run one training per seed (overrides --seed)")
    parser.add_argument("--verbose", action="store_true",
                        help="show every task run's and round subflow's log lines on the console too "
                             "(they always reach Prefect)")
    args = vars(parser.parse_args(argv))
    prefect_patches.install()
    quiet_console(args.pop("verbose"))
    seeds = args.pop("seeds") or [args.pop("seed")]
    args.pop("seed", None)
    try:  # bad input: one line, before the temporary API or any actor starts
        for seed in seeds:
            prepare_run(given_arguments({**args, "seed": seed}, exclude=("resume",)), args["resume"])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summaries = []
    try:
        api = prefect_api(while_starting=warm_up)
        api.__enter__()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        stack.push(api)
        for seed in seeds:
            summaries.append(train(**args, seed=seed))
    for s in summaries:
        print(f"seed {s.seed}: {s.stop_reason} after {s.rounds} rounds, "
              f"final return {s.final_return:.1f}, {s.env_steps} env steps, "
              f"time to stop (sum P_k) {s.time_to_stop_s:.1f}s, wall {s.wall_time_s:.1f}s, "
              f"cost ${s.cost_usd:.5f} (learner on {s.learner_device}; server cluster "
              f"${s.server_cluster_cost_usd:.3f} with its start-up, "
              f"${s.server_cluster_cost_no_startup_usd:.3f} without)")
    if summaries:
        print(f"\nMLflow store: {summaries[0].tracking_uri}\n"
              f"  look: mlflow ui --backend-store-uri {summaries[0].tracking_uri} "
              "--host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000")
    return 0


if __name__ == "__main__":
    sys.exit(main())

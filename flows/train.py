"""The `train` flow: rounds of schedule -> rollout (mapped I_k wide) -> update until J, B or K.

Each round is a `train-round` subflow (flows/rounds.py). Run it with embedded defaults:

    python -m flows.train                      # CartPole-v1, Fixed(8), temporary local Prefect API
    python -m flows.train --env CartPole-v1 --scheduler adapt --seed 1

Its parameters are a Workload's (what to train) and a Placement's (where), flat, as the Prefect
UI's form and `prefect deployment run -p` show them (models/run/workload.py), plus the run's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import get_run_logger
from prefect.runtime import flow_run as flow_run_context

from flows import prefect_patches
from flows.cli import flow_arguments, given_arguments, quiet_console, run_per_seed, with_parameter_docs
from flows.run_setup import RunSetup, check_against_run, prepare_run
from flows.served_flow import served_flow
from flows.tracking import RunTracker, tracked_run
from models.run.config import SYSTEM_CLUSTER, RunConfig
from models.run.records import RunSummary
from models.run.workload import Overrides, Placement, Workload
from models.scheduling.learned_spec import is_learned_spec, parse_learned_spec

if TYPE_CHECKING:
    from models.run.checkpoint import RunCheckpoint
    from models.run.journal import RoundJournal
    from models.run.session import TrainingSession
    from tasks.backends import ActorBackend
# What a run needs (torch, the actor backends, artifacts with matplotlib and MLflow) loads when a
# run starts, in `train`'s body: the command line checks its input first, in about 2 s, not 6.

PARAMETER_DOCS = {
    "scheduler": "fixed:N, max, adapt, increase:N[:step[:every[:rounds]]], decrease:N[:step[:every[:rounds]]], switch:A:B:P "
                 "(A actors until R_k reaches P% of J, then B) or learned[:<path, packaged name or MLflow "
                 "URI>][:sample]; an MLflow URI is downloaded from this run's tracking_uri (into "
                 "checkpoint_dir/scheduler-artifacts).",
    "tracking_uri": "MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.",
    "experiment": "MLflow experiment name; default minionsrl/<env>.",
    "checkpoint_dir": "where per-round checkpoints go; default ./checkpoints.",
    "resume": "a run's checkpoint (checkpoints/<run id>/latest.pt): continue it after its last finished "
              "round, in the same MLflow run, with its stored configuration; only max_rounds, budget_usd, "
              "where it runs, actor_timeout_s, actor_retries, quorum, evaluation and learner_device may be "
              "changed (recorded as the MLflow tag minionsrl.resume_changes); any other differing value is "
              "refused.",
    "preset": "a variant of the env's preset to fill the unset parameters from, e.g. locomotion "
              "(Hopper-v5, HalfCheetah-v5: a J that needs forward motion and its step budget); default "
              "the env's own preset (the paper's J).",
}


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


@served_flow(name="train", flow_run_name=train_run_name, persist_result=False, validate_parameters=True)
@with_parameter_docs(Workload, Placement, RunConfig, **PARAMETER_DOCS)
def train(
    env: str | None = None, scheduler: str | None = None, target_return: float | None = None,
    budget_usd: float | None = None, max_rounds: int | None = None, max_env_steps: int | None = None,
    i_max: int | None = None, fragment: int | None = None, envs_per_actor: int | None = None, carry_episodes: bool | None = None,
    env_backend: str | None = None, seed: int | None = None, scheduler_seed: int | None = None, backend: str | None = None,
    ppo: Overrides | None = None, actor_memory_gb: float | None = None, learner_device: str | None = None,
    prices_file: str | None = None, tracking_uri: str | None = None, experiment: str | None = None,
    checkpoint_dir: str | None = None, local_workers: int | None = None, parent_run_id: str | None = None,
    actor_timeout_s: float | None = None, actor_retries: int | None = None, quorum: float | None = None,
    eval_every: int | None = None, eval_episodes: int | None = None, stop_at_eval: bool | None = None,
    resume: str | None = None, warm_actors: int | None = None, backend_options: Overrides | None = None,
    register_model: str | None = None, log_model: bool | None = None, system: str | None = None,
    bill_cluster_startup: bool | None = None, preset: str | None = None, learner_billing: str | None = None,
) -> RunSummary:
    """Train PPO on `env` with per-round actor counts chosen by `scheduler`.

    Every parameter left unset comes from the workload's preset (models/data/presets.toml), then
    from models/run/config.py RunConfig's defaults; all of them become one RunConfig.
    """
    prefect_patches.install()  # idempotent: the CLI has, a caller from Python may not have
    setup = prepare_run(given_arguments(locals(), exclude=("resume",)), resume)
    cfg = setup.config
    from tasks.backends import make_backend
    with tracked_run(cfg.tracking_uri) as tracker:  # the store checked before any actor starts
        if setup.checkpoint is not None:
            tracker.require_run(setup.checkpoint.progress["run_id"])
        # a server cluster's actor processes run on this machine's cores, one actor per core at a time
        actor_backend = make_backend(cfg.backend, cfg.env_id, max_running=os.cpu_count() if cfg.cluster else None)
        try:
            return run_training(setup, tracker, actor_backend, Path(resume).resolve() if resume else None)
        finally:
            actor_backend.close()


def run_training(setup: RunSetup, tracker: RunTracker, actor_backend: ActorBackend, resumed: Path | None
                 ) -> RunSummary:
    """Open the session and the run, play the rounds, then the policy, the summary and its record."""
    from flows.artifacts import RunArtifacts
    from flows.rounds import run_rounds, startup_objects_frozen
    from models.run.journal import RoundJournal
    from models.run.session import TrainingSession

    cfg, logger = setup.config, get_run_logger()
    # Start-up in parallel: actor processes spawn (make_backend) while MLflow opens its store (a
    # thread) and the learner is built here; measured ~4 s + 2.6 s + 2.5 s one after the other.
    with ThreadPoolExecutor(1) as opener:
        opening = opener.submit(tracker.open)
        try:
            session = TrainingSession(cfg)
        finally:
            opening.result()
    start_tracking(session, tracker, setup)
    artifacts = RunArtifacts(session, tracker, logger)  # Prefect artifacts, MLflow plots and model
    try:
        ckpt_path = resumed or Path(cfg.checkpoint_dir) / str(session.run_id) / "latest.pt"
        journal = RoundJournal(ckpt_path.with_name("journal.jsonl"))
        if setup.checkpoint is not None:
            settle_crashed_round(session, setup.checkpoint, tracker, journal, ckpt_path)
        await_actors(session, actor_backend)
        with startup_objects_frozen():  # its collections count as start-up, not as a round's
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
        record_summary(session, summary, tracker)
        artifacts.finished(summary, model, plots=cfg.log_model)
    except BaseException as exc:
        artifacts.failed(exc)
        raise
    logger.info("stopped: %s after %d rounds; MLflow run %s in %s", session.stop_reason,
                session.round_index, session.run_id, tracker.tracking_uri)
    return summary


def record_summary(session: TrainingSession, summary: RunSummary, tracker: RunTracker) -> None:
    """The run's end in MLflow: why it stopped, on which device, and its summary/... figures."""
    tracker.set_tags({"minionsrl.stop_reason": str(session.stop_reason),
                      "minionsrl.stop_detail": summary.stop_detail,
                      "minionsrl.learner_device": summary.learner_device})
    if session.cfg.cluster:  # its actors were these processes in every round
        tracker.set_tags({"minionsrl.worker_pids": json.dumps(session.progress.worker_pids)})
    tracker.log_metrics({"summary/target_reached": float(summary.target_reached),
                         "summary/wall_time_s": summary.wall_time_s,
                         "summary/cloud_time_s": summary.cloud_time_s,
                         "summary/time_to_stop_s": summary.time_to_stop_s,
                         "summary/cost_usd": summary.cost_usd,
                         "summary/actors_usd": summary.actors_cost_usd,
                         "summary/learner_usd": summary.learner_cost_usd,
                         "summary/startup_usd": summary.startup_cost_usd,
                         "summary/lost_attempts_usd": session.progress.lost_usd,
                         "summary/projected_aci_startup_usd": summary.projected_aci_startup_usd,
                         "summary/server_cluster_cost_usd": summary.server_cluster_cost_usd,
                         "summary/server_cluster_cost_no_startup_usd": summary.server_cluster_cost_no_startup_usd,
                         **({} if session.cfg.cluster else {  # the learner both ways, whichever was billed
                             "summary/learner_per_round_usd": summary.learner_per_round_cost_usd,
                             "summary/learner_resident_usd": summary.learner_resident_cost_usd,
                             "summary/cost_per_round_learner_usd": summary.cost_with_learner_usd("per-round"),
                             "summary/cost_resident_learner_usd": summary.cost_with_learner_usd("resident")})},
                        step=session.round_index)


def start_tracking(session: TrainingSession, tracker: RunTracker, setup: RunSetup) -> None:
    """A new MLflow run with the configuration as params, or the resumed run reopened."""
    cfg = session.cfg
    this_flow_run = str(flow_run_context.id) if flow_run_context.id else None
    if setup.checkpoint is not None:
        where = f"checkpoint {setup.checkpoint_path}"
        session.load(setup.checkpoint, where)
        check_against_run(session.progress, tracker, str(session.run_id), where)  # before it is reopened
        mark_crashed(session.progress.flow_run_ids)
        if this_flow_run:
            session.progress.flow_run_ids.append(this_flow_run)
        tracker.resume(str(session.run_id))
        if setup.changes:
            tracker.set_tags({"minionsrl.resume_changes": json.dumps(setup.changes, default=str)})
        if this_flow_run:
            tracker.set_tags({"prefect.flow_run_id": this_flow_run})
        get_run_logger().info("resuming run %s at round %d", session.run_id, session.round_index)
        return
    if this_flow_run:
        session.progress.flow_run_ids.append(this_flow_run)
    system = f"{SYSTEM_CLUSTER}__" if cfg.cluster else ""  # its own row in the runs view
    tags = {"minionsrl.scheduler": session.scheduler.name, "minionsrl.backend": cfg.backend.name,
            "minionsrl.learner_device": session.learner_device, "minionsrl.system": cfg.system}
    if setup.scheduler_source:  # the MLflow URI the local copy came from
        tags["minionsrl.scheduler_source"] = setup.scheduler_source
    session.progress.run_id = tracker.start(cfg.experiment, f"{cfg.env_id}__{system}{session.scheduler.name}__{cfg.seed}",
                                            params=cfg.to_dict(), tags=tags, parent_run_id=cfg.parent_run_id)


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
    resume = args["resume"]
    status, summaries = run_per_seed(train, args, lambda given: prepare_run({k: v for k, v in given.items() if k != "resume"},
                                                                      resume), while_starting=warm_up)
    if status == 2:
        return status
    for s in summaries:
        print(f"seed {s.seed}: {s.stop_reason} after {s.rounds} rounds, wall {s.wall_time_s:.1f}s "
              f"(cloud clock {s.cloud_time_s:.1f}s: one core per actor, {100 * s.orchestration_share:.0f}% "
              f"of it orchestration; sum of P_k {s.time_to_stop_s:.1f}s), final return {s.final_return:.1f}, "
              f"{s.env_steps} env steps, cost ${s.cost_usd:.5f} (learner on {s.learner_device}; server "
              f"cluster ${s.server_cluster_cost_usd:.3f} with its start-up, "
              f"${s.server_cluster_cost_no_startup_usd:.3f} without)")
    if summaries:
        print(f"\nMLflow store: {summaries[0].tracking_uri}\n"
              f"  look: mlflow ui --backend-store-uri {summaries[0].tracking_uri} "
              "--host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000")
    return status


if __name__ == "__main__":
    sys.exit(main())

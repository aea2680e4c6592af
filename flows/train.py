"""The `train` flow: rounds of schedule -> rollout (mapped I_k wide) -> update until J, B or K.

Each round is a `train-round` subflow. Run it with embedded defaults:

    python -m flows.train                      # CartPole-v1, Fixed(8), temporary local Prefect API
    python -m flows.train --env CartPole-v1 --scheduler adapt --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# A fresh temporary server takes 20+ s to migrate its database on a busy 2-core machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from prefect import flow, get_run_logger, unmapped  # noqa: E402
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

from deployments.local_api import prefect_api  # noqa: E402
from flows.session import STOP_BUDGET, TrainingSession  # noqa: E402
from flows.tracking import RunTracker, project_root  # noqa: E402
from models.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from models.config import ConfigError, config_from_dict  # noqa: E402
from models.cost import PriceTable  # noqa: E402
from models.presets import resolve_run_config  # noqa: E402
from models.rollout import RolloutBatch  # noqa: E402
from models.scheduler_agent import is_mlflow_uri, parse_learned_spec  # noqa: E402
from tasks.backends import BACKENDS, ActorBackend, make_backend  # noqa: E402
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
    if spec is None or spec.strip().lower().split(":")[0] != "learned":
        return spec
    ref, mode = parse_learned_spec(spec)
    if not is_mlflow_uri(ref):
        return spec
    Path(dest_root).mkdir(parents=True, exist_ok=True)
    local = fetch_scheduler_checkpoint(ref, tracking_uri, tempfile.mkdtemp(prefix="scheduler-", dir=dest_root))
    return f"learned:{local}:{mode}"


class RoundFailedError(RuntimeError):
    """Fewer actors returned than the quorum needs; the last checkpoint is intact."""

    def __init__(self, message: str, round_index: int, returned: int, failed: int):
        super().__init__(message)
        self.round_index, self.returned, self.failed = round_index, returned, failed

    def __reduce__(self):  # Prefect may pickle a flow's exception
        return type(self), (str(self), self.round_index, self.returned, self.failed)


def round_flow(session: TrainingSession, backend: ActorBackend):
    """The `train-round` subflow, bound to this run's session and actor backend.

    A closure rather than a module-level flow with the session as a parameter: Prefect
    JSON-encodes flow parameters for the API, and walking a learner would cost more than a
    round. The run's visible parameters stay the round index and the actor count.
    """

    cfg = session.cfg

    @flow(name="train-round", flow_run_name="round-{round_index}-x{actors}", persist_result=False,
          validate_parameters=False, task_runner=ThreadPoolTaskRunner(max_workers=cfg.i_max))
    def train_round(round_index: int, actors: int):
        body_started = time.perf_counter()
        jobs = session.jobs(actors, session.learner.weights())
        results = rollout.map(unmapped(backend), jobs, timeout_s=unmapped(cfg.actor_timeout_s),
                              retries=unmapped(cfg.actor_retries)).result()
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
        stats = update(session.learner, batches, round_index)
        stats["time/round_body_s"] = time.perf_counter() - body_started
        return batches, [f.billed_s for f in failures], stats

    return train_round


@flow(name="train", persist_result=False, validate_parameters=True)
def train(
    env: str = "CartPole-v1",
    scheduler: str | None = None,
    target_return: float | None = None,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    i_max: int = 32,
    fragment: int | None = None,
    envs_per_actor: int | None = None,
    seed: int = 0,
    backend: str = "local",
    ppo: dict[str, Any] | None = None,
    actor_memory_gb: float | None = None,
    learner_device: str = "auto",
    prices_file: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    local_workers: int | None = None,
    parent_run_id: str | None = None,
    actor_timeout_s: float | None = None,
    actor_retries: int = 1,
    quorum: float = 0.75,
    eval_every: int = 0,
    eval_episodes: int = 5,
    resume: str | None = None,
    warm_actors: int = 0,
    backend_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train PPO on `env` with per-round actor counts chosen by `scheduler`.

    Args:
        env: gymnasium env id; its preset (models/data/presets.toml) fills what is left unset.
        scheduler: fixed:N, max, adapt, increase:N[:step[:every]], decrease:N[:step[:every]] or
            learned[:<path, packaged name or MLflow URI>][:sample]; an MLflow URI is downloaded
            from this run's tracking_uri (into checkpoint_dir/scheduler-artifacts).
        target_return: J; training stops once a round's mean episode return reaches it.
        budget_usd: B; a hard limit: a round the last round's cost says would overspend is not run.
        max_rounds: K; at most this many rounds.
        i_max: largest actor count a scheduler may choose.
        fragment: env steps each actor samples per round.
        envs_per_actor: environments one actor steps in lockstep (divides fragment).
        seed: run seed; actor i of round k uses a seed derived from (seed, k, i).
        backend: where actors run: local (warm processes on this machine), work-pool (each
            actor its own flow run on a Prefect work pool: process, ACI, ...) or dask.
        ppo: overrides of PPO hyperparameters, e.g. {"learning_rate": 0.001}.
        actor_memory_gb: memory billed per actor.
        learner_device: auto (CUDA when present), cpu or cuda.
        prices_file: TOML price table overriding the packaged one.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment name; default minionsrl/<env>.
        checkpoint_dir: where per-round checkpoints go; default ./checkpoints.
        local_workers: worker processes of the local backend; default one per core.
        parent_run_id: MLflow run to nest this run under (sweeps, scheduler training).
        actor_timeout_s: an actor running longer is killed and retried (default 300 s).
        actor_retries: extra attempts for a crashed or timed-out actor.
        quorum: fraction of a round's actors whose batches must arrive for the round to go on.
        eval_every: every this many rounds (and at the end), evaluate the policy's deterministic
            actions on whole episodes, logged as eval/...; 0 turns it off.
        eval_episodes: episodes per evaluation.
        resume: path of a run's checkpoint (checkpoints/<run id>/latest.pt) to continue a
            crashed or stopped run from its last finished round, in the same MLflow run; the
            run's own configuration is used and the other parameters are ignored.
        warm_actors: work-pool backend: warm actor servers to keep between rounds (0 = every
            actor is a cold flow run).
        backend_options: further options of the backend (see tasks/backends.py make_backend),
            e.g. {"actor_deployment": "actor/aci-actor", "dask_address": "tcp://host:8786"}.
    """
    if eval_every < 0 or eval_episodes < 1:
        raise ConfigError("eval_every must be >= 0 and eval_episodes >= 1")
    resume_state = load_checkpoint(resume) if resume else None
    tracker = RunTracker(tracking_uri)
    ckpt_root = Path(checkpoint_dir or project_root() / "checkpoints")
    scheduler_source = scheduler
    if resume_state is not None:  # the run's own configuration, not this call's parameters
        cfg = config_from_dict(resume_state["config"])
    else:
        # A learned scheduler named by MLflow URI comes from this run's store (tracking_uri).
        scheduler = localise_scheduler_spec(scheduler, tracker.tracking_uri,
                                            ckpt_root / "scheduler-artifacts")
        cfg = resolve_run_config(env, backends=BACKENDS, scheduler=scheduler,
                                 target_return=target_return, budget_usd=budget_usd,
                                 max_rounds=max_rounds, i_max=i_max, fragment=fragment,
                                 envs_per_actor=envs_per_actor, seed=seed, backend=backend,
                                 ppo=ppo, actor_memory_gb=actor_memory_gb,
                                 learner_device=learner_device, actor_timeout_s=actor_timeout_s,
                                 actor_retries=actor_retries, quorum=quorum)
    prices = PriceTable.load(prices_file).with_actor_memory(cfg.actor_memory_gb)
    logger = get_run_logger()
    # Start-up in parallel: actor processes spawn while MLflow opens its store (a thread) and
    # the learner is built here; measured ~4 s + 2.6 s + 2.5 s one after the other.
    try:
        actor_backend = make_backend(cfg.backend, cfg.env_id, local_workers,
                                     **({"warm_actors": warm_actors} if warm_actors else {}),
                                     **(backend_options or {}))
    except TypeError as exc:  # an option this backend does not take
        raise ConfigError(f"backend_options for {cfg.backend!r}: {exc}") from exc
    status = "FAILED"
    try:
        with ThreadPoolExecutor(1) as opener:
            opening = opener.submit(tracker.open)
            try:
                session = TrainingSession(cfg, prices)
            finally:
                opening.result()
    except BaseException:
        actor_backend.close()
        raise
    if resume_state is not None:
        session.load_state(resume_state)
        tracker.start("", "", {}, run_id=session.run_id)
        logger.info("resuming run %s at round %d", session.run_id, session.round_index)
    else:
        run_name = f"{cfg.env_id}__{session.scheduler.name}__{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        tags = {"minionsrl.scheduler": session.scheduler.name, "minionsrl.backend": cfg.backend}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        if scheduler_source != scheduler:  # the MLflow URI the local copy came from
            tags["minionsrl.scheduler_source"] = str(scheduler_source).strip()
        session.run_id = tracker.start(experiment or f"minionsrl/{cfg.env_id}", run_name,
                                       params=run_params(cfg, prices), tags=tags)
    ckpt_path = Path(resume).resolve() if resume else ckpt_root / session.run_id / "latest.pt"
    try:
        run_round = round_flow(session, actor_backend)
        # Round subflows skip heartbeats: each costs up to 1 s at flow exit (the heartbeat
        # thread sleeps in 1 s steps before join). The parent `train` run keeps its own.
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            while session.stop_reason is None:
                k = session.round_index
                actors = schedule(session.scheduler, session.state())
                if not session.next_round_fits_budget(actors):
                    session.stop_reason = STOP_BUDGET
                    logger.info("round %d not started: its estimated cost exceeds the $%.6f left",
                                k, session.budget_left_usd)
                    break
                started = time.perf_counter()
                try:
                    batches, failed_billed_s, stats = run_round(round_index=k, actors=actors)
                except RoundFailedError as exc:  # the failures still count, in MLflow too
                    tracker.log_metrics({"rollout/actor_failures": float(exc.failed),
                                         "rollout/batches": float(exc.returned)}, step=k)
                    raise
                metrics = session.record(batches, stats, time.perf_counter() - started,
                                         failed_billed_s)
                if eval_every and (session.round_index % eval_every == 0 or session.stop_reason):
                    metrics.update(evaluate(session, eval_episodes))
                tracker.log_metrics(metrics, step=k)
                session.save(ckpt_path)
                logger.info("round %d: %d actors, return %.1f, P_k %.2fs, wall %.2fs, $%.6f",
                            k, actors, metrics["rollout/ep_return_mean"], metrics["time/round_s"],
                            metrics["time/round_wall_s"], metrics["cost/round_usd"])
        final = save_checkpoint(ckpt_path.with_name("final_policy.pt"), session.policy_artifact())
        tracker.log_artifact(final, "policy")
        summary = session.summary()
        tracker.set_tags({"minionsrl.stop_reason": str(session.stop_reason)})
        tracker.log_metrics({"summary/target_reached": float(summary["target_reached"]),
                             "summary/time_to_stop_s": summary["time_to_stop_s"],
                             "summary/cost_usd": summary["cost_usd"],
                             "summary/server_cluster_cost_usd": summary["server_cluster_cost_usd"]},
                            step=session.round_index)
        status = "FINISHED"
        logger.info("stopped: %s after %d rounds; MLflow run %s in %s", session.stop_reason,
                    session.round_index, session.run_id, tracker.tracking_uri)
        summary["tracking_uri"] = tracker.tracking_uri
        summary["checkpoint"] = str(ckpt_path)
        return summary
    finally:
        actor_backend.close()
        tracker.finish(status)


def run_params(cfg, prices: PriceTable) -> dict[str, Any]:
    import dataclasses

    params = dataclasses.asdict(cfg)
    params["prices"] = {"source": prices.source, "actor": dataclasses.asdict(prices.actor),
                        "learner": dataclasses.asdict(prices.learner),
                        "server_per_hour": prices.server_per_s * 3600}
    return params


def warm_up() -> None:
    """One-off imports the first training would otherwise pay for (MLflow's SQL store, torch's
    optimiser machinery: ~1.4 s each measured here), done while the temporary API starts."""
    import torch
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train PPO with MinionsRL on Prefect.")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--scheduler")
    parser.add_argument("--target-return", type=float)
    parser.add_argument("--budget-usd", type=float)
    parser.add_argument("--max-rounds", type=int)
    parser.add_argument("--i-max", type=int, default=32)
    parser.add_argument("--fragment", type=int)
    parser.add_argument("--envs-per-actor", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="*", help="run one training per seed")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--ppo", type=json.loads, help='JSON overrides, e.g. \'{"learning_rate": 0.001}\'')
    parser.add_argument("--learner-device", default="auto")
    parser.add_argument("--prices-file")
    parser.add_argument("--tracking-uri")
    args = parser.parse_args(argv)
    summaries = []
    with prefect_api(while_starting=warm_up):
        for seed in args.seeds or [args.seed]:
            summaries.append(train(env=args.env, scheduler=args.scheduler,
                                   target_return=args.target_return, budget_usd=args.budget_usd,
                                   max_rounds=args.max_rounds, i_max=args.i_max,
                                   fragment=args.fragment, envs_per_actor=args.envs_per_actor,
                                   seed=seed, backend=args.backend, ppo=args.ppo,
                                   learner_device=args.learner_device,
                                   prices_file=args.prices_file, tracking_uri=args.tracking_uri))
    for s in summaries:
        print(f"seed {s['seed']}: {s['stop_reason']} after {s['rounds']} rounds, "
              f"final return {s['final_return']:.1f}, {s['env_steps']} env steps, "
              f"time to stop (sum P_k) {s['time_to_stop_s']:.1f}s, wall {s['wall_time_s']:.1f}s, "
              f"cost ${s['cost_usd']:.5f} (server cluster ${s['server_cluster_cost_usd']:.3f})")
    if summaries:
        print(f"\nMLflow store: {summaries[0]['tracking_uri']}\n"
              f"  look: mlflow ui --backend-store-uri {summaries[0]['tracking_uri']} "
              "--host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000")
    return 0


if __name__ == "__main__":
    sys.exit(main())

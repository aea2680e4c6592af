"""The round: the `train-round` subflow (rollout mapped I_k wide, then update) and the round loop
around it (schedule, admit against the budget, run the round, record, checkpoint, log).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from pathlib import Path

from prefect import flow, get_run_logger, unmapped
from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from flows import interrupts
from flows.prefect_patches import lean_subflow
from flows.prefect_patches.lean_subflow import lean_start
from flows.prefect_patches.shared_task_runner import SharedThreadPoolTaskRunner, results_of
from flows.tracking import RunTracker
from models.report.slow_server import round_orchestration_s, slow_server_warning
from models.rl.rollout import RolloutBatch
from models.run.journal import RoundJournal
from models.run.session import TrainingSession
from tasks.backends import ActorBackend
from tasks.chaos import chaos_point
from tasks.rounds import ActorFailure, evaluate, rollout, schedule, update


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
                                         retries=unmapped(cfg.actor_retries), journal=unmapped(journal)),
                             check=interrupts.check)  # a Ctrl-C abandons the round here
        # a Ctrl-C closes the pool, and its actors may return as failures before results_of's check
        # sees it: the user's stop, not a failed round
        interrupts.check()
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
        stats = update(session.learner, batches, round_index, journal, session.progress.env_steps)
        stats["time/round_body_s"] = time.perf_counter() - body_started
        return batches, [f.billed_s for f in failures], stats

    return lean_start(train_round)  # 3 API calls a round instead of 8 (flows/prefect_patches/lean_subflow.py)


def _record_round_states(logger):
    """An exit callback: wait for the rounds' Completed states (briefly when the loop was stopped
    by an exception, a Ctrl-C among them: an unreachable API must not hold the user a minute)."""
    def record(exc_type, exc, tb) -> bool:
        for problem in lean_subflow.flush(timeout_s=5.0 if exc_type is not None else 60.0):
            logger.warning("%s", problem)
        return False
    return record


@contextlib.contextmanager
def startup_objects_frozen():
    """The process's start-up objects (~680k on Humanoid: modules, Prefect, MLflow, torch) left out of
    the collector while the rounds run, so that the rounds' cyclic garbage is collected soon and
    cheaply; by default a full collection waits for a quarter as many new survivors (Humanoid at 8
    actors: 2.3 MB a round of growth, 0.5 frozen; BENCHMARKS "Memory over a run"). Unfrozen after, so
    a later run in this process can free them."""
    gc.collect()
    gc.freeze()
    gc.collect()  # an empty oldest generation: full collections now scale with the rounds' objects
    try:
        yield
    finally:
        gc.unfreeze()


def run_rounds(session: TrainingSession, backend: ActorBackend, tracker: RunTracker, ckpt_path: Path,
               journal: RoundJournal, logger, on_round=None) -> None:
    """The round loop: schedule, admit (budget), run the round subflow, record, checkpoint, log.

    The checkpoint is written before the round's MLflow record and holds it, so a crash at any
    point loses no round and logs none twice (settle_crashed_round); the journal bills a round
    attempt that a crash cut short. on_round(session) runs after each recorded round."""
    cycle_started = time.perf_counter()  # a round's cycle: from the end of the one before (or this call)
    cfg = session.cfg
    task_runner = SharedThreadPoolTaskRunner(max_workers=cfg.i_max)  # its threads serve every round
    run_round = round_flow(session, backend, journal, task_runner)
    warned_no_episodes = False
    # Round subflows skip heartbeats: each costs up to 1 s at flow exit (the heartbeat
    # thread sleeps in 1 s steps before join). The parent `train` run keeps its own.
    with contextlib.ExitStack() as stack:
        stack.callback(task_runner.close)
        stack.push(_record_round_states(logger))  # the rounds' Completed states, sent in the background
        stack.enter_context(temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        # a Ctrl-C closes the backend (the round in flight ends) and is raised at the loop's checks
        stack.enter_context(interrupts.deferred(abandon=backend.close))
        while session.stop_reason is None:
            interrupts.check()
            k = session.round_index
            actors = schedule(session.scheduler, session.state())
            interrupts.check()
            if not session.admit_round(actors):
                logger.info("stopped by the %s", session.progress.stop_detail)
                break
            chaos_point("round_start", k)
            journal.begin(k, actors)
            started = time.perf_counter()
            try:
                batches, failed_billed_s, stats = run_round(round_index=k, actors=actors)
            except RoundFailedError as exc:  # the failures still count, in MLflow too
                interrupts.check()  # actors closed by a Ctrl-C: the user's stop, not a failure
                tracker.log_metrics({"rollout/actor_failures": float(exc.failed),
                                     "rollout/batches": float(exc.returned)}, step=k)
                raise
            chaos_point("round_work", k)
            round_wall_s = time.perf_counter() - started
            metrics = session.record(batches, stats, round_wall_s, failed_billed_s,
                                     warm_idle_s=backend.idle_billed_s(), pool_startup_s=backend.take_startup_s(),
                                     outside_s=time.perf_counter() - cycle_started - round_wall_s)
            cycle_started = time.perf_counter()  # what follows (evaluation, checkpoint, MLflow) is the next's
            if cfg.eval_every and (session.round_index % cfg.eval_every == 0 or session.stop_reason):
                metrics.update(evaluate(session, cfg.eval_episodes))
                session.record_evaluation(metrics)
            chaos_point("recorded", k)
            session.save(ckpt_path, metrics)
            chaos_point("saved", k)
            tracker.log_metrics(metrics, step=k)
            chaos_point("logged", k)
            # "round k/K (p%)" is the terminal's progress bar: how far the run is towards K rounds or S env steps
            logger.info("round %d/%d (%d%%): %d actors, return %.1f (J %g), P_k %.2fs, wall %.2fs, "
                        "$%.6f ($%.6f of B left)", k, cfg.max_rounds,
                        100 * session.progress.done_fraction(cfg.max_rounds, cfg.max_env_steps),
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
            slow = slow_server_warning(k, round_orchestration_s(metrics["time/round_cycle_wall_s"],
                                       metrics["time/actor_busy_s"], metrics["time/learner_s"]),
                                       metrics["time/round_cycle_wall_s"], PREFECT_API_URL.value())
            if slow:  # once, at round 1: the server, not the training, sets the pace
                logger.warning(slow)
                tracker.set_tags({"minionsrl.warning.server": slow})
    # the last round's writes, the stop, and the rounds' Completed states flushed on the way out
    session.add_orchestration(time.perf_counter() - cycle_started)

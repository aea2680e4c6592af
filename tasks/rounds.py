"""The three Prefect tasks of a round. Thin adapters: the logic lives in models/.

Tuned for a hot loop: no input hashing for caching (hashing a round's batches cost 0.15 s),
no result persistence.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from models.rl.evaluation import evaluate_policy
from models.rl.ppo import Learner
from models.rl.rollout import ActorJob, RolloutBatch
from models.rl.timings import ActorPhases
from models.run.journal import RoundJournal
from models.scheduling.schedulers import RoundState, Scheduler
from tasks.backends import ActorBackend, ActorError
from tasks.chaos import chaos_point

_FAST = {"cache_policy": NO_CACHE, "persist_result": False, "log_prints": False}


@dataclass(frozen=True)
class ActorFailure:
    """An actor that failed every attempt; its billed seconds still count as cost."""

    actor_index: int
    attempts: int
    billed_s: float
    timed_out: bool
    error: str


@task(name="schedule", task_run_name="schedule-r{state.round_index}", **_FAST)
def schedule(scheduler: Scheduler, state: RoundState) -> int:
    """Choose the number of actors I_k for the coming round."""
    return scheduler.choose(state)


@task(name="rollout", task_run_name="rollout-r{job.round_index}-a{job.actor_index}", **_FAST)
def rollout(backend: ActorBackend, job: ActorJob, timeout_s: float | None = None,
            retries: int = 1, journal: RoundJournal | None = None) -> RolloutBatch | ActorFailure:
    """One actor: sample a fragment with the round's weights on the chosen backend.

    A crashed or timed-out actor is retried here rather than with Prefect's task retries, so
    that the billed time of every attempt is kept and a final failure is a value the round
    can count against its quorum instead of an exception that fails the round.
    """
    billed, timed_out, error = 0.0, False, ""
    for attempt in range(1, retries + 2):
        try:
            batch = backend.run(job, timeout_s)
        except ActorError as exc:
            billed += exc.billed_s
            timed_out, error = exc.timed_out, str(exc)
            get_run_logger().warning("actor %d of round %d failed (attempt %d of %d): %s",
                                     job.actor_index, job.round_index, attempt, retries + 1, exc)
            continue
        batch.timings.failed_attempts_billed_s = billed
        batch.timings.attempts = attempt
        if journal is not None:
            journal.actor_billed(ActorPhases.of(batch.timings).duration_s + billed)
        chaos_point("actor_returned", job.round_index)
        return batch
    if journal is not None:
        journal.actor_billed(billed)
    return ActorFailure(job.actor_index, retries + 1, billed, timed_out, error)


@task(name="evaluate", task_run_name="evaluate-r{session.round_index}", **_FAST)
def evaluate(session, episodes: int) -> dict[str, float]:
    """Deterministic evaluation of the current policy on whole episodes, as eval/... metrics
    (return; for MuJoCo locomotion envs also how far the body moved forward)."""
    learner = session.learner
    return evaluate_policy(learner.policy_on_cpu(), session.cfg.env_id, episodes,
                           seed=10_000 + session.round_index, obs_rms=learner.obs_rms).metrics()


@task(name="update", task_run_name="update-r{round_index}", **_FAST)
def update(learner: Learner, batches: list[RolloutBatch], round_index: int,
           journal: RoundJournal | None = None, env_steps: int = 0) -> dict[str, float]:
    """The learner: GAE and PPO epochs on all of the round's fragments (GPU when present);
    env_steps: the run's before this round."""
    stats = learner.update(batches, round_index, env_steps)
    if journal is not None:
        journal.learner_done(stats["time/learner_s"])
    chaos_point("update_done", round_index)
    return stats

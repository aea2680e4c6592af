"""The three Prefect tasks of a round. Thin adapters: the logic lives in models/.

Tuned for a hot loop (PLATFORM-NOTES): no input hashing for caching, no result persistence.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from models.ppo import Learner
from models.rollout import ActorJob, RolloutBatch
from models.schedulers import RoundState, Scheduler
from tasks.backends import ActorBackend

_FAST = {"cache_policy": NO_CACHE, "persist_result": False, "log_prints": False}


@task(name="schedule", **_FAST)
def schedule(scheduler: Scheduler, state: RoundState) -> int:
    """Choose the number of actors I_k for the coming round."""
    return scheduler.choose(state)


@task(name="rollout", task_run_name="rollout-r{job.round_index}-a{job.actor_index}", **_FAST)
def rollout(backend: ActorBackend, job: ActorJob) -> RolloutBatch:
    """One actor: sample a fragment with the round's weights on the chosen backend."""
    return backend.run(job)


@task(name="update", task_run_name="update-r{round_index}", **_FAST)
def update(learner: Learner, batches: list[RolloutBatch], round_index: int) -> dict[str, float]:
    """The learner: GAE and PPO epochs on all of the round's fragments (GPU when present)."""
    return learner.update(batches, round_index)

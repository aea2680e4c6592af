"""Where actors run. Every backend takes an ActorJob and hands back a RolloutBatch.

The `backend` parameter of the train flow picks one by name; the round loop never changes.
"""

from __future__ import annotations

import time
from typing import Protocol

from models.rollout import ActorJob, RolloutBatch
from tasks.local_pool import LocalActorPool


class ActorBackend(Protocol):
    name: str

    def run(self, job: ActorJob) -> RolloutBatch:
        """Run one actor to completion (blocking) and return its batch with timings."""

    def close(self) -> None: ...


class LocalBackend:
    """Warm worker processes on this machine, one core each."""

    name = "local"

    def __init__(self, workers: int | None = None, warm_env_id: str | None = None):
        self.pool = LocalActorPool(workers, warm_env_id)

    def run(self, job: ActorJob) -> RolloutBatch:
        dispatched_at = time.time()
        batch = self.pool.submit(job).result()
        batch.timings["dispatched_at"] = dispatched_at
        batch.timings["received_at"] = time.time()
        return batch

    def close(self) -> None:
        self.pool.close()


BACKENDS = ("local",)


def make_backend(name: str, env_id: str, workers: int | None = None) -> ActorBackend:
    if name == "local":
        return LocalBackend(workers, warm_env_id=env_id)
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")

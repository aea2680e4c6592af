"""Where actors run. Every backend takes an ActorJob and hands back a RolloutBatch.

The run's typed backend spec (models/run/config.py) picks one; the round loop never changes:

- local: warm worker processes on this machine (tasks/local_pool.py);
- work-pool: each actor is its own flow run on a Prefect work pool (process here, Azure
  Container Instances in the cloud), weights out and batches back through a storage block,
  with an optional pool of warm actor servers (tasks/workpool/, flows/actor.py);
- dask: actors as tasks on a Dask cluster, a LocalCluster or one at an address
  (tasks/dask_backend.py).

Every backend sets batch.timings.dispatched_at (hand-off) and .received_at (batch back) and
.cold_start (the actor's process had to boot for it); the actor itself records the rest of
its `ActorTimings` (models/rl/timings.py).
"""

from __future__ import annotations

import time
from typing import Protocol

from models.rl.rollout import ActorJob, RolloutBatch
from models.run.config import BackendSpec, DaskBackendSpec, LocalBackendSpec, WorkPoolBackendSpec
from tasks.errors import ActorError
from tasks.local_pool import LocalActorPool

__all__ = ["ActorBackend", "ActorError", "LocalBackend", "make_backend"]


class ActorBackend(Protocol):
    name: str

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        """Run one actor to completion (blocking) and return its batch with timings.

        Raises ActorError when the actor dies or exceeds timeout_s; the actor is then gone
        (killed), not left running.
        """

    def idle_billed_s(self) -> float:
        """Seconds of kept-warm actor capacity that sat idle since the last call and is billed
        (a work pool's warm servers); 0 where nothing idle is billed."""

    def await_prewarm(self) -> None:
        """Block until the actors started before the first round are ready (once)."""

    def take_startup_s(self) -> float:
        """Actor start-up seconds the backend incurred outside any actor's billed time since
        the last call (worker processes booted before a job reached them); billed as start-up."""

    def close(self) -> None: ...


class LocalBackend:
    """Warm worker processes on this machine, one core each."""

    name = "local"

    def __init__(self, workers: int | None = None, warm_env_id: str | None = None,
                 prewarm: bool = True, max_running: int | None = None):
        self.pool = LocalActorPool(workers, warm_env_id, prewarm=prewarm, max_running=max_running)

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        self.pool.wait_ready()  # once, before the clock starts: pre-warming is not this actor's
        dispatched_at = time.time()
        batch = self.pool.run(job, timeout_s)
        batch.timings.dispatched_at = dispatched_at
        batch.timings.received_at = time.time()
        return batch

    def idle_billed_s(self) -> float:
        # The worker processes stand in for per-round serverless actors: their idle time is
        # this machine's, not a bill (the run is priced as if each actor ran fresh).
        return 0.0

    def await_prewarm(self) -> None:
        self.pool.wait_ready()

    def take_startup_s(self) -> float:
        return self.pool.take_startup_s()

    def close(self) -> None:
        self.pool.close()


def make_backend(spec: BackendSpec, env_id: str, prewarm: bool = True,
                 max_running: int | None = None) -> ActorBackend:
    """The backend a run's typed spec (models/run/config.py) names, with its options.

    prewarm: start actor processes or servers before the first round and wait until ready.
    max_running: local backend: at most this many actors at once (a server cluster's pool,
    larger than this machine, runs on its cores).
    """
    if isinstance(spec, LocalBackendSpec):
        return LocalBackend(spec.workers, warm_env_id=env_id, prewarm=prewarm, max_running=max_running)
    if isinstance(spec, WorkPoolBackendSpec):
        from tasks.workpool import WorkPoolBackend

        return WorkPoolBackend(env_id, actor_deployment=spec.actor_deployment,
                               server_deployment=spec.server_deployment, storage_block=spec.storage_block,
                               warm_actors=spec.warm_actors, warm_subflows=spec.warm_subflows,
                               job_variables=spec.actor_job_variables, prewarm=prewarm)
    if isinstance(spec, DaskBackendSpec):
        from tasks.dask_backend import DaskBackend

        return DaskBackend(env_id, workers=spec.workers, address=spec.dask_address,
                           cluster_class=spec.dask_cluster_class, cluster_kwargs=spec.dask_cluster_kwargs,
                           prewarm=prewarm)
    raise TypeError(f"not a backend spec: {spec!r}")

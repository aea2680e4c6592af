"""Where actors run. Every backend takes an ActorJob and hands back a RolloutBatch.

The `backend` parameter of the train flow picks one by name; the round loop never changes:

- local: warm worker processes on this machine (tasks/local_pool.py);
- work-pool: each actor is its own flow run on a Prefect work pool (process here, Azure
  Container Instances in the cloud), weights out and batches back through a storage block,
  with an optional pool of warm actor servers (tasks/workpool/, flows/actor.py);
- dask: actors as tasks on a Dask cluster, a LocalCluster or one at an address
  (tasks/dask_backend.py).

Every backend sets batch.timings['dispatched_at'] (hand-off) and ['received_at'] (batch back)
and 'cold_start' (1.0 when the actor's process had to boot for it); the actor itself records
started_at, startup_s, weight_load_s, sampling_s and sampled_at (models/rollout.py).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from models.rollout import ActorJob, RolloutBatch
from tasks.errors import ActorError
from tasks.local_pool import LocalActorPool

__all__ = ["BACKENDS", "ActorBackend", "ActorError", "LocalBackend", "make_backend"]


class ActorBackend(Protocol):
    name: str

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        """Run one actor to completion (blocking) and return its batch with timings.

        Raises ActorError when the actor dies or exceeds timeout_s; the actor is then gone
        (killed), not left running.
        """

    def close(self) -> None: ...


class LocalBackend:
    """Warm worker processes on this machine, one core each."""

    name = "local"

    def __init__(self, workers: int | None = None, warm_env_id: str | None = None,
                 prewarm: bool = True):
        self.pool = LocalActorPool(workers, warm_env_id, prewarm=prewarm)

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        self.pool.wait_ready()  # once, before the clock starts: pre-warming is not this actor's
        dispatched_at = time.time()
        batch = self.pool.run(job, timeout_s)
        batch.timings["dispatched_at"] = dispatched_at
        batch.timings["received_at"] = time.time()
        return batch

    def close(self) -> None:
        self.pool.close()


BACKENDS = ("local", "work-pool", "dask")

DEFAULT_ACTOR_DEPLOYMENT = "actor/minionsrl-actor"
DEFAULT_SERVER_DEPLOYMENT = "actor-server/minionsrl-actor-server"
DEFAULT_STORAGE_BLOCK = "local-file-system/minionsrl-storage"


def make_backend(name: str, env_id: str, workers: int | None = None, *,
                 actor_deployment: str = DEFAULT_ACTOR_DEPLOYMENT,
                 server_deployment: str = DEFAULT_SERVER_DEPLOYMENT,
                 storage_block: str = DEFAULT_STORAGE_BLOCK,
                 warm_actors: int = 0,
                 warm_subflows: bool = False,
                 actor_job_variables: dict[str, Any] | None = None,
                 dask_address: str | None = None,
                 dask_cluster_class: str | None = None,
                 dask_cluster_kwargs: dict[str, Any] | None = None,
                 prewarm: bool = True) -> ActorBackend:
    """Build the backend called `name`.

    workers: local worker processes / Dask LocalCluster workers; default one per core.
    actor_deployment: 'flow/deployment' that runs one actor as its own flow run (work-pool);
        its work pool decides the infrastructure (process here, ACI in Azure).
    server_deployment: 'flow/deployment' of the long-lived warm actor server (work-pool).
    storage_block: slug of the block that carries weights out and batches back (work-pool);
        the default local-file-system block is created on first use.
    warm_actors: most warm actor servers to keep (work-pool); the pool follows the actor
        counts of the last rounds up to this; 0 = every actor is a cold flow run.
    warm_subflows: a warm server runs each job as an `actor` subflow (one flow run per actor in
        the UI) instead of inline in its own flow run; costs seconds per actor on SQLite.
    actor_job_variables: work-pool job variables per actor flow run, e.g. {"cpu": 1, "memory": 2}.
    dask_address: scheduler address of a running Dask cluster; None = a LocalCluster here.
    dask_cluster_class / dask_cluster_kwargs: another cluster class to start instead, by import
        path (e.g. "dask_cloudprovider.azure.AzureVMCluster"), as prefect-dask's runner takes it.
    prewarm: start actor processes / servers before the first round and wait until ready.
    """
    if name == "local":
        return LocalBackend(workers, warm_env_id=env_id, prewarm=prewarm)
    if name == "work-pool":
        from tasks.workpool import WorkPoolBackend

        return WorkPoolBackend(env_id, actor_deployment=actor_deployment,
                               server_deployment=server_deployment, storage_block=storage_block,
                               warm_actors=warm_actors, warm_subflows=warm_subflows,
                               job_variables=actor_job_variables, prewarm=prewarm)
    if name == "dask":
        from tasks.dask_backend import DaskBackend

        return DaskBackend(env_id, workers=workers, address=dask_address,
                           cluster_class=dask_cluster_class, cluster_kwargs=dask_cluster_kwargs,
                           prewarm=prewarm)
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")

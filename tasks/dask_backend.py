"""The `dask` backend: actors as tasks on a Dask cluster, for users who outgrow one machine.

A LocalCluster of single-threaded worker processes here, or any running cluster by scheduler
address, or a cluster class by import path with its kwargs (the forms prefect-dask's
DaskTaskRunner takes, e.g. "dask_cloudprovider.azure.AzureVMCluster").

Why plain `distributed` futures rather than running the rollout as a Prefect task on a
DaskTaskRunner: the round's `rollout` task (thread runner) already records each actor in
Prefect; a DaskTaskRunner would add a second Prefect task per actor, make every Dask worker
import Prefect and talk to the API, and serialise the task's whole context (measured here:
6.2 s to map 32 trivial tasks on a shared Dask cluster through the runner). Here the workers
import only models/ and this module, and a job is one `client.submit`.

Failures: the scheduler is told not to re-run a task whose worker died
(allowed-failures = 0), so a lost actor surfaces as ActorError at once and the round's own
retry/quorum logic decides; on a timeout the worker running the actor is restarted by its
nanny (the only way to stop a running Dask task), which kills it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid

from models.json_types import JSONObject
from models.rl.rollout import ActorJob, RolloutBatch
from tasks.errors import ActorError

_jobs_done = 0  # per worker process: the first actor in a process is a cold start


def _prewarm(env_id: str | None) -> int:
    """Run once in every worker: one torch thread, the env's modules imported and built."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    if env_id:
        from models.envs.batch import env_spaces

        env_spaces(env_id)
    return os.getpid()


def _actor(job: ActorJob) -> RolloutBatch:
    """The Dask task: one actor, in whichever worker process the scheduler picked."""
    global _jobs_done
    import torch

    from models.rl.rollout import run_actor

    cold = _jobs_done == 0
    torch.set_num_threads(1)
    batch = run_actor(job)
    _jobs_done += 1
    batch.timings.cold_start = cold
    batch.timings.worker_pid = os.getpid()
    batch.timings.sent_at = time.time()
    return batch


class DaskBackend:
    """Actors as Dask tasks (see module docstring).

    workers: LocalCluster worker processes (1 thread each); default one per core.
    address: scheduler address of a running cluster (no cluster is started then).
    cluster_class / cluster_kwargs: start this cluster class instead of a LocalCluster.
    prewarm: import torch and build the env in every worker before the first round.
    """

    name = "dask"

    def __init__(self, env_id: str, workers: int | None = None, address: str | None = None,
                 cluster_class: str | None = None, cluster_kwargs: JSONObject | None = None,
                 prewarm: bool = True):
        import dask
        from distributed import Client, LocalCluster

        # Must be set before the scheduler starts (a LocalCluster's runs in this process);
        # for a cluster at an address, set it in that scheduler's config.
        dask.config.set({"distributed.scheduler.allowed-failures": 0})
        self.cluster = None
        started = time.time()
        if address:
            self.client = Client(address)
        else:
            if cluster_class:
                from distributed.utils import import_term

                self.cluster = import_term(cluster_class)(**(cluster_kwargs or {}))
            else:
                kwargs = {"n_workers": workers or max(os.cpu_count() or 1, 1),
                          "threads_per_worker": 1, "processes": True,
                          "dashboard_address": None, "env": {"OMP_NUM_THREADS": "1"},
                          **(cluster_kwargs or {})}
                self.cluster = LocalCluster(**kwargs)
            self.client = Client(self.cluster)
        self.env_id = env_id
        if prewarm:
            self.client.wait_for_workers(1, timeout=180)
            self.client.run(_prewarm, env_id)
        # Workers of a cluster we started boot for this run: each bills that start-up once. A
        # cluster at an address is the user's, billed as theirs.
        self._unbilled_startup_s = (0.0 if address else
                                    (time.time() - started) * len(self.client.scheduler_info()["workers"]))

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        from distributed import TimeoutError as DaskTimeoutError

        dispatched_at = time.time()
        key = f"actor-r{job.round_index}-a{job.actor_index}-{uuid.uuid4().hex[:8]}"
        future = self.client.submit(_actor, job, key=key, pure=False)
        try:
            batch = future.result(timeout=timeout_s)
        except (DaskTimeoutError, TimeoutError):
            billed = time.time() - dispatched_at
            self._kill(key)
            future.cancel()
            raise ActorError(f"actor r{job.round_index}-a{job.actor_index} ran past its "
                             f"{timeout_s:.1f} s timeout on Dask; its worker was restarted",
                             billed_s=billed, timed_out=True) from None
        except Exception as exc:  # KilledWorker, CancelledError, or the actor's own error
            raise ActorError(f"actor r{job.round_index}-a{job.actor_index} failed on Dask: "
                             f"{type(exc).__name__}: {exc}",
                             billed_s=time.time() - dispatched_at) from None
        finally:
            future.release()
        t = batch.timings
        if t.cold_start:  # the worker imported torch and our modules for this job
            t.count_boot_as_startup(dispatched_at)
        t.dispatched_at = dispatched_at
        t.received_at = time.time()
        return batch

    def _kill(self, key: str) -> None:
        """Restart the worker running `key`: a running Dask task cannot be stopped otherwise.

        In the background: the nanny kills the process at once, but starting its replacement
        (imports) takes seconds, and the round need not wait for that.
        """
        try:
            processing = self.client.processing()
        except Exception:
            return
        workers = [w for w, keys in processing.items() if key in keys]
        if workers:
            threading.Thread(target=self._restart, args=(workers,), daemon=True).start()

    def _restart(self, workers: list[str]) -> None:
        with contextlib.suppress(Exception):
            self.client.restart_workers(workers, timeout=120)

    def idle_billed_s(self) -> float:
        return 0.0  # workers are the user's cluster: its bill is the cluster's, not per actor

    def await_prewarm(self) -> None:
        pass  # the constructor waited (prewarm)

    def take_startup_s(self) -> float:
        taken, self._unbilled_startup_s = self._unbilled_startup_s, 0.0
        return taken

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()

"""WorkPoolBackend: a round's `rollout` calls run(job); every actor is a flow run on a work pool.

The job (weights written once per round, one small envelope per actor) goes to the storage
block (tasks/workpool/protocol.py); the actor runs either on a warm server (warm_pool.py) or as
a cold flow run of the `actor/minionsrl-actor` deployment (launcher.py), which a worker of that
deployment's pool starts on its infrastructure (a process here, an ACI container group in
Azure); the actor writes its batch back to the block and run() reads it.

Failure handling: the monitor (monitor.py) reads the state of every watched flow run (cold
actors and warm servers) in one API call every `state_poll_s`; a run that ends without writing
its batch raises ActorError, and a run past its deadline is cancelled through Prefect (the
pool's worker kills the process / deletes the container group) and, for a warm server, replaced.
The actor also carries its deadline and ends its own process shortly after it, a backstop
against a lost cancellation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import time
from uuid import UUID

from models.rl.rollout import ActorJob, RolloutBatch
from tasks.errors import ActorError
from tasks.storage import BlockStore
from tasks.workpool import protocol
from tasks.workpool.launcher import JobVariables, Launcher, parent_task_run, settle_cancelling_later
from tasks.workpool.monitor import StateMonitor
from tasks.workpool.protocol import (
    JobEnvelope,
    ProcessMarker,
    ResultEnvelope,
    RunKeys,
    StorageFormatError,
)
from tasks.workpool.warm_pool import Server, ServerInfo, WarmPool

CLOSED_BY_BACKEND = "training run closed its actor backend"


class WorkPoolBackend:
    """Actors as flow runs of a deployment on a Prefect work pool (see module docstring).

    env_id: env to build in warm servers at start-up.
    actor_deployment / server_deployment: 'flow/deployment' names (prefect.yaml).
    storage_block: block slug for weights and batches; a missing local-file-system block is created.
    warm_actors: most warm servers to keep; the pool follows the largest actor count of the
        last `warm_window` rounds, up to this. 0: every actor is a cold flow run.
    job_variables: work-pool job variables for actor flow runs (ACI: cpu, memory).
    prewarm: the first run() waits (up to ready_timeout_s) until the warm servers started with
        the backend are ready, so the first round starts warm.
    warm_subflows: warm servers run each job as an `actor` subflow (one flow run per actor in
        the UI). Off by default: on `prefect server start` (SQLite) 8 concurrent subflows took
        4.9 s mean to start against 0.022 s inline (benchmarks/backends.py); each actor is still
        its `rollout` task run, and its server is a flow run on the pool.
    """

    name = "work-pool"

    def __init__(self, env_id: str, actor_deployment: str = "actor/minionsrl-actor",
                 server_deployment: str = "actor-server/minionsrl-actor-server",
                 storage_block: str = "local-file-system/minionsrl-storage", warm_actors: int = 0,
                 job_variables: JobVariables | None = None, prewarm: bool = True,
                 warm_window: int = 3, server_idle_timeout_s: float = 600.0,
                 ready_timeout_s: float = 180.0, state_poll_s: float = 0.5,
                 warm_subflows: bool = False):
        from prefect import get_client

        self.env_id = env_id
        self.storage_block = storage_block
        self.store = BlockStore.load(storage_block, create=True)
        self.prefix = protocol.new_run_prefix()
        self.keys = RunKeys(self.prefix)
        warm_actors = max(int(warm_actors), 0)
        self._client = get_client(sync_client=True)
        self._client.__enter__()
        self._lock = threading.Lock()
        self._weights_written: list[str] = []  # the last two rounds' weights stay
        self._closed = threading.Event()
        self.launcher = Launcher(self._client, storage_block, self.prefix, job_variables)
        self.monitor = StateMonitor(self._client, state_poll_s)
        try:
            self.actor_deployment_id = self.launcher.deployment_id(actor_deployment)
            server_deployment_id = (self.launcher.deployment_id(server_deployment)
                                    if warm_actors else None)
            if warm_actors:
                self.launcher.check_room_for_cold_actors(self.actor_deployment_id,
                                                         server_deployment_id, warm_actors)
        except Exception:
            self._client.__exit__(None, None, None)
            raise
        self.pool = WarmPool(self.store, self.keys, self.launcher, self.monitor,
                             server_deployment_id, env_id, most=warm_actors, window=warm_window,
                             idle_timeout_s=server_idle_timeout_s, as_subflows=warm_subflows,
                             prewarm=prewarm, ready_timeout_s=ready_timeout_s)

    def idle_billed_s(self) -> float:
        """Seconds warm actor servers were kept idle since the last call (billed as actors)."""
        return self.pool.take_idle_s()

    def await_prewarm(self) -> None:
        self.pool.await_prewarm()

    def take_startup_s(self) -> float:
        return 0.0  # a warm server's boot is in its idle seconds; a cold actor's in its start-up

    # -- the two calls a round makes -----------------------------------------------------
    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        if self._closed.is_set():
            raise ActorError("work-pool backend is closed")
        self.pool.await_prewarm()  # once, before the clock starts: pre-warming is not this actor's
        dispatched_at = time.time()
        self.pool.observe(job)
        job_id = protocol.new_job_id(job.round_index, job.actor_index)
        deadline_at = None if timeout_s is None else dispatched_at + timeout_s
        server = None
        try:
            envelope = JobEnvelope(job=dataclasses.replace(job, weights=b""),
                                   weights_digest=self._put_weights(job.weights),
                                   deadline_at=deadline_at)
            protocol.put(self.store, self.keys.job(job_id), envelope)
            server = self.pool.take()
            if server is not None:
                self.pool.hand(server, job_id)
        except Exception as exc:  # storage unreachable: the actor never started
            if server is not None:
                self.pool.release(server)
            raise ActorError(f"could not hand job {job_id} to {self.storage_block}: "
                             f"{type(exc).__name__}: {exc}") from None
        if server is not None:
            watch_id = server.flow_run_id
        else:
            watch_id = self.launcher.create_actor_run(self.actor_deployment_id, job_id,
                                                      deadline_at, parent_task_run())
            self.launcher.track(watch_id)
        self.monitor.watch(watch_id)
        try:
            batch = self._await(job, job_id, watch_id, server, dispatched_at, deadline_at, timeout_s)
        finally:
            self.monitor.unwatch(watch_id)
            self.launcher.untrack(watch_id)
            if server is not None:
                self.pool.release(server)
            self.store.delete(*self.keys.of_job(job_id))
        received_at = time.time()
        t = batch.timings
        t.count_infra_as_startup(dispatched_at)
        t.dispatched_at = dispatched_at
        t.received_at = received_at
        return batch

    def close(self) -> None:
        if self._closed.is_set():
            return
        servers, booting = self.pool.stop_all()
        self.launcher.cancel_in_flight(CLOSED_BY_BACKEND)
        self.pool.await_stopped(servers, booting, why=CLOSED_BY_BACKEND)
        self._closed.set()
        self.monitor.close()
        self.store.delete_prefix(self.prefix)
        with contextlib.suppress(Exception):
            self._client.__exit__(None, None, None)

    # -- observability -------------------------------------------------------------------
    def servers(self) -> list[ServerInfo]:
        return self.pool.servers()

    def wait_ready(self, count: int, timeout_s: float) -> int:
        """Wait until `count` warm servers said ready (or timeout); return how many are."""
        return self.pool.wait_ready(count, timeout_s)

    # -- one job -------------------------------------------------------------------------
    def _put_weights(self, weights: bytes) -> str:
        """Write the round's weights once (the first of its actors does); keep two rounds'."""
        digest = hashlib.sha256(weights).hexdigest()[:24]
        with self._lock:
            if digest in self._weights_written:
                return digest
            self.store.put(self.keys.weights(digest), weights)  # once per round, under the lock
            self._weights_written.append(digest)
            stale, self._weights_written = self._weights_written[:-2], self._weights_written[-2:]
        self.store.delete(*(self.keys.weights(d) for d in stale))  # rounds are sequential
        return digest

    def _await(self, job: ActorJob, job_id: str, watch_id: UUID, server: Server | None,
               dispatched_at: float, deadline_at: float | None, timeout_s: float | None) -> RolloutBatch:
        result_key = self.keys.result(job_id)
        delay = 0.005
        label = f"actor r{job.round_index}-a{job.actor_index}"
        where = f"warm server {server.server_id}" if server else f"flow run {watch_id}"
        while True:
            try:
                result = protocol.get(self.store, result_key, ResultEnvelope)
            except StorageFormatError as exc:  # what came back is not a batch: a failed actor
                self._kill(job_id, watch_id, server, f"{label} sent back an unreadable result")
                raise ActorError(f"{label} failed on {where}: {exc}",
                                 billed_s=time.time() - dispatched_at) from None
            if result is not None:
                if result.batch is not None:
                    return result.batch
                raise ActorError(f"{label} failed on {where}: {result.error}",
                                 billed_s=time.time() - dispatched_at)
            now = time.time()
            if deadline_at is not None and now >= deadline_at:
                self._kill(job_id, watch_id, server, f"{label} ran past its {timeout_s:.1f} s timeout",
                           deadline_at)
                raise ActorError(f"{label} ran past its {timeout_s:.1f} s timeout on {where}; cancelled",
                                 billed_s=now - dispatched_at, timed_out=True)
            final = self.monitor.final_state(watch_id)
            if final is not None:
                if self.store.get(result_key) is not None:  # written just before it ended
                    continue
                self._kill(job_id, watch_id, server, f"{label} lost")
                raise ActorError(f"{label} lost: {where} ended {final.type.value} "
                                 f"({final.message or 'no message'}) without a batch",
                                 billed_s=now - dispatched_at)
            if self._closed.is_set():
                raise ActorError(f"{label}: backend closed while waiting")
            time.sleep(delay if deadline_at is None else max(min(delay, deadline_at - now), 0.0))
            delay = min(delay * 1.5, 0.05)

    def _kill(self, job_id: str, watch_id: UUID, server: Server | None, why: str,
              deadline_at: float | None = None) -> None:
        if deadline_at is not None:
            settle_cancelling_later(watch_id, deadline_at, why)
        if server is None:
            self.launcher.cancel(watch_id, why)
            return
        try:
            started = protocol.get(self.store, self.keys.started(job_id), ProcessMarker)
        except StorageFormatError:
            started = None
        subflow = started.flow_run_id if started is not None else None
        self.pool.kill(server, why, UUID(subflow) if subflow else None)

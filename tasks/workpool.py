"""The `work-pool` backend: every actor is its own flow run on a Prefect work pool.

A round's `rollout` task calls `run(job)`. The job (weights written once per round, one small
envelope per actor) goes to a storage block; the actor starts as a flow run of the
`actor/minionsrl-actor` deployment, which a worker of that deployment's pool picks up and runs on
its infrastructure (a process here, an ACI container group in Azure); the actor writes its batch
back to the block and `run` reads it. Optionally, warm `actor-server` flow runs stay up between
rounds and take jobs through their storage inbox, each run as an `actor` subflow.

How actors are launched, and why through a deployment (what `run_deployment(timeout=0)` does:
`create_flow_run_from_deployment`, called here with the backend's own client so that it works
from any thread, with the calling `rollout` task run as the actor flow run's parent):
- it is one API call from the round; the pool's worker starts the infrastructure, so the
  training flow never holds cloud credentials, and the same deployment runs on any pool type
  (process, Docker, Kubernetes, ACI). Cold start = worker poll (PREFECT_WORKER_QUERY_SECONDS,
  1 s recommended) + infrastructure start + Prefect/torch imports: measured 20-23 s per actor
  on this 2-core machine under load (tests/test_workpool.py), most of it imports.
- prefect-azure's infrastructure decorator (`azure_container_instance`, i.e.
  `bind_flow_to_infrastructure`) submits from the *calling* process: it cloudpickles the flow
  into a bundle (with a `uv pip freeze` of the environment), uploads it to the pool's storage
  and creates the container group itself, and the container installs the bundle's dependencies
  with `uv` before running it. That bypasses the pool's worker, needs Azure credentials and
  `prefect work-pool storage configure` in the training process, and adds bundle upload,
  download and install to the same container start; it has no process-pool form to measure
  here, and by construction cannot start faster than the deployment path.
- Warm start is what beats infrastructure start: a warm server turns a job around in one
  storage write + one inbox poll. Measured here (benchmarks/backends.py, quiet, the
  local_stack server): 0.015 / 0.028 / 0.047 s mean at 1 / 8 / 32 actors at once, inline.
  Under load on stock `prefect server start`, 0.53 s and 4.9 s at 1 and 8 when each job is also
  an `actor` subflow (`warm_subflows=True`: every subflow is several API writes, and SQLite
  serialises them). The paper reports about 0.3 s per warm ACI actor.

Failure handling: one monitor thread reads the state of every watched flow run (cold actors and
warm servers) in one API call every `state_poll_s`; a run that ends without writing its batch
raises ActorError, and a run past its deadline is cancelled through Prefect (the pool's worker
kills the process / deletes the container group) and, for a warm server, replaced. The actor also
carries its deadline and ends its own process shortly after it, a backstop against a lost
cancellation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
import threading
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from models.rollout import ActorJob, RolloutBatch
from tasks.errors import ActorError
from tasks.storage import BlockStore, new_token

# An actor past its job's deadline by this much ends its own process (flows/actor.py).
DEADLINE_GRACE_S = 5.0
SETTLE_MARGIN_S = 5.0  # and a run still Cancelling this much later is marked Cancelled


def _parent_task_run() -> UUID | None:
    """The calling task run (a round's `rollout`): the actor's flow run shows as its subflow."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    return ctx.task_run.id if ctx is not None else None


def settle_cancelling_later(flow_run_id: UUID, deadline_at: float, why: str) -> threading.Thread:
    """Mark a timed-out actor's run Cancelled if it is still Cancelling once its process is
    surely gone.

    Cancelling becomes Cancelled only when something acts on it: the worker, for a run it has
    not started; the run's own engine, once it runs. A run cancelled while its process boots can
    fall between the two, and then stays Cancelling in the UI for good. The actor's deadline
    watchdog (flows/actor.py) ends its process DEADLINE_GRACE_S after the deadline, or as soon
    as it reads its job if later; a run marked Cancelled before that is refused by the engine.
    Runs on its own thread and client, because close() may already have closed the backend's.
    """
    def settle() -> None:
        from prefect import get_client
        from prefect.states import Cancelled

        time.sleep(max(deadline_at + DEADLINE_GRACE_S + SETTLE_MARGIN_S - time.time(), 0.0))
        with contextlib.suppress(Exception), get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
            if state is not None and state.is_cancelling():
                client.set_flow_run_state(flow_run_id, Cancelled(
                    message=f"{why}; its process ended on its own deadline"), force=True)

    thread = threading.Thread(target=settle, daemon=True, name="settle-cancelling")
    thread.start()
    return thread


@dataclass(eq=False)
class _Server:
    server_id: str
    flow_run_id: UUID | None = None
    seq: int = 0
    ready: bool = False
    busy: bool = False
    dead: bool = False
    retiring: bool = False
    checked_at: float = 0.0


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
                 job_variables: dict[str, Any] | None = None, prewarm: bool = True,
                 warm_window: int = 3, server_idle_timeout_s: float = 600.0,
                 ready_timeout_s: float = 180.0, state_poll_s: float = 0.5,
                 warm_subflows: bool = False):
        from prefect import get_client

        self.env_id = env_id
        self.storage_block = storage_block
        self.store = BlockStore.load(storage_block, create=True)
        self.prefix = f"minionsrl/{new_token()}"
        self.warm_actors = max(int(warm_actors), 0)
        self.warm_window = warm_window
        self.job_variables = dict(job_variables or {})
        self.server_idle_timeout_s = server_idle_timeout_s
        self.state_poll_s = state_poll_s
        self.warm_subflows = warm_subflows
        self._client = get_client(sync_client=True)
        self._client.__enter__()
        self._lock = threading.Lock()
        self._weights_written: list[str] = []  # the last two rounds' weights stay
        self._servers: list[_Server] = []
        self._round_sizes: dict[int, int] = {}
        self._last_round = -1
        self._watched: dict[UUID, int] = {}  # flow run id -> how many waiters
        self._states: dict[UUID, Any] = {}
        self._in_flight: set[UUID] = set()  # cold actor flow runs not yet back
        self._closed = threading.Event()
        self._closing = False  # set (under _lock) when close() begins: no new servers after it
        self._starts: list[threading.Thread] = []  # background server starts, joined by close()
        self._monitor: threading.Thread | None = None
        try:
            self.actor_deployment_id = self._deployment_id(actor_deployment)
            self.server_deployment_id = (self._deployment_id(server_deployment)
                                         if self.warm_actors else None)
            if self.warm_actors:
                self._check_room_for_cold_actors()
        except Exception:
            self._client.__exit__(None, None, None)
            raise
        self._warming = prewarm and self.warm_actors > 0
        self._ready_timeout_s = ready_timeout_s
        self._warm_lock = threading.Lock()
        for _ in range(self.warm_actors):
            self._start_server()

    # -- set-up --------------------------------------------------------------------------
    def _deployment_id(self, name: str) -> UUID:
        from prefect.exceptions import ObjectNotFound

        try:
            return self._client.read_deployment_by_name(name).id
        except ObjectNotFound:
            raise ValueError(f"deployment {name!r} not found on {self._client.api_url}: run "
                             "`prefect deploy --all` in the project folder (prefect.yaml)") from None

    def _check_room_for_cold_actors(self) -> None:
        """Warm servers are flow runs that hold their pool's slots while idle: if they can fill
        the pool's concurrency limit, a round wider than the warm pool creates cold actor runs
        that no worker may start. (A worker's own `--limit` is not visible through the API;
        give it warm_actors more than the cold actors it should run.)"""
        actor_pool = self._client.read_deployment(self.actor_deployment_id).work_pool_name
        server_pool = self._client.read_deployment(self.server_deployment_id).work_pool_name
        if actor_pool != server_pool:
            return
        limit = self._client.read_work_pool(actor_pool).concurrency_limit
        if limit is not None and self.warm_actors >= limit:
            raise ValueError(f"warm_actors={self.warm_actors} would hold every slot of work pool "
                             f"{actor_pool!r} (concurrency limit {limit}), leaving none for cold "
                             f"actors: use fewer warm actors or raise the pool's limit")

    def _start_server(self) -> _Server:
        server = _Server(server_id=new_token())
        with self._lock:
            self._servers.append(server)
        flow_run = self._client.create_flow_run_from_deployment(
            self.server_deployment_id, name=f"actor-server-{server.server_id}",
            job_variables=self.job_variables or None,
            parameters={"storage_block": self.storage_block, "prefix": self.prefix,
                        "server_id": server.server_id, "warm_env_id": self.env_id,
                        "idle_timeout_s": self.server_idle_timeout_s,
                        "as_subflows": self.warm_subflows})
        server.flow_run_id = flow_run.id
        self._watch(flow_run.id)
        return server

    def _await_prewarm(self) -> None:
        """The first run() waits until the servers started with the backend are ready; they
        boot (as flow runs on the pool) while the caller builds its learner."""
        with self._warm_lock:
            if self._warming:
                self.wait_ready(self.warm_actors, self._ready_timeout_s)
                self._warming = False

    def wait_ready(self, count: int, timeout_s: float) -> int:
        """Wait until `count` warm servers said ready (or timeout); return how many are."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                servers = [s for s in self._servers if not s.dead]
            ready = sum(self._is_ready(s, force=True) for s in servers)
            if ready >= count or time.monotonic() > deadline:
                return ready
            time.sleep(0.1)

    def _is_ready(self, server: _Server, force: bool = False) -> bool:
        if server.ready or server.dead:
            return server.ready and not server.dead
        now = time.monotonic()
        if force or now - server.checked_at > 0.5:
            server.checked_at = now
            server.ready = self.store.get(self._server_key(server, "ready")) is not None
        return server.ready

    def _server_key(self, server: _Server, name: str) -> str:
        return f"{self.prefix}/servers/{server.server_id}/{name}"

    # -- warm pool sizing from the scheduler's recent choices ---------------------------
    def _observe(self, job: ActorJob) -> None:
        with self._lock:
            r = job.round_index
            self._round_sizes[r] = max(self._round_sizes.get(r, 0), job.actor_index + 1)
            new_round = r > self._last_round
            self._last_round = max(self._last_round, r)
        if new_round and self.warm_actors:
            self.resize()

    def warm_target(self) -> int:
        """Warm servers wanted: the largest actor count of the last rounds, up to warm_actors."""
        with self._lock:
            recent = [n for r, n in self._round_sizes.items()
                      if self._last_round - self.warm_window <= r < self._last_round]
        return min(self.warm_actors, max(recent)) if recent else self.warm_actors

    def resize(self) -> None:
        target = self.warm_target()
        with self._lock:
            live = [s for s in self._servers if not s.dead and not s.retiring]
            extra = [s for s in live if not s.busy][: max(len(live) - target, 0)]
            for server in extra:
                server.retiring = True
            missing = max(target - len(live), 0)
        for server in extra:
            self._stop_server(server)
        for _ in range(missing):  # in the background: this round's actors do not wait for it
            self._start_in_background()

    def _start_in_background(self) -> None:
        """Start a warm server from a thread that close() waits for, so that no server flow run
        is created after close() looked at the servers (it would idle, billed, until its idle
        timeout) and no start is cut off by close() closing the API client under it."""
        with self._lock:
            if self._closing:
                return
            thread = threading.Thread(target=self._start_server, daemon=True)
            self._starts.append(thread)
            thread.start()

    def _stop_server(self, server: _Server) -> None:
        with contextlib.suppress(Exception):
            self.store.put(self._server_key(server, f"inbox/{server.seq}"), b"")
        server.seq += 1
        server.dead = True
        if server.flow_run_id:
            self._unwatch(server.flow_run_id)

    def _take_server(self) -> _Server | None:
        with self._lock:
            candidates = [s for s in self._servers if not (s.busy or s.dead or s.retiring)]
            for server in candidates:
                state = self._states.get(server.flow_run_id)
                if state is not None and state.is_final():
                    server.dead = True
                    continue
                if self._is_ready(server):
                    server.busy = True
                    return server
        return None

    # -- state monitor -------------------------------------------------------------------
    def _watch(self, flow_run_id: UUID) -> None:
        with self._lock:
            self._watched[flow_run_id] = self._watched.get(flow_run_id, 0) + 1
            if self._monitor is None:
                self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                                 name="work-pool-monitor")
                self._monitor.start()

    def _unwatch(self, flow_run_id: UUID) -> None:
        with self._lock:
            left = self._watched.get(flow_run_id, 0) - 1
            if left > 0:
                self._watched[flow_run_id] = left
            else:
                self._watched.pop(flow_run_id, None)
                self._states.pop(flow_run_id, None)

    def _monitor_loop(self) -> None:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        while not self._closed.wait(self.state_poll_s):
            with self._lock:
                ids = list(self._watched)
            if not ids:
                continue
            try:
                runs = self._client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)), limit=len(ids))
            except Exception:  # the API is busy or briefly away: try again next tick
                continue
            with self._lock:
                for run in runs:
                    if run.id in self._watched:
                        self._states[run.id] = run.state

    def _final_state(self, flow_run_id: UUID):
        state = self._states.get(flow_run_id)
        return state if state is not None and state.is_final() else None

    def _cancel(self, flow_run_id: UUID | None, message: str) -> None:
        """Cancel through Prefect: the pool's worker kills the process / deletes the container."""
        if flow_run_id is None:
            return
        from prefect.states import Cancelled, Cancelling

        with contextlib.suppress(Exception):
            run = self._client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final():
                return
            # A run no worker has picked up yet has nothing to kill: cancel it outright.
            state = (Cancelled(message=message) if run.state is None or run.state.is_scheduled()
                     else Cancelling(message=message))
            self._client.set_flow_run_state(flow_run_id, state, force=True)

    # -- jobs ----------------------------------------------------------------------------
    def _weights_key(self, weights: bytes) -> str:
        key = hashlib.sha256(weights).hexdigest()[:24]
        with self._lock:
            if key in self._weights_written:
                return key
            self.store.put(f"{self.prefix}/weights/{key}", weights)  # once per round, under the lock
            self._weights_written.append(key)
            stale, self._weights_written = self._weights_written[:-2], self._weights_written[-2:]
        self.store.delete(*(f"{self.prefix}/weights/{k}" for k in stale))  # rounds are sequential
        return key

    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        if self._closed.is_set():
            raise ActorError("work-pool backend is closed")
        self._await_prewarm()  # once, before the clock starts: pre-warming is not this actor's
        dispatched_at = time.time()
        self._observe(job)
        job_id = f"r{job.round_index}-a{job.actor_index}-{new_token()[:6]}"
        deadline_at = None if timeout_s is None else dispatched_at + timeout_s
        server = None
        try:
            envelope = {"job": dataclasses.replace(job, weights=b""),
                        "weights_key": self._weights_key(job.weights), "deadline_at": deadline_at}
            self.store.put_obj(f"{self.prefix}/jobs/{job_id}", envelope)
            server = self._take_server()
            if server is not None:
                self.store.put(self._server_key(server, f"inbox/{server.seq}"), job_id.encode())
                server.seq += 1
        except Exception as exc:  # storage unreachable: the actor never started
            if server is not None:
                server.busy = False
            raise ActorError(f"could not hand job {job_id} to {self.storage_block}: "
                             f"{type(exc).__name__}: {exc}") from None
        if server is not None:
            watch_id = server.flow_run_id
        else:
            watch_id = self._create_actor_run(job_id, deadline_at, _parent_task_run())
            with self._lock:
                self._in_flight.add(watch_id)
        self._watch(watch_id)
        try:
            batch = self._await(job, job_id, watch_id, server, dispatched_at, deadline_at, timeout_s)
        finally:
            self._unwatch(watch_id)
            with self._lock:
                self._in_flight.discard(watch_id)
                if server is not None:
                    server.busy = False
            self.store.delete(*(f"{self.prefix}/{d}/{job_id}" for d in ("jobs", "started", "results")))
        received_at = time.time()
        t = batch.timings
        t.count_infra_as_startup(dispatched_at)
        t.dispatched_at = dispatched_at
        t.received_at = received_at
        return batch

    def _create_actor_run(self, job_id: str, deadline_at: float | None, parent: UUID | None) -> UUID:
        """Create the actor's flow run, retrying an API that is briefly overloaded.

        Measured: 32 flow runs created at once against `prefect server start` (SQLite) got
        HTTP 503 after the client's own retries, and a run created right after its parent task
        run started got 409 (the parent not yet recorded). A run that cannot be created is an
        ActorError (nothing billed), which the round's retry and quorum handle like any lost actor.
        """
        delay = 0.5
        for attempt in range(6):
            try:
                return self._client.create_flow_run_from_deployment(
                    self.actor_deployment_id, name=f"actor-{job_id}",
                    job_variables=self.job_variables or None, parent_task_run_id=parent,
                    parameters={"storage_block": self.storage_block, "prefix": self.prefix,
                                "job_id": job_id}).id
            except Exception as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status == 409 and parent is not None:
                    # The parent `rollout` task run reaches the database through the server's
                    # event recorder, which can lag its first API calls: the foreign key fails.
                    # Wait for it twice, then start the actor unnested rather than not at all.
                    if attempt >= 2:
                        parent = None
                    time.sleep(delay * (0.5 + random.random()))
                    continue
                transient = status is None or status in (408, 429) or status >= 500
                late = deadline_at is not None and time.time() + delay >= deadline_at
                if not transient or late or attempt == 5:
                    raise ActorError(f"could not start the actor flow run for {job_id}: "
                                     f"{type(exc).__name__}: {exc}",
                                     billed_s=0.0, timed_out=late) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 8.0)
        raise AssertionError("unreachable")

    def _await(self, job: ActorJob, job_id: str, watch_id: UUID, server: _Server | None,
               dispatched_at: float, deadline_at: float | None, timeout_s: float | None) -> RolloutBatch:
        result_key = f"{self.prefix}/results/{job_id}"
        delay = 0.005
        label = f"actor r{job.round_index}-a{job.actor_index}"
        where = f"warm server {server.server_id}" if server else f"flow run {watch_id}"
        while True:
            result = self.store.get_obj(result_key)
            if result is not None:
                kind, payload = result
                if kind == "batch":
                    return payload
                raise ActorError(f"{label} failed on {where}: {payload}",
                                 billed_s=time.time() - dispatched_at)
            now = time.time()
            if deadline_at is not None and now >= deadline_at:
                self._kill(job_id, watch_id, server, f"{label} ran past its {timeout_s:.1f} s timeout",
                           deadline_at)
                raise ActorError(f"{label} ran past its {timeout_s:.1f} s timeout on {where}; cancelled",
                                 billed_s=now - dispatched_at, timed_out=True)
            final = self._final_state(watch_id)
            if final is not None:
                result = self.store.get_obj(result_key)  # it may have written just before ending
                if result is not None:
                    continue
                self._kill(job_id, watch_id, server, f"{label} lost")
                raise ActorError(f"{label} lost: {where} ended {final.type.value} "
                                 f"({final.message or 'no message'}) without a batch",
                                 billed_s=now - dispatched_at)
            if self._closed.is_set():
                raise ActorError(f"{label}: backend closed while waiting")
            time.sleep(delay if deadline_at is None else max(min(delay, deadline_at - now), 0.0))
            delay = min(delay * 1.5, 0.05)

    def _kill(self, job_id: str, watch_id: UUID, server: _Server | None, why: str,
              deadline_at: float | None = None) -> None:
        if deadline_at is not None:
            settle_cancelling_later(watch_id, deadline_at, why)
        if server is None:
            self._cancel(watch_id, why)
            return
        # A warm server running the job is the job's process: cancel it and start another.
        started = self.store.get_obj(f"{self.prefix}/started/{job_id}")
        with self._lock:
            server.dead = True
        self._cancel(watch_id, why)
        subflow = started.get("flow_run_id") if started else None
        if subflow and str(subflow) != str(watch_id):  # its `actor` subflow would stay Running
            from prefect.states import Crashed

            with contextlib.suppress(Exception):
                self._client.set_flow_run_state(UUID(str(subflow)),
                                                Crashed(message=why), force=True)
        if not self._closed.is_set():
            threading.Thread(target=self.resize, daemon=True).start()

    # -- observability and shutdown -----------------------------------------------------
    def servers(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dataclasses.asdict(s) for s in self._servers]

    def close(self) -> None:
        if self._closed.is_set():
            return
        with self._lock:
            self._closing = True
            starts = list(self._starts)
        for thread in starts:  # a replacement being created now is stopped below with the rest
            thread.join(timeout=60)
        with self._lock:
            servers = [s for s in self._servers if not s.dead]
            in_flight = list(self._in_flight)
        # A server still booting reads its stop message only once up: cancel it right away.
        booting = {id(s) for s in servers if not self._is_ready(s, force=True)}
        for server in servers:
            self._stop_server(server)
        for flow_run_id in in_flight:
            self._cancel(flow_run_id, "training run closed its actor backend")
        deadline = time.monotonic() + 15
        for server in servers:  # stopped servers exit within a poll; cancel any that do not
            while server.flow_run_id and id(server) not in booting and time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    state = self._client.read_flow_run(server.flow_run_id).state
                    if state is not None and state.is_final():
                        break
                time.sleep(0.2)
            else:
                self._cancel(server.flow_run_id, "training run closed its actor backend")
        self._closed.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        self.store.delete_prefix(self.prefix)
        with contextlib.suppress(Exception):
            self._client.__exit__(None, None, None)

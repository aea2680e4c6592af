"""Flow runs on the pool: create cold actor runs and warm server runs; cancel, crash and settle.

Why actors start through a deployment (what `run_deployment(timeout=0)` does:
`create_flow_run_from_deployment`, called here with the backend's own client so that it works
from any thread, with the calling `rollout` task run as the actor flow run's parent):
- it is one API call from the round; the pool's worker starts the infrastructure, so the
  training flow never holds cloud credentials, and the same deployment runs on any pool type
  (process, Docker, Kubernetes, ACI). Cold start = worker poll (PREFECT_WORKER_QUERY_SECONDS,
  1 s recommended) + infrastructure start + Prefect/torch imports: measured 20-23 s per actor
  on this 2-core machine under load (tests/test_workpool.py), most of it imports.
- prefect-azure's infrastructure decorator (`azure_container_instance`, i.e.
  `bind_flow_to_infrastructure`) submits from the *calling* process: it bundles the flow
  (with a `uv pip freeze` of the environment), uploads it to the pool's storage and creates the
  container group itself, and the container installs the bundle's dependencies with `uv`
  before running it. That bypasses the pool's worker, needs Azure credentials and
  `prefect work-pool storage configure` in the training process, and adds bundle upload,
  download and install to the same container start; it has no process-pool form to measure
  here, and by construction cannot start faster than the deployment path.

A timed-out actor's run is cancelled through Prefect: the pool's worker kills the process /
deletes the container group.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias
from uuid import UUID

from models.errors import ConfigError
from tasks.errors import ActorError
from tasks.workpool.protocol import DEADLINE_GRACE_S

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

# Work-pool job variables are JSON (ACI: cpu, memory, env, subnet_ids, ...).
JsonValue: TypeAlias = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JobVariables = Mapping[str, JsonValue]

SETTLE_MARGIN_S = 5.0  # a timed-out run still Cancelling this much after its grace is Cancelled
PARENT_WAIT_S = 5.0  # how long an actor run waits for its `rollout` task run to be recorded (409)


def parent_task_run() -> UUID | None:
    """The calling task run (a round's `rollout`): the actor's flow run shows as its subflow."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    return ctx.task_run.id if ctx is not None else None


class Launcher:
    """Creates and ends the backend's flow runs with its client (sync, usable from any thread)."""

    def __init__(self, client: SyncPrefectClient, storage_block: str, prefix: str,
                 job_variables: JobVariables | None = None):
        self._client = client
        self.storage_block = storage_block
        self.prefix = prefix
        self.job_variables = dict(job_variables or {})
        self._lock = threading.Lock()
        self._in_flight: set[UUID] = set()  # cold actor flow runs not yet back

    # -- deployments ---------------------------------------------------------------------
    def deployment_id(self, name: str) -> UUID:
        from prefect.exceptions import ObjectNotFound

        try:
            return self._client.read_deployment_by_name(name).id
        except ObjectNotFound:
            raise ConfigError(f"deployment {name!r} not found on {self._client.api_url}: run "
                             "`prefect deploy --all` in the project folder (prefect.yaml)") from None

    def check_room_for_cold_actors(self, actor_deployment_id: UUID, server_deployment_id: UUID,
                                   warm_actors: int) -> None:
        """Warm servers are flow runs that hold their pool's slots while idle: if they can fill
        the pool's concurrency limit, a round wider than the warm pool creates cold actor runs
        that no worker may start. (A worker's own `--limit` is not visible through the API;
        give it warm_actors more than the cold actors it should run.)"""
        actor_pool = self._client.read_deployment(actor_deployment_id).work_pool_name
        server_pool = self._client.read_deployment(server_deployment_id).work_pool_name
        if actor_pool != server_pool:
            return
        limit = self._client.read_work_pool(actor_pool).concurrency_limit
        if limit is not None and warm_actors >= limit:
            raise ValueError(f"warm_actors={warm_actors} would hold every slot of work pool "
                             f"{actor_pool!r} (concurrency limit {limit}), leaving none for cold "
                             f"actors: use fewer warm actors or raise the pool's limit")

    # -- creating runs -------------------------------------------------------------------
    def create_server_run(self, deployment_id: UUID, server_id: str, env_id: str,
                          idle_timeout_s: float, as_subflows: bool) -> UUID:
        """A warm `actor-server` flow run (flows/actor.py)."""
        return self._client.create_flow_run_from_deployment(
            deployment_id, name=f"actor-server-{server_id}",
            job_variables=self.job_variables or None,
            parameters={"storage_block": self.storage_block, "prefix": self.prefix,
                        "server_id": server_id, "warm_env_id": env_id,
                        "idle_timeout_s": idle_timeout_s, "as_subflows": as_subflows}).id

    def create_actor_run(self, deployment_id: UUID, job_id: str, deadline_at: float | None,
                         parent: UUID | None) -> UUID:
        """Create a cold actor's flow run, retrying an API that is briefly overloaded.

        Measured: 32 flow runs created at once against `prefect server start` (SQLite) got
        HTTP 503 after the client's own retries, and a run created right after its parent task
        run started got 409 (the parent not yet recorded). A run that cannot be created is an
        ActorError (nothing billed), which the round's retry and quorum handle like any lost actor.
        """
        delay = 0.5
        attempt = 0
        parent_wait_until: float | None = None
        while True:
            try:
                return self._client.create_flow_run_from_deployment(
                    deployment_id, name=f"actor-{job_id}",
                    job_variables=self.job_variables or None, parent_task_run_id=parent,
                    parameters={"storage_block": self.storage_block, "prefix": self.prefix,
                                "job_id": job_id}).id
            except Exception as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                late = deadline_at is not None and time.time() + delay >= deadline_at
                if status == 409 and parent is not None and not late:
                    # The parent `rollout` task run reaches the database through the server's
                    # event recorder, which can lag its first API calls by its flush interval
                    # (1 s on the local API): the foreign key fails. Wait for it up to
                    # PARENT_WAIT_S, then start the actor unnested rather than not at all.
                    now = time.monotonic()
                    parent_wait_until = parent_wait_until or now + PARENT_WAIT_S
                    if now >= parent_wait_until:
                        parent = None
                    time.sleep(0.25 * (1 + random.random()))
                    continue
                attempt += 1
                transient = status is None or status in (408, 429) or status >= 500
                if not transient or late or attempt == 6:
                    raise ActorError(f"could not start the actor flow run for {job_id}: "
                                     f"{type(exc).__name__}: {exc}",
                                     billed_s=0.0, timed_out=late) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 8.0)

    # -- cold runs in flight -------------------------------------------------------------
    def track(self, flow_run_id: UUID) -> None:
        with self._lock:
            self._in_flight.add(flow_run_id)

    def untrack(self, flow_run_id: UUID) -> None:
        with self._lock:
            self._in_flight.discard(flow_run_id)

    def cancel_in_flight(self, message: str) -> None:
        with self._lock:
            in_flight = list(self._in_flight)
        for flow_run_id in in_flight:
            self.cancel(flow_run_id, message)

    # -- ending runs ---------------------------------------------------------------------
    def cancel(self, flow_run_id: UUID | None, message: str) -> None:
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

    def crash(self, flow_run_id: UUID, message: str) -> None:
        """Mark a run Crashed (a killed warm server's `actor` subflow would stay Running)."""
        from prefect.states import Crashed

        with contextlib.suppress(Exception):
            self._client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)

    def read_state_is_final(self, flow_run_id: UUID) -> bool:
        """Read the run now (not from the monitor's last poll); False if unreadable."""
        with contextlib.suppress(Exception):
            state = self._client.read_flow_run(flow_run_id).state
            return state is not None and state.is_final()
        return False


def settle_cancelling_later(flow_run_id: UUID, deadline_at: float, why: str) -> threading.Thread:
    """Mark a timed-out actor's run Cancelled if it is still Cancelling once its process is
    surely gone.

    Cancelling becomes Cancelled only when something acts on it: the worker, for a run it has
    not started; the run's own engine, once it runs. A run cancelled while its process boots can
    fall between the two, and then stays Cancelling in the UI for good. The actor's deadline
    watchdog (flows/actor.py) ends its process DEADLINE_GRACE_S after the deadline, or as soon
    as it reads its job if later; a run marked Cancelled before that is refused by the engine.
    Runs on its own thread and client, because close() may already have closed the backend's;
    the thread runs in a copy of the caller's context, so its client talks to the caller's API
    (Prefect keeps its settings in a context variable, which a bare thread would not see).
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

    thread = threading.Thread(target=contextvars.copy_context().run, args=(settle,), daemon=True,
                              name="settle-cancelling")
    thread.start()
    return thread

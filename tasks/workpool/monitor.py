"""The work-pool backend's one state monitor: every watched flow run's state, one API call a tick.

Cold actors and warm servers are flow runs on the pool; a run that ends (Crashed, Cancelled,
Failed, Completed) without a batch means a lost actor. One thread polls them all with a single
read_flow_runs call every `poll_s`, so the number of actors in flight costs no extra API calls.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import State


class StateMonitor:
    """Watch flow runs by id (counted: several waiters may watch one server); read their states."""

    def __init__(self, client: SyncPrefectClient, poll_s: float):
        self._client = client
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._watched: dict[UUID, int] = {}  # flow run id -> how many waiters
        self._states: dict[UUID, State] = {}
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, flow_run_id: UUID) -> None:
        with self._lock:
            self._watched[flow_run_id] = self._watched.get(flow_run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="work-pool-monitor")
                self._thread.start()

    def unwatch(self, flow_run_id: UUID) -> None:
        with self._lock:
            left = self._watched.get(flow_run_id, 0) - 1
            if left > 0:
                self._watched[flow_run_id] = left
            else:
                self._watched.pop(flow_run_id, None)
                self._states.pop(flow_run_id, None)

    def final_state(self, flow_run_id: UUID | None) -> State | None:
        """The run's last polled state if it is final, else None."""
        with self._lock:
            state = self._states.get(flow_run_id) if flow_run_id is not None else None
        return state if state is not None and state.is_final() else None

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        while not self._closed.wait(self._poll_s):
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

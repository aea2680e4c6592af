"""Round subflows that start with 5 API calls instead of 8, with nothing left out of Prefect.

Prefect 3.9's sync engine creates a subflow run with four calls before its Running state
(prefect/flow_engine.py `FlowRunEngine.create_flow_run` and `setup_run_context`):

1. POST /task_runs/: the parent's tracking task run;
2. POST /flow_runs/filter: an earlier subflow run of that tracking task run, to reattach to
   when the parent is rerun;
3. POST /flows/: the flow's id, the same answer every round;
4. POST /flow_runs/: the flow run, under a generated name;

then, after a read-back, 5. PATCH /flow_runs/{id} to give it the flow_run_name. Each call is
a round trip to the API server's single event loop (5-15 ms here, BENCHMARKS.md "Issue 15").

For flows marked with `lean_start`, this module's `create_flow_run` keeps 1 and 4 and drops
the others without changing what the API records:

- 2 only when the tracking task run is new: it is created with a client-chosen id, and the
  server returns a different (existing) task run only when one with the same parent and key
  exists. Then Prefect's own lookup runs, unchanged.
- 3 is asked once per flow and API, then cached.
- 5: the flow run is created under its resolved flow_run_name (the engine then skips its
  rename, as it does for a run it has renamed itself).

States (Pending, Running, Completed or Failed), parameters, tags and the parent link are
Prefect's. Pinned to prefect 3.9: `install()` refuses another (flows/prefect_patches/__init__.py).
tests/test_lean_subflow.py checks the runs recorded and the calls made.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any
from uuid import UUID, uuid4

from flows.prefect_patches import check_prefect

_MARK = "_minionsrl_lean_start"
_installed = False
_flow_ids: dict[tuple[str, str], UUID] = {}
_flow_ids_lock = threading.Lock()


def lean_start(flow_obj: Any) -> Any:
    """Mark a flow so that its subflow runs start with fewer API calls; returns the flow."""
    setattr(flow_obj, _MARK, True)
    install()
    return flow_obj


def install() -> None:
    """Patch prefect.flow_engine.FlowRunEngine.create_flow_run once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from prefect import flow_engine

    original = flow_engine.FlowRunEngine.create_flow_run
    check_prefect("lean_subflow", list(inspect.signature(original).parameters) == ["self", "client"]
                  and hasattr(flow_engine.FlowRunEngine, "load_subflow_run"))

    def create_flow_run(self, client):
        context = flow_engine.FlowRunContext.get()
        if context is None or not getattr(self.flow, _MARK, False):
            return original(self, client)
        return _create_subflow_run(self, client, context)

    flow_engine.FlowRunEngine.create_flow_run = create_flow_run
    _installed = True


def _create_subflow_run(engine: Any, client: Any, context: Any) -> Any:
    """FlowRunEngine.create_flow_run for a subflow, less the calls the module docstring names."""
    from prefect import Task, flow_engine
    from prefect._internal.engine import resolve_custom_flow_run_name
    from prefect.context import TagsContext
    from prefect.states import Pending

    flow_engine.raise_if_flow_run_suspension_requested()
    flow_obj = engine.flow
    parameters = engine.parameters or {}
    tracking = Task(name=flow_obj.name, fn=flow_obj.fn, version=flow_obj.version)
    tracking._is_subflow_tracking_task = True  # as Prefect marks it: create_run reads it
    wanted_id = uuid4()
    parent_task_run = flow_engine.run_coro_as_sync(
        tracking.create_run(flow_run_context=context, parameters=engine.parameters,
                            wait_for=engine.wait_for, id=wanted_id))
    if parent_task_run.id != wanted_id:  # an existing tracking run: Prefect's reattach rules
        existing = engine.load_subflow_run(parent_task_run=parent_task_run, client=client, context=context)
        if existing:
            return existing
    name = resolve_custom_flow_run_name(flow_obj, parameters) if flow_obj.flow_run_name else None
    flow_run = _post_flow_run(client, flow_obj, name, flow_obj.serialize_parameters(parameters),
                              parent_task_run.id, TagsContext.get().current_tags, Pending())
    if name is not None:
        engine._flow_run_name_set = True
    return flow_run


def _post_flow_run(client: Any, flow_obj: Any, name: str | None, parameters: dict[str, Any],
                   parent_task_run_id: UUID, tags: Any, state: Any) -> Any:
    """SyncPrefectClient.create_flow_run's request, with the flow's id cached per API."""
    from prefect.client.schemas.actions import FlowRunCreate
    from prefect.client.schemas.objects import FlowRun, FlowRunPolicy
    from prefect.states import to_state_create

    key = (str(client.api_url), flow_obj.name)
    with _flow_ids_lock:
        flow_id = _flow_ids.get(key)
    if flow_id is None:
        flow_id = _flow_id(client, flow_obj.name)
        with _flow_ids_lock:
            _flow_ids[key] = flow_id
    body = FlowRunCreate(
        flow_id=flow_id, flow_version=flow_obj.version, name=name, parameters=parameters,
        context={}, tags=list(tags or []), parent_task_run_id=parent_task_run_id,
        state=to_state_create(state),
        empirical_policy=FlowRunPolicy(retries=flow_obj.retries,
                                       retry_delay=int(flow_obj.retry_delay_seconds or 0)))
    try:
        response = client.request("POST", "/flow_runs/", json=body.model_dump(mode="json", exclude_unset=True))
    except Exception as exc:  # the flow was deleted since it was cached: ask once more
        if getattr(getattr(exc, "response", None), "status_code", None) not in (404, 409, 422):
            raise
        with _flow_ids_lock:
            _flow_ids.pop(key, None)
        body.flow_id = _flow_id(client, flow_obj.name)
        with _flow_ids_lock:
            _flow_ids[key] = body.flow_id
        response = client.request("POST", "/flow_runs/", json=body.model_dump(mode="json", exclude_unset=True))
    flow_run = FlowRun.model_validate(response.json())
    flow_run.parameters = parameters  # as the client does: the local objects, not their JSON
    return flow_run


def _flow_id(client: Any, flow_name: str) -> UUID:
    from prefect.client.schemas.actions import FlowCreate
    from prefect.client.schemas.objects import Flow

    response = client.request("POST", "/flows/", json=FlowCreate(name=flow_name).model_dump(mode="json"))
    return Flow.model_validate(response.json()).id

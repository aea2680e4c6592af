"""Round subflows that run with 3 API calls instead of 8, with nothing left out of Prefect.

Prefect 3.9's sync engine runs a subflow with these calls (prefect/flow_engine.py
`FlowRunEngine.create_flow_run`, `begin_run`, `setup_run_context`, `handle_success`):

1. POST /task_runs/: the parent's tracking task run, from an async client on Prefect's event-loop
   thread (a new connection to the API each time);
2. POST /flow_runs/filter: an earlier subflow run of that tracking task run, to reattach to
   when the parent is rerun;
3. POST /flows/: the flow's id, the same answer every round;
4. POST /flow_runs/: the flow run, Pending, under a generated name;
5. PATCH /flow_runs/{id}: its flow_run_name;
6. POST /flow_runs/{id}/set_state: Running;
7. GET /flow_runs/{id}: the run read back;
8. POST /flow_runs/{id}/set_state: Completed or Failed.

Each call is a round trip to the API (5-15 ms on this machine's own API; 50 ms more to a
remote one, BENCHMARKS.md "Which Prefect server"). For flows marked with `lean_start`, this
module keeps 1, 4 and 8 and drops the others without changing what the API records:

- 1 goes over the engine's own client (its open connection) with a client-chosen id;
- 2 only when the tracking task run is not new (the server returned another id: one with the
  same parent and key exists). Then Prefect's own lookup runs, unchanged;
- 3 is asked once per flow and API, then cached;
- 4 creates the run under its resolved flow_run_name (so 5 is skipped, as the engine skips it
  for a run it renamed itself) and directly Running (so 6 is skipped): the server applies
  the same global rules to that first state (start time, run count, the tracking task run's
  state), and a run that starts in the process that created it has no Pending to report;
- 7 is skipped once, right after 4: the engine already holds the run the server returned.

The Running, Completed and Failed states, parameters, tags and the parent link are Prefect's.
Pinned to prefect 3.9: `install()` refuses another (flows/prefect_patches/__init__.py).
tests/test_lean_subflow.py checks the runs recorded and the calls made.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import inspect
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any
from uuid import UUID, uuid4

from flows.prefect_patches import check_prefect

_MARK = "_minionsrl_lean_start"
_STARTED_RUNNING = "_minionsrl_started_running"  # on an engine whose run was created Running
_LEAN_RUN = "_minionsrl_lean_run"  # on an engine whose run this module created
_installed = False
_flow_ids: dict[tuple[str, str], UUID] = {}
_flow_ids_lock = threading.Lock()


def lean_start(flow_obj: Any) -> Any:
    """Mark a flow so that its subflow runs start with fewer API calls; returns the flow."""
    setattr(flow_obj, _MARK, True)
    install()
    return flow_obj


def install() -> None:
    """Patch prefect.flow_engine.FlowRunEngine once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from prefect import flow_engine
    from prefect.context import TaskRunContext

    engine_cls = flow_engine.FlowRunEngine
    original_create, original_begin = engine_cls.create_flow_run, engine_cls.begin_run
    original_setup, original_success = engine_cls.setup_run_context, engine_cls.handle_success
    check_prefect("lean_subflow", list(inspect.signature(original_create).parameters) == ["self", "client"]
                  and list(inspect.signature(original_setup).parameters) == ["self", "client"]
                  and list(inspect.signature(original_success).parameters) == ["self", "result"]
                  and hasattr(engine_cls, "load_subflow_run") and hasattr(engine_cls, "_capture_state_report"))

    def create_flow_run(self, client):
        context = flow_engine.FlowRunContext.get()
        if (context is None or not getattr(self.flow, _MARK, False)
                or TaskRunContext.get() is not None):  # a subflow inside a task: Prefect's path
            return original_create(self, client)
        return _create_subflow_run(self, client, context)

    def begin_run(self):
        if not getattr(self, _STARTED_RUNNING, False):
            return original_begin(self)
        started = self.flow_run.state
        # the engine's Running proposal: the run already is
        with _answered_locally(self, lambda state: state.is_running() and started.is_running(),
                               lambda _engine, _state: started):
            return original_begin(self)

    def handle_success(self, result):
        if not getattr(self, _LEAN_RUN, False):
            return original_success(self, result)
        with _answered_locally(self, lambda state: state.is_completed(), _complete_later):
            return original_success(self, result)

    @contextlib.contextmanager
    def setup_run_context(self, client=None):
        if not getattr(self, _STARTED_RUNNING, False):
            with original_setup(self, client):
                yield
            return
        setattr(self, _STARTED_RUNNING, False)  # a retry of the run reads it back, as Prefect does
        api, known = client or self.client, self.flow_run
        api.read_flow_run = lambda flow_run_id: (known if flow_run_id == known.id
                                                 else type(api).read_flow_run(api, flow_run_id))
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(original_setup(self, client))
            finally:
                api.__dict__.pop("read_flow_run", None)
            yield

    engine_cls.create_flow_run = create_flow_run
    engine_cls.begin_run = begin_run
    engine_cls.handle_success = handle_success
    engine_cls.setup_run_context = setup_run_context
    _installed = True


def _create_subflow_run(engine: Any, client: Any, context: Any) -> Any:
    """FlowRunEngine.create_flow_run for a subflow, less the calls the module docstring names."""
    from prefect import Task, flow_engine
    from prefect._internal.engine import dynamic_key_for_task_run, resolve_custom_flow_run_name
    from prefect.context import TagsContext
    from prefect.states import Pending, Running
    from prefect.tasks import _infer_parent_task_runs
    from prefect.utilities.engine import collect_task_run_inputs_sync

    flow_engine.raise_if_flow_run_suspension_requested()
    flow_obj = engine.flow
    parameters = engine.parameters or {}
    tracking = Task(name=flow_obj.name, fn=flow_obj.fn, version=flow_obj.version)
    tracking._is_subflow_tracking_task = True  # as Prefect marks it
    wanted_id = uuid4()
    dynamic_key = dynamic_key_for_task_run(context=context, task=tracking)
    task_inputs = {k: collect_task_run_inputs_sync(v) for k, v in parameters.items()}  # as Task.create_run
    if parents := _infer_parent_task_runs(flow_run_context=context, task_run_context=None, parameters=parameters):
        task_inputs["__parents__"] = parents
    if engine.wait_for:
        task_inputs["wait_for"] = collect_task_run_inputs_sync(engine.wait_for)
    parent_task_run = client.create_task_run(
        task=tracking, name=f"{tracking.name}-{dynamic_key}", flow_run_id=context.flow_run.id,
        dynamic_key=str(dynamic_key), id=wanted_id, state=Pending(), task_inputs=task_inputs,
        extra_tags=TagsContext.get().current_tags)
    if parent_task_run.id != wanted_id:  # an existing tracking run: Prefect's reattach rules
        existing = engine.load_subflow_run(parent_task_run=parent_task_run, client=client, context=context)
        if existing:
            return existing
    name = resolve_custom_flow_run_name(flow_obj, parameters) if flow_obj.flow_run_name else None
    flow_run = _post_flow_run(client, flow_obj, name, flow_obj.serialize_parameters(parameters),
                              parent_task_run.id, TagsContext.get().current_tags,
                              Pending() if engine.wait_for else Running())  # upstream futures: Prefect's wait
    if name is not None:
        engine._flow_run_name_set = True
    setattr(engine, _STARTED_RUNNING, flow_run.state is not None and flow_run.state.is_running())
    setattr(engine, _LEAN_RUN, True)
    return flow_run


@contextlib.contextmanager
def _answered_locally(engine: Any, wanted: Callable[[Any], bool], answer: Callable[[Any, Any], Any]):
    """Within: the engine's next state proposal that `wanted` picks is not sent and waited for;
    answer(engine, state) gives the state it gets, kept as FlowRunEngine.set_state
    keeps one; other proposals go to the API as before."""
    from prefect import flow_engine

    def set_state(state, force=False):
        if force or not wanted(state):
            return flow_engine.FlowRunEngine.set_state(engine, state, force)
        engine.__dict__.pop("set_state", None)
        given = answer(engine, state)
        engine.flow_run.state, engine.flow_run.state_name, engine.flow_run.state_type = given, given.name, given.type
        engine._capture_state_report(given)
        engine._telemetry.update_state(given)
        engine.call_hooks(given)
        return given

    engine.set_state = set_state
    try:
        yield
    finally:
        engine.__dict__.pop("set_state", None)


class StateNotRecorded(RuntimeError):
    """The API did not take a state sent in the background; the text of why."""


_jobs: queue.SimpleQueue = queue.SimpleQueue()
_completer: threading.Thread | None = None
_completer_clients: dict[str, Any] = {}  # API URL -> the completer thread's own client
_pending: list[tuple[str, str, Future]] = []
_pending_lock = threading.Lock()


def _complete_later(engine: Any, state: Any) -> Any:
    """Send a finished round's Completed from a background thread (within the submitter's
    settings) and go on: the next round's calls overlap it. flush() collects the answers.

    A daemon thread, not a ThreadPoolExecutor (whose threads the interpreter joins at exit): a
    process stopped while an unreachable API is retried must not wait out Prefect's retries."""
    global _completer
    future: Future = Future()
    with _pending_lock:
        if _completer is None:
            _completer = threading.Thread(target=_complete_in_order, name="minionsrl-subflow-completions", daemon=True)
            _completer.start()
        _pending.append((engine.flow_run.name, state.type.value, future))
    _jobs.put((future, contextvars.copy_context(), engine.flow_run.id, state))
    return state


def _complete_in_order() -> None:
    while True:
        future, context, flow_run_id, state = _jobs.get()
        try:  # only the answer's type is kept: the state holds the round's result (its batches) until flush()
            future.set_result(context.run(_propose, flow_run_id, state).type)
        except BaseException as exc:  # noqa: BLE001 (handed to flush(), which reports it)
            # its text only: the exception's tracebacks (and those of its causes) hold the state too
            future.set_exception(StateNotRecorded(repr(exc)))
        del future, context, state  # nor does this thread hold the last one while it waits


def _propose(flow_run_id: UUID, state: Any) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.utilities.engine import propose_state_sync

    url = str(PREFECT_API_URL.value())
    client = _completer_clients.get(url)
    if client is None:
        client = _completer_clients[url] = get_client(sync_client=True).__enter__()
    return propose_state_sync(client, state, flow_run_id=flow_run_id)


def flush(timeout_s: float = 60.0) -> list[str]:
    """Wait (at most timeout_s in all) for every Completed sent in the background; returns what
    went wrong (a state the API did not take, an error, no answer yet), one line each. Call
    before the parent run ends."""
    with _pending_lock:
        pending, _pending[:] = list(_pending), []
    problems, deadline = [], time.monotonic() + timeout_s
    for name, wanted, future in pending:
        try:
            got = future.result(timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            problems.append(f"subflow run {name!r}: its {wanted} state was not answered within {timeout_s:g} s")
            continue
        except StateNotRecorded as exc:  # reported, not raised: the round's work is done
            problems.append(f"subflow run {name!r}: its {wanted} state was not recorded: {exc}")
            continue
        if got.value != wanted:
            problems.append(f"subflow run {name!r}: the API answered {got.value} to its {wanted} state")
    return problems


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


atexit.register(flush, 10.0)

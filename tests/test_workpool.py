"""The work-pool backend's cold actors on a real Prefect server, process pool and worker.

Cold actors are flow runs of `actor/minionsrl-actor` that `prefect worker start --type process`
starts as processes. Faults are real: a SIGKILL to the actor's flow-run process, and a timeout
shorter than the actor's start. Warm actors: tests/test_workpool_warm.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployments.local_stack import POOL  # noqa: E402
from tests.slow_env import HANG, SLOW  # noqa: E402
from tests.test_backends_local import make_job  # noqa: E402

pytestmark = pytest.mark.e2e

MARGIN_S = 3.0  # state poll (0.5 s) + the worker noticing a dead process, on a busy 2-core box


@pytest.fixture(scope="module")
def stack(workpool_stack):
    """The session's work-pool stack (tests/conftest.py), this module's client pointed at it."""
    with workpool_stack.client_env():
        yield workpool_stack


def flow_run(stack, flow_run_id):
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def wait_final(stack, flow_run_id, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = flow_run(stack, flow_run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(0.3)
    raise AssertionError(f"flow run {flow_run_id} not final after {timeout_s} s: {run.state}")


def wait_started(backend, job_prefix: str, timeout_s: float = 90.0):
    """The ProcessMarker of the first job whose id starts with job_prefix, once it started."""
    from tasks.workpool import protocol

    root = backend.store.root / backend.keys.started_dir()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in root.glob(f"{job_prefix}-*") if root.exists() else []:
            marker = protocol.get(backend.store, backend.keys.started(path.name),
                                  protocol.ProcessMarker)
            if marker:
                return marker
        time.sleep(0.05)
    raise AssertionError(f"{job_prefix} never started")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0): look at its state
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_cold_actors_are_their_own_flow_runs_on_the_process_pool(stack):
    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    backend = make_backend(WorkPoolBackendSpec(), "CartPole-v1")
    try:
        with ThreadPoolExecutor(2) as ex:
            batches = list(ex.map(lambda i: backend.run(make_job(actor=i), timeout_s=120), range(2)))
    finally:
        backend.close()
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["actor"])))
    # this backend's runs (the stack is shared); an actor writes its batch before its flow run
    # ends: the Completed state can come just after
    runs = [wait_final(stack, r.id, timeout_s=30.0) for r in runs if r.parameters.get("prefix") == backend.prefix]
    names = sorted(r.name for r in runs if r.state.is_completed())
    assert len(names) == 2 and names[0].startswith("actor-r0-a0-") and names[1].startswith("actor-r0-a1-")
    assert {r.work_pool_name for r in runs} == {POOL}
    assert len({r.infrastructure_pid for r in runs}) == 2  # two processes
    for batch in batches:
        t = batch.timings
        assert t.cold_start is True and batch.steps == 64
        assert t.dispatched_at == t.started_at < t.body_at <= t.sampled_at < t.received_at
        # P^a's parts add up to the actor's whole time, hand-off to batch back
        parts = t.startup_s + t.weight_load_s + t.sampling_s + (t.received_at - t.sampled_at)
        assert abs(parts - (t.received_at - t.dispatched_at)) < 0.05
        print(f"cold actor: start-up {t.startup_s:.2f} s (infrastructure {t.infra_startup_s:.2f} s), "
              f"weights {t.weight_load_s * 1e3:.1f} ms, sampling {t.sampling_s:.2f} s")


def test_cold_actor_killed_mid_rollout(stack):
    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import ActorError, make_backend

    backend = make_backend(WorkPoolBackendSpec(), "CartPole-v1")
    outcome = {}

    def slow():
        try:
            outcome["result"] = backend.run(make_job(SLOW, steps=1000), timeout_s=120)
        except ActorError as exc:
            outcome["result"], outcome["at"] = exc, time.monotonic()

    try:
        thread = threading.Thread(target=slow)
        thread.start()
        marker = wait_started(backend, "r0-a0")
        time.sleep(1.0)  # mid-rollout
        killed_at = time.monotonic()
        os.kill(marker.pid, signal.SIGKILL)
        thread.join(60)
    finally:
        backend.close()
    error = outcome["result"]
    assert isinstance(error, ActorError) and not error.timed_out, error
    assert "lost" in str(error) and "CRASHED" in str(error)
    assert outcome["at"] - killed_at < MARGIN_S, outcome["at"] - killed_at
    assert error.billed_s > 1.0
    assert wait_final(stack, marker.flow_run_id).state.is_crashed()


def test_cold_actor_slower_than_its_timeout_is_cancelled(stack):
    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import ActorError, make_backend

    backend = make_backend(WorkPoolBackendSpec(), "CartPole-v1")
    try:
        started = time.monotonic()
        with pytest.raises(ActorError) as info:
            backend.run(make_job(HANG), timeout_s=2.0)  # shorter than a cold start here
        assert info.value.timed_out and time.monotonic() - started < 2.0 + MARGIN_S
    finally:
        backend.close()
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_="actor-r0-a0-")))
    hung = [r for r in runs if r.parameters.get("prefix") == backend.prefix]
    assert len(hung) == 1
    assert wait_final(stack, hung[0].id, timeout_s=240.0).state.is_cancelled()


def test_actor_run_whose_parent_task_run_is_not_recorded_starts_unnested(stack):
    """The server records a `rollout` task run from its events, which can lag: creating the
    actor's run under it then fails its foreign key (409). After waiting for it the backend
    creates the run without the parent, after PARENT_WAIT_S, rather than losing the actor."""
    import uuid

    from prefect import get_client
    from prefect.states import Cancelled

    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    backend = make_backend(WorkPoolBackendSpec(), "CartPole-v1")
    try:
        run_id = backend.launcher.create_actor_run(backend.actor_deployment_id, "r9-a0-unnested",
                                                   None, parent=uuid.uuid4())
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(run_id)
            client.set_flow_run_state(run_id, Cancelled(message="test: not to be run"), force=True)
        assert run.name == "actor-r9-a0-unnested" and run.parent_task_run_id is None
    finally:
        backend.close()

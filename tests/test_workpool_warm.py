"""The work-pool backend's warm actors: long-lived `actor-server` flow runs on the process pool.

Real server, process pool and worker. Warm start-up, the opt-in subflow per actor, and a warm
actor past its timeout: its server is cancelled through Prefect, killed by the worker and
replaced.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.slow_env import HANG  # noqa: E402
from tests.test_backends_local import make_job  # noqa: E402
from tests.test_workpool import MARGIN_S, gone, wait_final  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(workpool_stack):
    """The session's work-pool stack (tests/conftest.py), this module's client pointed at it."""
    with workpool_stack.client_env():
        yield workpool_stack


@pytest.fixture(scope="module")
def warm(stack):
    """Two warm actor servers, shared by the warm tests (each boot costs a cold start)."""
    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    backend = make_backend(WorkPoolBackendSpec(warm_actors=2), "CartPole-v1")
    assert backend.wait_ready(2, timeout_s=180) == 2
    yield backend
    backend.close()


def runs_of(stack, flow_name: str):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])))


def test_warm_actors_start_in_under_a_second(stack, warm):
    """Two rounds of two actors on two pre-warmed servers, each job inline in its server."""
    assert all(s.ready for s in warm.servers())
    import time

    # a warm pool is billed while it waits: both servers, from their start until now
    before = time.time()
    booted_idle = warm.idle_billed_s()
    assert booted_idle > 0
    time.sleep(0.5)
    assert warm.idle_billed_s() >= 2 * 0.5 * 0.9  # two idle servers, half a second each
    assert time.time() - before < 5
    batches = []
    for k in range(2):
        with ThreadPoolExecutor(2) as ex:
            batches += list(ex.map(lambda i, k=k: warm.run(make_job(actor=i, round_index=k),
                                                           timeout_s=60), range(2)))
    for batch in batches:
        t = batch.timings
        assert t.cold_start is False
        print(f"warm actor: start-up {t.startup_s * 1e3:.0f} ms (infrastructure "
              f"{t.infra_startup_s * 1e3:.0f} ms)")
    assert max(b.timings.startup_s for b in batches) < 1.0
    # the servers ran both rounds' actors: no actor flow run was started for them
    assert [r for r in runs_of(stack, "actor") if r.parameters.get("prefix") == warm.prefix] == []


def test_warm_actor_past_its_timeout_is_cancelled_and_replaced(stack, warm):
    from tasks.backends import ActorError
    from tasks.workpool import protocol

    before = {s.server_id: s for s in warm.servers() if not s.dead}
    started = time.monotonic()
    with pytest.raises(ActorError) as info:
        warm.run(make_job(HANG, round_index=2), timeout_s=3.0)
    took = time.monotonic() - started
    assert info.value.timed_out and 3.0 <= took < 3.0 + MARGIN_S, took
    [old] = [s for s in warm.servers() if s.dead and s.server_id in before]
    marker = protocol.get(warm.store, warm.keys.ready(old.server_id), protocol.ProcessMarker)
    # Prefect cancelled the server's flow run and the worker killed its process.
    assert wait_final(stack, old.flow_run_id).state.is_cancelled()
    deadline = time.monotonic() + 30
    while not gone(marker.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gone(marker.pid)
    # ... and a fresh warm server took its place; the next round runs warm on both.
    assert warm.wait_ready(2, timeout_s=180) == 2
    with ThreadPoolExecutor(2) as ex:
        batches = list(ex.map(lambda i: warm.run(make_job(actor=i, round_index=3), timeout_s=60),
                              range(2)))
    assert [b.timings.cold_start for b in batches] == [False, False]


def test_warm_subflows_make_each_actor_its_own_flow_run(stack):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    backend = make_backend(WorkPoolBackendSpec(warm_actors=1, warm_subflows=True), "CartPole-v1")
    try:
        batches = [backend.run(make_job(round_index=k), timeout_s=120) for k in range(2)]
        server = backend.servers()[0].flow_run_id
    finally:
        backend.close()
    assert [b.timings.cold_start for b in batches] == [False, False]
    print("warm actor with a subflow: start-up "
          + ", ".join(f"{b.timings.startup_s * 1e3:.0f} ms" for b in batches))
    deadline = time.monotonic() + 30  # a subflow completes just after its batch is written
    with get_client(sync_client=True) as client:
        while True:
            subflows = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[server])))
            done = sorted(r.name.rsplit("-", 1)[0] for r in subflows if r.state.is_completed())
            if len(done) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert done == ["actor-r0-a0", "actor-r1-a0"]


def test_warm_actors_that_would_fill_the_pool_are_refused(stack):
    """Idle warm servers hold pool slots: warm_actors >= the pool's concurrency limit would
    leave cold actors unstartable, so it fails before any server starts."""
    from deployments.local_stack import POOL
    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    servers_before = len(runs_of(stack, "actor-server"))
    stack.cli("work-pool", "set-concurrency-limit", POOL, "3")
    try:
        with pytest.raises(ValueError, match="concurrency limit 3"):
            make_backend(WorkPoolBackendSpec(warm_actors=3), "CartPole-v1")
        assert len(runs_of(stack, "actor-server")) == servers_before
    finally:
        stack.cli("work-pool", "clear-concurrency-limit", POOL)

"""flows/prefect_patches/lean_subflow.py: a marked subflow starts with fewer API calls, and the API records
exactly what Prefect's own engine records (names, states, parameters, parents, reruns)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from flows.prefect_patches import lean_subflow
from flows.prefect_patches.lean_subflow import lean_start


class Requests:
    """Every HTTP request the Prefect clients of this process send (method, path), in order."""

    def __init__(self, monkeypatch):
        self.sent: list[tuple[str, str]] = []
        sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

        def send(client, request, *args, **kwargs):
            self.sent.append((request.method, request.url.path))
            return sync_send(client, request, *args, **kwargs)

        async def asend(client, request, *args, **kwargs):
            self.sent.append((request.method, request.url.path))
            return await async_send(client, request, *args, **kwargs)

        monkeypatch.setattr(httpx.Client, "send", send)
        monkeypatch.setattr(httpx.AsyncClient, "send", asend)

    def of_runs(self) -> list[tuple[str, str]]:
        """The run-related calls, with ids replaced by {id} (logs and events travel apart)."""
        out = []
        for method, path in self.sent:
            if "/logs" in path or "/events" in path:
                continue
            parts = [("{id}" if _is_uuid(p) else p) for p in path.split("/")]
            out.append((method, "/".join(parts)))
        return out


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def scenario(lean: bool, tag: str):
    """A parent that runs a round subflow three times (the last one raises), then retries once
    after failing itself, so that its second attempt meets tracking task runs that exist."""
    from prefect import flow, task

    @task
    def double(x: int) -> int:
        return 2 * x

    @flow(name=f"round-{tag}", flow_run_name="round-{k}-x{actors}", persist_result=False,
          validate_parameters=False)
    def round_flow(k: int, actors: int):
        if k == 2:
            raise ValueError("round 2 fails")
        return sum(double.map(range(actors)).result())

    if lean:
        round_flow = lean_start(round_flow)
    attempts = []

    @flow(name=f"parent-{tag}", persist_result=False, retries=1, retry_delay_seconds=0)
    def parent():
        attempts.append(1)
        totals = [round_flow(k=k, actors=3) for k in range(2)]
        with pytest.raises(ValueError, match="round 2 fails"):
            round_flow(k=2, actors=1)
        assert lean_subflow.flush() == []  # the rounds' Completed states, sent in the background
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails after its rounds")
        return totals

    return parent


def recorded(parent_run_id) -> list[tuple]:
    """What the API holds of a parent run's subflow runs, in creation order."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, TaskRunFilter
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        trackers = {t.id: t for t in client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id={"any_": [parent_run_id]}))}
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_task_run_id={"any_": list(trackers)}),
            sort=FlowRunSort.START_TIME_ASC)
        out = []
        for run in runs:
            tracker = trackers[run.parent_task_run_id]
            out.append((run.name, run.state.type.value, run.parameters, tracker.dynamic_key,
                        tracker.flow_run_id == parent_run_id))
        return sorted(out, key=lambda r: (r[0], r[3], r[1]))


def run_parent(parent):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowRunFilter

    assert parent() == [6, 6]
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_filter=FlowFilter(name={"any_": [parent.name]}),
                                       flow_run_filter=FlowRunFilter(parent_task_run_id={"is_null_": True}))
        assert run.state.is_completed() and run.run_count == 2
        return run.id


def test_a_lean_subflow_is_recorded_exactly_as_prefect_records_one(prefect_api_url):
    tag = uuid.uuid4().hex[:8]
    plain = recorded(run_parent(scenario(lean=False, tag=f"plain-{tag}")))
    lean = recorded(run_parent(scenario(lean=True, tag=f"lean-{tag}")))
    # the first attempt's three rounds, and the retry's three: a fresh run for each, as Prefect's
    # reattach rules decide (tracking task runs reused by key, completed rounds without results rerun)
    assert len(plain) == 6
    assert lean == plain
    names = [r[0] for r in lean]
    assert names.count("round-0-x3") == 2 and names.count("round-2-x1") == 2
    assert {r[1] for r in lean if r[0] == "round-2-x1"} == {"FAILED"}
    assert {r[1] for r in lean if r[0] != "round-2-x1"} == {"COMPLETED"}
    assert all(r[2] == {"k": int(r[0][6]), "actors": int(r[0][-1])} for r in lean)
    assert all(r[4] for r in lean)  # every tracking task run belongs to the parent run


def test_a_lean_subflow_runs_with_three_calls_instead_of_eight(prefect_api_url, monkeypatch):
    from prefect import flow

    tag = uuid.uuid4().hex[:8]

    def make(lean: bool):
        @flow(name=f"calls-{'lean' if lean else 'plain'}-{tag}", flow_run_name="round-{k}",
              persist_result=False, validate_parameters=False)
        def round_flow(k: int):
            return k

        return lean_start(round_flow) if lean else round_flow

    lean_round, plain_round = make(True), make(False)
    per_call: dict[str, list] = {}

    @flow(name=f"calls-parent-{tag}", persist_result=False)
    def parent():
        requests = Requests(monkeypatch)
        for name, round_flow in (("plain", plain_round), ("lean", lean_round)) * 2:
            requests.sent.clear()
            assert round_flow(k=7) == 7
            assert lean_subflow.flush() == []
            per_call[name] = requests.of_runs()

    parent()
    assert per_call["plain"] == [
        ("POST", "/api/task_runs/"), ("POST", "/api/flow_runs/filter"), ("POST", "/api/flows/"),
        ("POST", "/api/flow_runs/"), ("PATCH", "/api/flow_runs/{id}"),
        ("POST", "/api/flow_runs/{id}/set_state"), ("GET", "/api/flow_runs/{id}"),
        ("POST", "/api/flow_runs/{id}/set_state")], "Prefect's own sequence changed: re-read flow_engine"
    assert per_call["lean"] == [
        ("POST", "/api/task_runs/"), ("POST", "/api/flow_runs/"), ("POST", "/api/flow_runs/{id}/set_state")]


def test_the_cached_flow_id_is_asked_again_when_the_flow_was_deleted(prefect_api_url):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter

    name = f"deleted-{uuid.uuid4().hex[:8]}"

    @flow(name=name, flow_run_name="round-{k}", persist_result=False)
    def round_flow(k: int):
        return k

    round_flow = lean_start(round_flow)

    @flow(name=f"{name}-parent", persist_result=False)
    def parent(k: int):
        return round_flow(k=k)

    assert parent(k=1) == 1
    assert lean_subflow.flush() == []  # its Completed, sent in the background
    with get_client(sync_client=True) as client:
        (old,) = client.read_flows(flow_filter=FlowFilter(name={"any_": [name]}))
        client.delete_flow(old.id)
    time.sleep(0.1)
    assert parent(k=2) == 2
    assert lean_subflow.flush() == []
    with get_client(sync_client=True) as client:
        (new,) = client.read_flows(flow_filter=FlowFilter(name={"any_": [name]}))
        runs = client.read_flow_runs(flow_filter=FlowFilter(name={"any_": [name]}))
    assert new.id != old.id
    assert [r.name for r in runs] == ["round-2"] and runs[0].state.is_completed()


def test_a_completed_state_the_api_does_not_take_is_reported_by_flush(prefect_api_url):
    from types import SimpleNamespace

    from prefect.states import Completed

    lost = SimpleNamespace(flow_run=SimpleNamespace(id=uuid.uuid4(), name="round-9-x1"))  # no such run
    lean_subflow._complete_later(lost, Completed())
    (problem,) = lean_subflow.flush(timeout_s=60)
    assert "'round-9-x1'" in problem and "COMPLETED state was not recorded" in problem
    assert lean_subflow.flush() == []  # reported once


class _Batches:  # a round's result (its list of RolloutBatch: 12 MB a Humanoid round at 8 actors)
    pass


@pytest.mark.parametrize("known_run", [True, False])
def test_a_sent_completed_state_does_not_hold_the_rounds_result_until_flush(prefect_api_url, known_run):
    """The rounds' Completed states wait for flush() at the run's end: what waits must not keep
    each round's batches alive (it did: 11 MB a Humanoid round at 8 actors), answered or refused."""
    import gc
    import weakref
    from types import SimpleNamespace

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Completed, Running

    run_id = uuid.uuid4()
    if known_run:
        @flow(name=f"held-{uuid.uuid4().hex[:8]}")
        def held():
            pass

        with get_client(sync_client=True) as client:
            run_id = client.create_flow_run(held, state=Running()).id
    result = _Batches()
    returned = weakref.ref(result)
    lean_subflow._complete_later(SimpleNamespace(flow_run=SimpleNamespace(id=run_id, name="round-0-x8")),
                                 Completed(data=result))
    del result
    with lean_subflow._pending_lock:
        (future,) = [future for _, _, future in lean_subflow._pending]
    future.exception(timeout=60)  # answered (or refused), not yet flushed
    gc.collect()
    assert returned() is None, "the round's result outlived its round until flush()"
    assert (lean_subflow.flush() == []) is known_run

"""flows/prefect_patches/shared_task_runner.py: flow runs that share one thread pool, with Prefect's task runs."""

from __future__ import annotations

import threading

import pytest

from flows.prefect_patches.shared_task_runner import SharedThreadPoolTaskRunner, results_of
from tests.prefect_reads import task_runs_eventually


def test_flow_runs_share_the_threads_and_keep_their_task_runs_and_failures(prefect_api_url):
    from prefect import flow, get_client, task
    from prefect.cache_policies import NO_CACHE
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.context import get_run_context

    runner = SharedThreadPoolTaskRunner(max_workers=4)
    flow_runs: list = []

    @task(task_run_name="square-{x}", cache_policy=NO_CACHE, persist_result=False)
    def square(x: int) -> tuple[int, int]:
        if x < 0:
            raise ValueError("negative")
        return x * x, threading.get_ident()

    @flow(persist_result=False, task_runner=runner)
    def squares(xs: list[int]) -> list[tuple[int, int]]:
        flow_runs.append(get_run_context().flow_run.id)
        futures = square.map(xs)
        results = results_of(futures)  # raises the first failure, as futures.result() does
        assert results == futures.result()
        return results

    try:
        first, second = squares([1, 2, 3, 4]), squares([5, 6, 7, 8])
        assert [v for v, _ in first] == [1, 4, 9, 16] and [v for v, _ in second] == [25, 36, 49, 64]
        threads = {t for _, t in first} | {t for _, t in second}
        assert len(threads) <= 4  # the second run reused the first run's threads
        with pytest.raises(ValueError, match="negative"):
            squares([1, -1])
        assert [v for v, _ in squares([3])] == [9]  # a failed run leaves the pool usable
    finally:
        runner.close()
    assert all(not t.is_alive() for t in threading.enumerate() if t.name.startswith("round-tasks"))

    with get_client(sync_client=True) as client:
        mine = FlowRunFilter(id=FlowRunFilterId(any_=flow_runs))
        runs = task_runs_eventually(client, lambda rs: len([r for r in rs if r.state and r.state.is_final()]) == 11,
                                    flow_run_filter=mine)
    states = sorted((r.name, r.state.type.value) for r in runs)
    assert len(states) == 11
    assert ("square--1", "FAILED") in states
    assert sum(s == "COMPLETED" for _, s in states) == 10

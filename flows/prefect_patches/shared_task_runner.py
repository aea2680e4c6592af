"""The round subflow's task runner: Prefect's thread pool, with its threads kept between rounds.

Prefect gives every flow run a fresh copy of its task runner (`duplicate()`), and a
ThreadPoolTaskRunner starts new threads for each copy and joins them at the run's exit. A
training runs one subflow per round, so each round started I_k threads while its actors were
busy on the same two cores: py-spy put 30-60 ms a round in ThreadPoolExecutor's
`_adjust_thread_count`. Here the copies share one executor that lives as long as the training
(`close()`); each run still waits for its own tasks at exit and cancels its own on cancellation.
Everything else (task runs, states, futures) is Prefect's ThreadPoolTaskRunner, pinned to
prefect 3.9 (refused on another); tests/test_round_task_runner.py checks the parts relied on.

`results_of` reads a round's results as `PrefectFutureList.result()` does, less its hop to
Prefect's event-loop thread per future (`State.result` runs a coroutine there even for a
result held in memory): 8 hops took ~18 ms of a CartPole round (profiled, 2026-12-02).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect.futures import PrefectFuture
from prefect.results import ResultRecord
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from flows.prefect_patches import check_prefect


class SharedThreadPoolTaskRunner(ThreadPoolTaskRunner):
    """A ThreadPoolTaskRunner whose copies (one per flow run) share one thread pool."""

    def __init__(self, max_workers: int | None = None, _origin: SharedThreadPoolTaskRunner | None = None):
        if _origin is None:  # it reaches into ThreadPoolTaskRunner's private state: that Prefect's only
            check_prefect("shared_task_runner", all(hasattr(ThreadPoolTaskRunner, name) for name in (
                "_register_worker_thread", "cancel_all", "duplicate")))
        super().__init__(max_workers=max_workers)
        if _origin is None:
            self._pool = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="round-tasks",
                                            initializer=self._register_worker_thread)
        else:  # the pool's threads, for Prefect's nested-submit warning
            self._pool, self._worker_thread_ids = _origin._pool, _origin._worker_thread_ids
        self._mine: list[concurrent.futures.Future[Any]] = []
        self._mine_lock = threading.Lock()

    def duplicate(self) -> SharedThreadPoolTaskRunner:
        return type(self)(max_workers=self._max_workers, _origin=self)

    def submit(self, task, parameters, wait_for=None, dependencies=None):
        future = super().submit(task, parameters, wait_for, dependencies)
        with self._mine_lock:
            self._mine.append(future.wrapped_future)
        return future

    def cancel_all(self) -> None:
        """This run's tasks only: set their cancel events, drop those not started."""
        for event in self._cancel_events.values():
            event.set()
        with self._mine_lock:
            for future in self._mine:
                future.cancel()

    def __enter__(self) -> SharedThreadPoolTaskRunner:
        TaskRunner.__enter__(self)
        self._active_submission_count = 0
        self._nested_submit_warning_emitted = False
        self._executor = self._pool
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        self.cancel_all()  # as Prefect's: a task not started when the run ends never starts
        with self._mine_lock:
            mine, self._mine = self._mine, []
        concurrent.futures.wait(mine)  # as ThreadPoolExecutor.shutdown(wait=True) would
        self._executor = None
        TaskRunner.__exit__(self, exc_type, exc_value, traceback)

    def close(self) -> None:
        """Stop the shared threads (the training is over)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def results_of(futures: list[PrefectFuture], check: Callable[[], None] | None = None) -> list[Any]:
    """[f.result() for f in futures], in order: a Completed state's in-memory result is read
    where it is (prefect/states.py `_get_state_result` reads `state.data.result` for a
    ResultRecord); anything else (a failure, a persisted result) goes through f.result().
    While waiting, `check()` runs every 0.1 s and may raise (a Ctrl-C: flows/interrupts.py)."""
    if check is not None:
        pending = {f.wrapped_future for f in futures}
        while pending:
            check()
            pending = concurrent.futures.wait(pending, timeout=0.1).not_done
    results = []
    for future in futures:
        future.wait()
        state = future.state
        if state.is_completed() and isinstance(state.data, ResultRecord):
            results.append(state.data.result)
        else:
            results.append(future.result())
    return results

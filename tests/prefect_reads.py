"""Reading task runs back from a Prefect API. The server builds task runs from their clients'
events, in batches (deployments/local_api.py SERVER_DEFAULTS: up to 1 s later), so a test reads
until what it expects is there, or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect.client.schemas.objects import TaskRun


def task_runs_eventually(client, done: Callable[[list[TaskRun]], bool], timeout_s: float = 30.0,
                         **filters) -> list[TaskRun]:
    """client.read_task_runs(**filters) once done(runs) holds, or its last answer at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = client.read_task_runs(**filters)
        if done(runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.25)

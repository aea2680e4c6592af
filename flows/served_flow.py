"""Top-level flows called from Python with no Prefect API configured run on the project's temporary
API (deployments/local_api.py), as the command lines do, not on Prefect's own ephemeral server.

`from flows.train import train; train(...)` with no PREFECT_API_URL used to start Prefect's own
temporary server, with every service on and SQLite writes that stall: about 2.9 s a round against
~0.3 s on the project's API (issue 34). A `served_flow` starts the project's API on its first call
in a process, keeps it for the process's later calls, and stops it when the process exits (and the
server ends with its parent however the process ends). With an API configured, or inside another
flow or task run, it changes nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from prefect.flows import Flow

_lock = threading.Lock()
_api: contextlib.AbstractContextManager[str] | None = None


def ensure_api() -> str | None:
    """The project's temporary API's URL if this call started it or had started it before; None
    when an API is configured or a flow or task run is under way (theirs is used)."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.settings import PREFECT_API_URL

    global _api
    if _api is None and (PREFECT_API_URL.value() or FlowRunContext.get() or TaskRunContext.get()):
        return None
    with _lock:
        if _api is None:
            from deployments.local_api import prefect_api

            manager = prefect_api()
            manager.__enter__()
            _api = manager
            atexit.register(_stop)
    return os.environ.get("PREFECT_API_URL")


def _stop() -> None:
    global _api
    with _lock:
        manager, _api = _api, None
    if manager is not None:
        manager.__exit__(None, None, None)


class ServedFlow(Flow):
    """A Prefect Flow whose direct call makes sure an API serves it (ensure_api)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ensure_api()
        return super().__call__(*args, **kwargs)


def served_flow(**options: Any) -> Callable[[Callable[..., Any]], ServedFlow]:
    """As prefect's @flow(**options), for a flow a user calls from Python."""
    return lambda fn: ServedFlow(fn=fn, **options)

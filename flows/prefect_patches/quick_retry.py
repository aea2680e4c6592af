"""Retry a Prefect server's "database busy" answer after milliseconds, not 2 seconds.

A stock Prefect server on SQLite opens write transactions DEFERRED; when its task-run recorder
commits between a request's first read and its first write, SQLite answers SQLITE_BUSY_SNAPSHOT
at once and the server returns 503 {"exception_message": "Service Unavailable"} with no
Retry-After (prefect/server/api/server.py `custom_internal_exception_handler`). Prefect's
client then waits 2**attempt seconds with jitter (prefect/client/base.py `_send_with_retry`):
about 2 s for one busy moment of a database that is free again a few milliseconds later.
Measured on `prefect server start` (SQLite, all services on), 8 actors: 2.1 s of orchestration
a round, 0.16 s with the task-run recorder off (BENCHMARKS.md "Which Prefect server").

The user's server cannot be patched, so the client retries that one answer sooner: up to
`QUICK_DELAYS_S` (0.8 s in all) before Prefect's own schedule takes over, unchanged. Only a
503 with exactly that body and no Retry-After is retried early, so an overloaded server that
asks for time (or answers otherwise) gets Prefect's back-off as before.

Pinned to prefect 3.9 (refused on another: flows/prefect_patches/__init__.py);
tests/test_quick_retry.py checks it against a server that answers busy.
"""

from __future__ import annotations

import inspect
import json
import time

import anyio

from flows.prefect_patches import check_prefect

QUICK_DELAYS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
"""Waits before each early retry of a busy answer; after the last, Prefect's back-off."""
BUSY_BODY = {"exception_message": "Service Unavailable"}
"""The JSON a Prefect server sends with its 503 for a retryable database error."""

_installed = False


def is_busy(response) -> bool:
    """Whether a response is a Prefect server's 503 for a retryable database error."""
    return (response.status_code == 503 and "Retry-After" not in response.headers
            and _is_busy_body(response.read()))


def install() -> None:
    """Wrap the send of both Prefect httpx clients, once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from prefect.client import base

    sync_send, async_send = base.PrefectHttpxSyncClient._send_with_retry, base.PrefectHttpxAsyncClient._send_with_retry
    expected = ["self", "request", "send", "send_args", "send_kwargs", "retry_codes", "retry_exceptions"]
    check_prefect("quick_retry", list(inspect.signature(sync_send).parameters) == expected
                  and list(inspect.signature(async_send).parameters) == expected)

    def sync_with_quick_retry(self, request, send, send_args, send_kwargs, *args, **kwargs):
        def send_quickly(req, *a, **kw):
            response = send(req, *a, **kw)
            for delay in QUICK_DELAYS_S:
                if not is_busy(response):
                    break
                response.close()
                time.sleep(delay)
                response = send(req, *a, **kw)
            return response
        return sync_send(self, request, send_quickly, send_args, send_kwargs, *args, **kwargs)

    async def async_with_quick_retry(self, request, send, send_args, send_kwargs, *args, **kwargs):
        async def send_quickly(req, *a, **kw):
            response = await send(req, *a, **kw)
            for delay in QUICK_DELAYS_S:
                if not await _is_busy_async(response):
                    break
                await response.aclose()
                await anyio.sleep(delay)
                response = await send(req, *a, **kw)
            return response
        return await async_send(self, request, send_quickly, send_args, send_kwargs, *args, **kwargs)

    base.PrefectHttpxSyncClient._send_with_retry = sync_with_quick_retry
    base.PrefectHttpxAsyncClient._send_with_retry = async_with_quick_retry
    _installed = True


async def _is_busy_async(response) -> bool:
    if response.status_code != 503 or "Retry-After" in response.headers:
        return False
    return _is_busy_body(await response.aread())


def _is_busy_body(body: bytes) -> bool:
    try:
        return json.loads(body) == BUSY_BODY
    except ValueError:
        return False

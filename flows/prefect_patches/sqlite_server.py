"""Two fixes to the Prefect API server on SQLite, installed only in the project's own server
(deployments/local_api.py `serve`); a user's server is never patched.

1. Prefect's SQLite server opens write transactions DEFERRED. When the server's task-run
   recorder commits between such a transaction's first read and its first write, SQLite answers
   SQLITE_BUSY_SNAPSHOT at once (busy_timeout cannot help), the API returns 503 and the client
   retries about 2 s later. Measured here: a round subflow took 2.4 s, nearly all of it that
   retry. Here every write transaction begins IMMEDIATE, so writers queue on the busy timeout.
2. Its request limiter counts websockets, so enough flow-run processes hang the whole API
   (limit_only_http_requests).

Pinned to prefect 3.9 (refused on another: flows/prefect_patches/__init__.py);
tests/test_local_api.py checks both.
"""

from __future__ import annotations

import inspect

from flows.prefect_patches import check_prefect

_installed = False


def install() -> None:
    """Both fixes, once per process (idempotent)."""
    global _installed
    if _installed:
        return
    patch_sqlite_write_transactions()
    limit_only_http_requests()
    _installed = True


def patch_sqlite_write_transactions() -> None:
    """Begin every SQLite write transaction IMMEDIATE (see module docstring)."""
    from prefect.server.database import configurations

    original = configurations.AioSqliteConfiguration.begin_transaction
    check_prefect("sqlite_server", "with_for_update" in inspect.signature(original).parameters)

    def begin_immediate(self, session, with_for_update: bool = False):
        return original(self, session, with_for_update=True)

    configurations.AioSqliteConfiguration.begin_transaction = begin_immediate


def limit_only_http_requests() -> None:
    """Let websockets past Prefect's SQLite request limiter.

    On SQLite, Prefect wraps its app in RequestLimitMiddleware (at most 100 requests at once),
    and it counts every ASGI connection, websockets included. Each flow-run process keeps
    event websockets open for its whole life, and the process worker one or more per run it
    watches: measured with 32 warm actor servers, 138 open connections (67 of them the
    worker's), after which every HTTP request, /health included, waited forever for a slot.
    Websockets hold no database transaction while they wait, so only HTTP requests are limited.
    """
    from prefect.server.api import server

    check_prefect("sqlite_server", hasattr(server, "RequestLimitMiddleware"))
    limited = server.RequestLimitMiddleware.__call__

    async def call(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        return await limited(self, scope, receive, send)

    server.RequestLimitMiddleware.__call__ = call

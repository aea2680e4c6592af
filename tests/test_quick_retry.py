"""flows/prefect_patches/quick_retry.py: a Prefect server's 503 for a busy database is retried
after milliseconds; any other 503 gets Prefect's own back-off (here: none, retries set to 0)."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flows.prefect_patches import quick_retry

BUSY = b'{"exception_message":"Service Unavailable"}'


class Answers(BaseHTTPRequestHandler):
    """Answers `busy_first` busy 503s (with `headers`, `body`), then 200; counts the requests."""

    busy_first, body, headers, seen = 0, BUSY, {}, []

    def do_GET(self):
        type(self).seen.append(time.perf_counter())
        busy = len(self.seen) <= self.busy_first
        payload = self.body if busy else b'{"ok":true}'
        self.send_response(503 if busy else 200)
        for key, value in {"Content-Type": "application/json", **(self.headers_out if busy else {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    def start(busy_first: int, body: bytes = BUSY, headers: dict | None = None):
        handler = type("Handler", (Answers,), {"busy_first": busy_first, "body": body,
                                               "headers_out": headers or {}, "seen": []})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", handler.seen

    started: list = []
    yield start
    for httpd in started:
        httpd.shutdown()


def _no_prefect_retries():
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    return temporary_settings(updates={PREFECT_CLIENT_MAX_RETRIES: 0})


def test_a_busy_database_answer_is_retried_within_milliseconds(server):
    from prefect.client.base import PrefectHttpxSyncClient

    quick_retry.install()
    url, seen = server(busy_first=3)
    with _no_prefect_retries(), PrefectHttpxSyncClient(base_url=url) as client:
        started = time.perf_counter()
        response = client.get("/api/flow_runs/x")
        took = time.perf_counter() - started
    assert response.status_code == 200 and len(seen) == 4
    assert took < 0.5  # 0.01 + 0.02 + 0.05 s of waits; Prefect's own first retry waits ~2 s
    gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
    assert all(gap >= wait * 0.9 for gap, wait in zip(gaps, quick_retry.QUICK_DELAYS_S[:3], strict=True))


def test_the_async_client_retries_a_busy_answer_too(server):
    from prefect.client.base import PrefectHttpxAsyncClient

    quick_retry.install()
    url, seen = server(busy_first=2)

    async def get():
        async with PrefectHttpxAsyncClient(base_url=url) as client:
            return await client.get("/api/task_runs/")

    with _no_prefect_retries():
        response = asyncio.run(get())
    assert response.status_code == 200 and len(seen) == 3


def test_a_database_busy_for_longer_falls_back_to_prefects_answer(server):
    from prefect.client.base import PrefectHttpxSyncClient

    quick_retry.install()
    url, seen = server(busy_first=100)
    with _no_prefect_retries(), PrefectHttpxSyncClient(base_url=url, raise_on_all_errors=False) as client:
        response = client.get("/api/flow_runs/x")
    assert response.status_code == 503 and len(seen) == 1 + len(quick_retry.QUICK_DELAYS_S)


@pytest.mark.parametrize("body, headers", [(BUSY, {"Retry-After": "1"}),
                                           (b'{"detail":"overloaded"}', {})])
def test_other_503s_get_prefects_back_off_alone(server, body, headers):
    from prefect.client.base import PrefectHttpxSyncClient

    quick_retry.install()
    url, seen = server(busy_first=1, body=body, headers=headers)
    with _no_prefect_retries(), PrefectHttpxSyncClient(base_url=url, raise_on_all_errors=False) as client:
        response = client.get("/api/flow_runs/x")
    assert response.status_code == 503 and len(seen) == 1

"""The tuned temporary Prefect API (deployments/local_api.py) against a real server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import urllib.request

# More long-lived websockets than Prefect's SQLite request limiter admits (100).
OPEN_SOCKETS = 110


def test_health_answers_while_many_websockets_are_open(prefect_api_url):
    """Flow-run processes and workers hold event websockets for their whole life. Prefect's
    stock SQLite server counts them against its 100-request limit, and past it every HTTP
    request waits forever (seen with 32 warm actor servers); ours limits only HTTP."""
    from websockets.sync.client import connect

    ws_url = prefect_api_url.replace("http://", "ws://") + "/events/in"
    with contextlib.ExitStack() as sockets:
        for _ in range(OPEN_SOCKETS):
            sockets.enter_context(connect(ws_url, open_timeout=10))
        with urllib.request.urlopen(f"{prefect_api_url}/health", timeout=10) as response:
            assert response.status == 200
            assert response.read() == b"true"



def test_clients_of_the_temporary_api_skip_csrf_tokens(prefect_api_url):
    """Its server issues none (CSRF protection off): asking would cost every new client,
    one per round subflow, an API call."""
    from prefect.settings import PREFECT_CLIENT_CSRF_SUPPORT_ENABLED, PREFECT_SERVER_CSRF_PROTECTION_ENABLED

    assert not PREFECT_SERVER_CSRF_PROTECTION_ENABLED.value()
    assert PREFECT_CLIENT_CSRF_SUPPORT_ENABLED.value() is False

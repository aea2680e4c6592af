"""The tuned temporary Prefect API (deployments/local_api.py) against a real server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
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



def test_the_server_batches_its_task_run_recording(prefect_api_url):
    """Prefect's recorder writes each task-run event in its own transaction (batch size 1);
    the server we start batches them (deployments/local_api.py SERVER_DEFAULTS), as the
    server's own settings say."""
    import json

    from deployments.local_api import SERVER_DEFAULTS

    with urllib.request.urlopen(f"{prefect_api_url}/admin/settings", timeout=10) as response:
        recorder = json.loads(response.read())["server"]["services"]["task_run_recorder"]
    assert recorder["batch_size"] == int(SERVER_DEFAULTS["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE"]) > 1
    assert recorder["flush_interval"] == float(SERVER_DEFAULTS["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL"])


def test_clients_of_the_temporary_api_skip_csrf_tokens(prefect_api_url):
    """Its server issues none (CSRF protection off): asking would cost every new client,
    one per round subflow, an API call."""
    from prefect.settings import PREFECT_CLIENT_CSRF_SUPPORT_ENABLED, PREFECT_SERVER_CSRF_PROTECTION_ENABLED

    assert not PREFECT_SERVER_CSRF_PROTECTION_ENABLED.value()
    assert PREFECT_CLIENT_CSRF_SUPPORT_ENABLED.value() is False


def test_the_temporary_api_dies_with_the_process_that_started_it(tmp_path):
    """SIGKILL of the process that started a temporary API (no clean-up runs) takes the API down."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path)
    starter = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom deployments.local_api import prefect_api\n"
         "with prefect_api() as url:\n    print(url, flush=True)\n    time.sleep(600)\n"],
        env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = starter.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
            assert reply.status == 200
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1).close()
            except OSError:
                break  # refused: the server is gone
            time.sleep(0.3)
        else:
            raise AssertionError(f"{url} still answers 15 s after the process that started it was killed")
    finally:
        starter.kill()


def test_a_new_sqlite_database_starts_from_the_template_and_an_existing_one_is_kept(tmp_path):
    """The test suite's servers start from one migrated database (tests/conftest.py): a new
    home's database is a copy of the template; a home that has a database keeps it."""
    import os
    import sqlite3
    import subprocess
    import sys

    from deployments.local_api import DB_TEMPLATE_ENV

    template = tmp_path / "template" / "prefect.db"
    template.parent.mkdir()
    with contextlib.closing(sqlite3.connect(template)) as db:
        db.execute("CREATE TABLE alembic_version (version_num TEXT)")
        db.execute("INSERT INTO alembic_version VALUES ('head-of-the-template')")
        db.commit()

    def seed(home):
        home.mkdir(exist_ok=True)
        env = {**os.environ, "PREFECT_HOME": str(home), DB_TEMPLATE_ENV: str(template)}
        env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
        env.pop("PREFECT_SERVER_DATABASE_CONNECTION_URL", None)
        subprocess.run([sys.executable, "-c", "from deployments.local_api import prepare_sqlite_database; "
                        "prepare_sqlite_database()"], env=env, check=True, timeout=120)
        return home / "prefect.db"

    assert seed(tmp_path / "new").read_bytes() == template.read_bytes()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "prefect.db").write_bytes(b"")  # not a copy of the template: must stay as it is
    assert seed(kept).read_bytes() == b""


def test_three_servers_started_at_once_on_a_new_database_all_come_up(tmp_path):
    """Three first trainings on a new PREFECT_HOME start three servers on one database that does
    not exist yet (no migrated template either): it is created once, under a lock, and every
    server comes up. Without the lock, 2 of 3 tries here had one or two exit with code 3."""
    import subprocess
    import sys
    import time

    from deployments.local_api import DB_TEMPLATE_ENV, _free_port, _healthy

    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", DB_TEMPLATE_ENV)}
    env["PREFECT_HOME"] = str(tmp_path / "new-home")
    ports = [_free_port() for _ in range(3)]
    servers = [subprocess.Popen([sys.executable, "-m", "deployments.local_api", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for port in ports]
    try:
        deadline = time.monotonic() + 120
        up: set[int] = set()
        while len(up) < 3 and time.monotonic() < deadline:
            for port, server in zip(ports, servers, strict=True):
                assert server.poll() is None, f"a server exited with code {server.returncode}: {server.stderr.read()[-2000:]}"
                if port not in up and _healthy(f"http://127.0.0.1:{port}/api"):
                    up.add(port)
            time.sleep(0.2)
        assert len(up) == 3
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


def test_on_request_the_temporary_api_serves_prefects_ui(tmp_path):
    """MINIONSRL_PREFECT_UI=1: the UI's pages answer at the server's root (a flow-run page is the UI's
    app, not the API's {"detail": "Not Found"}), and its address is printed. What the page shows
    needs a browser: benchmarks/ui_check.py clicks through it in headless Chromium."""
    import json
    import os
    import subprocess
    import sys
    import urllib.request

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path), MINIONSRL_PREFECT_UI="1")
    starter = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom deployments.local_api import prefect_api\n"
         "with prefect_api() as url:\n    print(url, flush=True)\n    time.sleep(600)\n"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = starter.stdout.readline().strip()
        base = url.removesuffix("/api")
        for page in ("/", "/runs/flow-run/8c1d4a4e-0000-4000-8000-000000000000"):
            as_a_browser = urllib.request.Request(f"{base}{page}", headers={"Accept": "text/html"})
            with urllib.request.urlopen(as_a_browser, timeout=30) as reply:
                body = reply.read().decode()
            assert reply.status == 200 and "<title>Prefect" in body and "Not Found" not in body, (page, body[:200])
        # the pages call the API the UI's settings name: this server's, not Prefect's default :4200
        with urllib.request.urlopen(f"{base}/ui-settings", timeout=30) as reply:
            assert json.loads(reply.read())["api_url"] == url
    finally:
        starter.kill()
        _, printed = starter.communicate(timeout=30)
    assert f"Prefect UI: {base}" in printed


def test_the_servers_own_cancellation_at_shutdown_is_not_reported_as_an_error():
    """A Ctrl-C ends the training, then its temporary API: a service flushing at that moment is
    cancelled, which is not a failure to print a traceback for; other errors still are."""
    import asyncio
    import logging
    import sys

    from deployments.local_api import quiet_shutdown_cancellation

    def record(error: BaseException) -> logging.LogRecord:
        try:
            raise error
        except BaseException:
            return logging.LogRecord("prefect.server.services.task_run_recorder", logging.ERROR, __file__, 1,
                                     "Error flushing 57 events", None, sys.exc_info())

    def wrapped() -> BaseException:
        try:
            raise asyncio.CancelledError()
        except asyncio.CancelledError as cancelled:
            try:
                raise RuntimeError("the session's execute was interrupted") from cancelled
            except RuntimeError as outer:
                return outer

    assert not quiet_shutdown_cancellation(record(asyncio.CancelledError()))
    assert not quiet_shutdown_cancellation(record(wrapped()))
    assert quiet_shutdown_cancellation(record(ValueError("a real failure")))
    plain = logging.LogRecord("x", logging.ERROR, __file__, 1, "no exception", None, None)
    assert quiet_shutdown_cancellation(plain)

"""A local Prefect API on 127.0.0.1: Prefect's own app, with the two SQLite fixes of
flows/prefect_patches/sqlite_server.py (IMMEDIATE write transactions; a request limiter that
counts only HTTP requests) and batched task-run recording (SERVER_DEFAULTS).

`prefect_api()` starts it as the temporary API when PREFECT_API_URL is unset (ephemeral
services); deployments/local_stack.py starts it with all services as the stack's server. Point
PREFECT_API_URL at any Prefect server (PostgreSQL-backed in production) and none of this runs.
On PostgreSQL (`database="postgres"`, or MINIONSRL_PREFECT_DATABASE=postgres for `python -m
flows.train`) neither fix applies and the same app runs on a throwaway cluster
(deployments/postgres.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from flows.prefect_patches import sqlite_server
from models.errors import ConfigError


def exit_with_parent(parent_pid: int, poll_s: float = 0.5) -> threading.Thread:
    """End this server when the process that started it is gone, however that process ended
    (a SIGKILL runs no clean-up, and the server would otherwise listen on for ever)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown
        time.sleep(5.0)
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


# The task-run recorder builds task runs from their clients' events; by default it writes
# each event in its own transaction (batch size 1). A round of 32 actors sends ~100 such events:
# measured, the server spent 1.0 CPU s a round on the two cores the actors need, 0.46 s with
# these batches (0.39 -> 0.23 s at 8 actors). A task run then appears up to 1 s later.
# Set the variables to override.
SERVER_DEFAULTS = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}


DB_TEMPLATE_ENV = "MINIONSRL_PREFECT_DB_TEMPLATE"


def prepare_sqlite_database() -> None:
    """A new SQLite database, created once however many servers start on it at once: under an
    exclusive lock beside it, the first to come migrates it and registers the block types (or
    copies the migrated template $MINIONSRL_PREFECT_DB_TEMPLATE names, ~10 s of a server's 16 s
    start here); the others wait, then find it complete, as their own start-up does. (Three first trainings on a new
    PREFECT_HOME used to race to create it, and one or two servers exited with code 3.)"""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url.get_secret_value()
    if not url.startswith("sqlite") or ":memory:" in url:
        return
    database = Path(url.split("///", 1)[1].split("?", 1)[0])
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{database}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if database.exists():
            return
        template = os.environ.get(DB_TEMPLATE_ENV)
        if template and Path(template).exists():
            shutil.copyfile(template, database)
            return
        _migrate()
        if template:
            _save_template(database, Path(template))


def _migrate() -> None:
    """What a server's start-up does first to a new database, done here under the lock: the
    migrations, then the block types (concurrent registrations of them collide on their slug)."""
    import asyncio

    from prefect.server.database import provide_database_interface
    from prefect.server.models.block_registration import run_block_auto_registration

    async def create() -> None:
        db = provide_database_interface()
        await db.create_db()
        session = await db.session()
        async with session:
            await run_block_auto_registration(session=session)

    asyncio.run(create())


def _save_template(database: Path, template: Path) -> None:
    """A migrated copy for the next new database (written whole, then renamed)."""
    partial = template.with_name(f"{template.name}.{os.getpid()}.part")
    template.parent.mkdir(parents=True, exist_ok=True)
    # SQLite's backup API reads the database as committed, WAL included
    with contextlib.closing(sqlite3.connect(database)) as source, \
            contextlib.closing(sqlite3.connect(partial)) as copy:
        source.backup(copy)
    os.replace(partial, template)


def serve(port: int, all_services: bool = False, ui: bool = False) -> None:
    """Serve Prefect's app on 127.0.0.1:port with IMMEDIATE write transactions.

    all_services=False runs only the services an ephemeral server runs (enough for flows that
    run in-process); True runs all of them, as `prefect server start` does, for work pools:
    the foreman (worker and pool health), late runs, cancellation clean-up, the scheduler.
    ui=True also serves Prefect's UI at http://127.0.0.1:port/ (Prefect mounts it only on a
    server that is not ephemeral, so every service runs then too).
    """
    if ui:
        os.environ["PREFECT_UI_ENABLED"] = "1"
        # the UI's pages call this server: without it they call Prefect's default 127.0.0.1:4200
        # (unless PREFECT_API_URL names this server), found by benchmarks/ui_check.py
        os.environ.setdefault("PREFECT_UI_API_URL", f"http://127.0.0.1:{port}/api")
    for name, value in SERVER_DEFAULTS.items():  # before Prefect reads its settings
        os.environ.setdefault(name, value)
    import uvicorn

    sqlite_server.install()
    prepare_sqlite_database()
    logging.getLogger("prefect.server.services.task_run_recorder").addFilter(quiet_shutdown_cancellation)
    from prefect.server.api.server import create_app

    uvicorn.run(create_app(ephemeral=not (all_services or ui), final=True), host="127.0.0.1", port=port,
                log_level="error", lifespan="on")


def quiet_shutdown_cancellation(record: logging.LogRecord) -> bool:
    """Drop a service's error whose cause is its own cancellation: the server shutting down in the
    middle of a flush (a Ctrl-C ends a training and then its temporary API), not a failure; its
    traceback would land on the user's console after every interrupted run."""
    error = record.exc_info[1] if record.exc_info else None
    while error is not None and not isinstance(error, asyncio.CancelledError):
        error = error.__cause__ or error.__context__
    return error is None


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


DATABASE_ENV = "MINIONSRL_PREFECT_DATABASE"  # sqlite (default) or postgres
DATABASES = ("sqlite", "postgres")


def database_choice(database: str | None) -> str:
    """database, else $MINIONSRL_PREFECT_DATABASE, else sqlite; ConfigError if neither known."""
    choice = database or os.environ.get(DATABASE_ENV) or "sqlite"
    if choice not in DATABASES:
        raise ConfigError(f"Prefect database {choice!r} (from {'the argument' if database else DATABASE_ENV}): "
                          f"use one of {', '.join(DATABASES)}")
    return choice


@contextlib.contextmanager
def server_database(database: str | None, env: dict[str, str]) -> Iterator[None]:
    """On postgres, a throwaway cluster for the server while the block runs, its URL put in env."""
    if database_choice(database) == "sqlite":
        yield
        return
    from deployments.postgres import temporary_postgres

    with temporary_postgres() as url:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = url
        yield


@contextlib.contextmanager
def prefect_api(timeout_s: float = 120.0, while_starting: Callable[[], None] | None = None,
                database: str | None = None, ui: bool | None = None) -> Iterator[str]:
    """Yield an API URL: PREFECT_API_URL if set, else a temporary local server's.

    ui: the temporary server also serves Prefect's UI (its address is printed); default
    $MINIONSRL_PREFECT_UI=1. Off by default: the UI's server runs every service.

    The temporary server uses Prefect's default database (PREFECT_HOME/prefect.db), so a
    later `prefect server start` shows these runs in the UI; or, with database="postgres"
    (default: $MINIONSRL_PREFECT_DATABASE), a throwaway PostgreSQL cluster, deleted with the
    server. `while_starting` runs in this process while the server starts (it takes 8-20 s):
    a place for one-off warm-up work.
    """
    existing = os.environ.get("PREFECT_API_URL")
    if existing:
        if not _healthy(existing):  # fail in seconds, naming it, rather than after retries
            raise ConfigError(f"the Prefect API at PREFECT_API_URL={existing} does not answer /health; "
                              "start it, or unset PREFECT_API_URL to use a temporary local one")
        if while_starting:
            while_starting()
        yield existing
        return
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    ui = os.environ.get(UI_ENV) == "1" if ui is None else ui
    env = {**os.environ, "PREFECT_UI_ENABLED": "1" if ui else "0", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    with server_database(database, env), _temporary_server(port, api_url, env, timeout_s,
                                                           while_starting, ui) as url:
        if ui:
            print(f"Prefect UI: {api_url.removesuffix('/api')}", file=sys.stderr, flush=True)
        yield url


UI_ENV = "MINIONSRL_PREFECT_UI"
"""=1: the temporary API serves Prefect's UI too."""


@contextlib.contextmanager
def _temporary_server(port: int, api_url: str, env: dict[str, str], timeout_s: float,
                      while_starting: Callable[[], None] | None, ui: bool = False) -> Iterator[str]:
    # its own session: a terminal's Ctrl-C reaches the training, which ends the server in order
    process = subprocess.Popen([sys.executable, "-m", "deployments.local_api", "--port", str(port),
                                "--parent-pid", str(os.getpid()), *(["--ui"] if ui else [])],
                               env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        if while_starting:
            while_starting()
        while not _healthy(api_url):
            if process.poll() is not None:
                raise RuntimeError(f"temporary Prefect API exited with code {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"temporary Prefect API not up after {timeout_s:.0f} s")
            time.sleep(0.2)
        # Every Prefect client's first call asks the API's version; the server's first answer to
        # it took 320-360 ms here (later ones ~2 ms): part of its start, so paid here.
        urllib.request.urlopen(f"{api_url}/admin/version", timeout=30).close()
        drain_prefect_workers()  # events and logs queued so far belong to the API before this one
        os.environ["PREFECT_API_URL"] = api_url
        from prefect.settings import (
            PREFECT_API_URL,
            PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
            PREFECT_SERVER_CSRF_PROTECTION_ENABLED,
            temporary_settings,
        )

        updates = {PREFECT_API_URL: api_url}
        if not PREFECT_SERVER_CSRF_PROTECTION_ENABLED.value():
            # Our server issues no CSRF tokens; without this every new client (one per round
            # subflow) first asks for one: 20-40 ms a round on this machine.
            updates[PREFECT_CLIENT_CSRF_SUPPORT_ENABLED] = False
        with temporary_settings(updates=updates):
            yield api_url
    finally:
        drain_prefect_workers()
        if os.environ.get("PREFECT_API_URL") == api_url:
            del os.environ["PREFECT_API_URL"]
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def drain_prefect_workers() -> None:
    """Send queued logs and events to the API they were made for, and stop their workers.

    Call it before the server goes away (not at interpreter exit) and before this process
    switches to another API: Prefect keeps one EventsWorker per client type, not per API URL
    (prefect/events/worker.py `instance`), so a worker started for an earlier API would carry
    the next API's task-run events to the earlier one, and those task runs would never appear."""
    with contextlib.suppress(Exception):
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)
        EventsWorker.drain_all(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve a tuned temporary Prefect API on 127.0.0.1.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--all-services", action="store_true",
                        help="run every server service, as `prefect server start` does")
    parser.add_argument("--parent-pid", type=int, help="exit when this process (the one that started us) is gone")
    parser.add_argument("--ui", action="store_true", help="also serve Prefect's UI at http://127.0.0.1:<port>/")
    args = parser.parse_args()
    if args.parent_pid:
        exit_with_parent(args.parent_pid)
    serve(args.port, args.all_services, args.ui)

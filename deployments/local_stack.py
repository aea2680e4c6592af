"""A real local Prefect stack: server, process work pool, deployments and worker, torn down clean.

    python -m deployments.local_stack            # up until Ctrl-C; prints PREFECT_API_URL
    python -m deployments.local_stack --database postgres   # the server on a throwaway PostgreSQL

Used by the tests and benchmarks/backends.py, and handy for trying the work-pool backend by hand.

A Prefect server on 127.0.0.1 (free port, PREFECT_HOME in a temp folder, analytics off), the
`minionsrl-process` pool from deployments/work-pools/process.json, `prefect deploy --all
--no-prompt` with the project's prefect.yaml, and `prefect worker start --type process` polling
every second. The server is Prefect's own app with all the services `prefect server start` runs,
but with SQLite write transactions begun IMMEDIATE (deployments/local_api.py): the stock server stalled
on "database is locked" with 32 actor flow runs at once. Teardown kills the worker, every
flow-run process it started (they run in their own sessions, so a process-group kill would miss
them), the server, and with `database="postgres"` the PostgreSQL cluster the server ran on
(deployments/postgres.py: Debian's postgresql package, a new cluster in a temp folder, deleted
at the end; the IMMEDIATE fix and the request limiter do not apply there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from deployments.local_api import DATABASE_ENV, DATABASES, database_choice, drain_prefect_workers
from deployments.processes import die_with_parent
from models.errors import ConfigError
from models.run.config import WorkPoolBackendSpec

ROOT = Path(__file__).resolve().parents[1]  # the project folder (prefect.yaml)
BIN = Path(sys.executable).parent
POOL = "minionsrl-process"
# what the work-pool backend starts: cold actors and warm actor servers
ACTOR_DEPLOYMENTS = (WorkPoolBackendSpec.actor_deployment, WorkPoolBackendSpec.server_deployment)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """All live descendants of pid, from /proc (children first found, grandchildren after)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM a process we started and wait; then SIGKILL it and anything it left behind."""
    if process.poll() is None:
        tree = descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    else:
        tree = []
    for pid in tree + descendants(process.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class PrefectStack:
    """Server + pool + worker, with the environment that every client of it needs."""

    def __init__(self, tmp: Path, mlflow_uri: str | None = None, port: int | None = None,
                 database_url: str | None = None, stock: bool = False):
        self.tmp = tmp
        self.database_url = database_url  # None: SQLite in PREFECT_HOME
        self.stock = stock  # `prefect server start` as a user runs it, nothing patched
        self.port = port or free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.home = tmp / "prefect_home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "true",  # the stack's server serves the UI: watch the runs there
            "PREFECT_CLI_PROMPT": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        if mlflow_uri:
            self.env["MLFLOW_TRACKING_URI"] = mlflow_uri
        self.processes: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        # its own session (a terminal's Ctrl-C is ours to act on), and it dies with us
        process = subprocess.Popen(list(args), cwd=ROOT, env=env or self.env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent())
        self.processes.append(process)
        return process

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(BIN / "prefect"), *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def start_server(self, timeout_s: float = 120) -> None:
        env = dict(self.env)  # only the server gets the database URL (and its password)
        if self.database_url:
            env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = self.database_url
        if self.stock:
            server = self._spawn("server", str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                 "--port", str(self.port), env=env)
        else:
            server = self._spawn("server", sys.executable, "-m", "deployments.local_api", "--port",
                                 str(self.port), "--all-services", "--ui", env=env)
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prefect server did not come up:\n"
                                   + (self.logs / "server.log").read_text()[-3000:])
            time.sleep(0.3)

    def create_pool(self) -> None:
        """`prefect work-pool create --overwrite` with deployments/work-pools/process.json, through
        the client in this process (the CLI's start-up alone took 3.5 s here)."""
        import json

        from prefect import get_client
        from prefect.client.schemas.actions import WorkPoolCreate
        from prefect.settings import PREFECT_API_URL, temporary_settings

        template = json.loads((ROOT / "deployments" / "work-pools" / "process.json").read_text())
        with temporary_settings(updates={PREFECT_API_URL: self.api_url}), \
                get_client(sync_client=True) as client:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process", base_job_template=template),
                                    overwrite=True)

    def deploy(self, names: tuple[str, ...] = ()) -> str:
        """`prefect deploy` of prefect.yaml: every deployment, or only the named ones
        ('flow/deployment'). Measured here: all twelve 10.7 s, the two actor ones 5.3 s."""
        selection = [arg for name in names for arg in ("--name", name)] or ["--all"]
        return self.cli("deploy", *selection, "--no-prompt", timeout=300).stdout

    def start_worker(self, limit: int | None = None) -> None:
        """`prefect worker start --type process`; limit: most flow runs it runs at once."""
        extra = ["--limit", str(limit)] if limit else []
        self._spawn("worker", str(BIN / "prefect"), "worker", "start", "--pool", POOL,
                    "--type", "process", "--name", "local-worker", *extra)

    def stop(self) -> None:
        for process in reversed(self.processes):  # worker (and its flow runs) first, server last
            kill_tree(process)
        self.processes.clear()

    @contextlib.contextmanager
    def client_env(self) -> Iterator[None]:
        """Point this process's Prefect client at the stack (env and settings), then restore."""
        from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

        saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
        drain_prefect_workers()  # what was queued so far goes to the API before this one
        os.environ.update(PREFECT_API_URL=self.api_url, PREFECT_HOME=str(self.home))
        try:
            with temporary_settings(updates={PREFECT_API_URL: self.api_url, PREFECT_HOME: str(self.home)}):
                yield
        finally:
            drain_prefect_workers()  # while the stack's server is still up
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@contextlib.contextmanager
def prefect_stack(tmp: Path, mlflow_uri: str | None = None, deploy: bool = True,
                  port: int | None = None, worker_limit: int | None = None,
                  database: str | None = None, deployments: tuple[str, ...] = (),
                  stock: bool = False) -> Iterator[PrefectStack]:
    """database: "sqlite" (PREFECT_HOME/prefect.db) or "postgres" (a throwaway cluster);
    None: $MINIONSRL_PREFECT_DATABASE, else sqlite. deployments: deploy only these (with
    deploy=True), e.g. ACTOR_DEPLOYMENTS for the work-pool backend alone; () deploys all.
    stock: the server is `prefect server start`, unpatched (a user's; benchmarks/deployment_rounds.py)."""
    with contextlib.ExitStack() as cleanup:
        url = None
        if database_choice(database) == "postgres":
            from deployments.postgres import temporary_postgres

            url = cleanup.enter_context(temporary_postgres())  # stopped after the server
        stack = PrefectStack(Path(tmp), mlflow_uri, port, database_url=url, stock=stock)
        cleanup.callback(stack.stop)
        stack.start_server()
        stack.create_pool()
        if deploy:
            stack.deploy(deployments)
        stack.start_worker(worker_limit)
        yield stack


def main() -> None:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="folder for PREFECT_HOME and logs (default: a temp folder)")
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--mlflow-uri", help="MLFLOW_TRACKING_URI for flow runs (absolute sqlite path)")
    parser.add_argument("--database", choices=DATABASES,
                        help="the server's database: sqlite (PREFECT_HOME/prefect.db; the default, or "
                             f"${DATABASE_ENV}), or postgres: a throwaway PostgreSQL cluster (Debian's "
                             "postgresql package), deleted at the end")
    args = parser.parse_args()
    folder = Path(args.home or tempfile.mkdtemp(prefix="minionsrl-stack-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill, too, runs the teardown
    try:
        with prefect_stack(folder, args.mlflow_uri, port=args.port, database=args.database) as stack:
            print(f"export PREFECT_API_URL={stack.api_url} PREFECT_HOME={stack.home}\n"
                  f"logs in {stack.logs}; Ctrl-C stops the worker, its flow runs and the server"
                  + (", and deletes its PostgreSQL cluster"
                 if database_choice(args.database) == "postgres" else ""))
            with contextlib.suppress(KeyboardInterrupt):
                while all(p.poll() is None for p in stack.processes):
                    time.sleep(1)
    except ConfigError as exc:  # no PostgreSQL: one line, nothing started
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()

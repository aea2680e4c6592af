"""The local stack's Prefect server on PostgreSQL (deployments/postgres.py): a real throwaway
cluster from Debian's postgresql package, a real server on it, a real two-round training, and
the runs read back from PostgreSQL itself."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployments import postgres  # noqa: E402
from models.errors import ConfigError  # noqa: E402

try:
    postgres.find_bindir()
    MISSING = None
except ConfigError as exc:
    MISSING = str(exc)
needs_postgres = pytest.mark.skipif(MISSING is not None, reason=f"no PostgreSQL binaries: {MISSING}")


def query(url: str, sql: str) -> list:
    import asyncpg

    async def run() -> list:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_missing_binaries_are_named_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(postgres, "PACKAGE_ROOT", tmp_path / "nothing")
    monkeypatch.setattr(postgres, "LOCAL_BIN", tmp_path)
    with pytest.raises(ConfigError, match="apt-get install -y postgresql"):
        with postgres.temporary_postgres():
            pytest.fail("started without binaries")
    from deployments.local_api import database_choice

    with pytest.raises(ConfigError, match="sqlite, postgres"):
        database_choice("mysql")


def server_pids(folder: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"postgres -D {folder}/data"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def cluster_folder(url: str) -> str:
    """The folder of the cluster serving url, from its server's command line (-D <folder>/data)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    out = subprocess.run(["pgrep", "-af", f"postgres -D .* -p {port} "], capture_output=True, text=True)
    (line,) = out.stdout.splitlines()
    return os.path.dirname(line.split(" -D ")[1].split()[0])


@needs_postgres
def test_the_cluster_is_stopped_and_deleted_even_after_ctrl_c():
    with pytest.raises(KeyboardInterrupt):
        with postgres.temporary_postgres() as url:
            folder = cluster_folder(url)
            assert os.path.isdir(folder) and server_pids(folder)
            assert query(url, "select current_setting('synchronous_commit')") == [("off",)]
            raise KeyboardInterrupt
    assert not os.path.exists(folder)
    assert not server_pids(folder)


@needs_postgres
def test_a_sigkilled_parent_takes_its_server_with_it():
    code = ("import time\nfrom deployments.postgres import temporary_postgres\n"
            "with temporary_postgres() as url:\n    print(url, flush=True)\n    time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    folder = None
    try:
        folder = cluster_folder(parent.stdout.readline().strip())
        assert server_pids(folder)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while server_pids(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not server_pids(folder)  # the folder stays: nothing ran to delete it
    finally:
        parent.kill()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.e2e
@needs_postgres
def test_train_on_the_stack_with_its_server_on_postgres(tmp_path):
    from deployments.local_stack import prefect_stack
    from flows.train import train

    store = tmp_path / "mlruns"
    store.mkdir()
    mlflow_uri = f"sqlite:///{store / 'mlflow.db'}"
    with prefect_stack(tmp_path / "stack", mlflow_uri, deploy=False, database="postgres") as stack, \
            stack.client_env():
        assert stack.database_url.startswith("postgresql+asyncpg://")
        summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=2, fragment=128, seed=5,
                        tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"), local_workers=2)
        assert summary.rounds == 2
        flow_runs = query(stack.database_url, "select f.name, r.name, r.state_type from flow_run r "
                                              "join flow f on f.id = r.flow_id")
        # Task runs reach the database through events, recorded by the server a moment later.
        wanted = {"rollout-r0-a0", "rollout-r0-a1", "rollout-r1-a0", "rollout-r1-a1", "update-r0", "update-r1",
                  "schedule-r0", "schedule-r1"}
        deadline = time.monotonic() + 30
        while True:
            task_runs = {name for (name,) in query(stack.database_url, "select name from task_run")}
            if wanted <= task_runs or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not (stack.home / "prefect.db").exists()  # nothing went to SQLite
    runs = {(flow, name): state for flow, name, state in flow_runs}
    assert runs[("train", "CartPole-v1-fixed2-seed5")] == "COMPLETED"
    assert runs[("train-round", "round-0-x2")] == runs[("train-round", "round-1-x2")] == "COMPLETED"
    assert wanted <= task_runs

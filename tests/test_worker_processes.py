"""Actor processes forked from the preloaded fork server (tasks/worker_processes.py)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tasks.local_pool import LocalActorPool  # noqa: E402
from tasks.worker_processes import PRELOAD, main_imports, worker_context  # noqa: E402
from tests.slow_env import ECHO, ECHO_FILE_ENV  # noqa: E402
from tests.test_backends_local import make_job  # noqa: E402

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no fork server on this platform (spawn is used)")


def test_workers_start_from_the_fork_server_with_the_actor_modules_preloaded():
    ctx = worker_context()
    assert ctx.get_start_method() == "forkserver"
    assert {"torch", "gymnasium", "models.rl.rollout", "tasks.local_pool"} <= set(PRELOAD)


def test_what_the_main_modules_globals_come_from_is_preloaded(monkeypatch):
    main = types.ModuleType("__main__")
    import flows.cli
    import models.envs.batch
    from models.run.presets import preset_for

    main.flows, main.preset_for, main.envs = flows, preset_for, models.envs.batch
    monkeypatch.setitem(sys.modules, "__main__", main)
    found = main_imports()
    assert {"flows", "flows.cli", "models.run.presets", "models.envs.batch"} <= set(found)
    assert "__main__" not in found and "builtins" not in found


def test_each_pool_gets_fresh_processes_that_see_the_parents_current_environment(tmp_path, monkeypatch):
    first = LocalActorPool(workers=1, warm_env_id="CartPole-v1")
    try:
        first.wait_ready()
        first_pids = set(first.pids())
    finally:
        first.close()
    # set after the fork server started (it started with the first pool, or earlier)
    echo = tmp_path / "environ.json"
    monkeypatch.setenv(ECHO_FILE_ENV, str(echo))
    monkeypatch.setenv("MINIONSRL_TEST_MARK", "set-after-the-fork-server")
    second = LocalActorPool(workers=1, warm_env_id="CartPole-v1")
    try:
        batch = second.run(make_job(ECHO), timeout_s=60)
        assert batch.steps == 64
        assert set(second.pids()).isdisjoint(first_pids)  # new processes, not reused ones
        seen = json.loads(echo.read_text())
        assert seen["MINIONSRL_TEST_MARK"] == "set-after-the-fork-server"
        assert batch.timings.worker_pid != os.getpid()
    finally:
        second.close()


def test_run_aside_runs_in_another_process_and_returns_its_result_or_its_error(tmp_path):
    from models.report.run_report import plot_rounds
    from tasks.worker_processes import run_aside
    from tests.test_report import HISTORY

    assert run_aside(os.getpid).result(timeout=60) != os.getpid()
    paths = run_aside(plot_rounds, list(HISTORY), tmp_path, title="CartPole-v1").result(timeout=60)
    assert [p.name for p in paths] == ["return.png", "actors.png", "cost.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
    with pytest.raises(ValueError, match="invalid literal"):
        run_aside(int, "not a number").result(timeout=60)


def test_a_readied_fork_server_leaves_the_first_pool_only_its_own_forks_to_bill():
    """Readied first (as an experiment does before its first run), the preload is not in the
    first pool's start-up: a fresh process, so that no earlier test has started the server."""
    import subprocess

    code = ("from tasks.worker_processes import ready_worker_server\n"
            "from tasks.local_pool import LocalActorPool\n"
            "ready_s = ready_worker_server()\n"
            "pool = LocalActorPool(workers=1, warm_env_id='CartPole-v1')\n"
            "pool.wait_ready()\n"
            "print(ready_s, pool.take_startup_s())\n"
            "pool.close()\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ready_s, first_pool_boot_s = map(float, out.stdout.split()[-2:])
    # the preload imports torch and gymnasium (seconds); a fork from it builds one CartPole
    assert 0 < first_pool_boot_s < ready_s / 2

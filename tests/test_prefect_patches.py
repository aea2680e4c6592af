"""flows/prefect_patches: nothing is patched by importing the project, each patch refuses a Prefect
it was not written for (naming itself and both versions), and `install()` patches the client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows import prefect_patches
from flows.prefect_patches import PrefectVersionError, check_prefect

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ("heartbeats", "tls_context", "lean_subflow", "quick_retry", "shared_task_runner", "sqlite_server")


def test_the_installed_prefect_is_the_one_the_patches_were_written_for():
    check_prefect("heartbeats")  # no error


@pytest.mark.parametrize("patch", PATCHES)
def test_another_prefect_is_refused_naming_the_patch_and_both_versions(patch):
    with pytest.raises(PrefectVersionError) as err:
        check_prefect(patch, installed="3.10.0")
    message = str(err.value)
    assert f"flows/prefect_patches/{patch}.py" in message and "3.10.0" in message and "3.9.x" in message
    assert "pip install 'prefect>=3.9,<3.10'" in message


def test_code_of_another_shape_is_refused_even_on_the_pinned_version():
    with pytest.raises(PrefectVersionError, match="has the version but not the code"):
        check_prefect("lean_subflow", shape_ok=False, installed="3.9.1")


@pytest.mark.parametrize("patch", PATCHES)
def test_every_patch_refuses_when_installed_on_another_prefect(patch, monkeypatch):
    import prefect

    from flows.prefect_patches import (
        heartbeats,
        lean_subflow,
        quick_retry,
        shared_task_runner,
        sqlite_server,
        tls_context,
    )

    modules = {"heartbeats": heartbeats, "tls_context": tls_context, "lean_subflow": lean_subflow,
               "quick_retry": quick_retry, "sqlite_server": sqlite_server}
    monkeypatch.setattr(prefect, "__version__", "3.10.0")
    if patch == "shared_task_runner":
        with pytest.raises(PrefectVersionError, match="shared_task_runner"):
            shared_task_runner.SharedThreadPoolTaskRunner(max_workers=1)
        return
    module = modules[patch]
    monkeypatch.setattr(module, "_installed", False)
    originals = _patched_attributes()
    with pytest.raises(PrefectVersionError, match=patch):
        module.install() if patch != "sqlite_server" else sqlite_server.patch_sqlite_write_transactions()
    assert _patched_attributes() == originals  # refused before touching Prefect


def _patched_attributes():
    from prefect import flow_engine
    from prefect.client import base, orchestration
    from prefect.server.api import server
    from prefect.server.database import configurations

    engine = flow_engine.FlowRunEngine
    return (flow_engine._send_heartbeats, engine.create_flow_run, engine.begin_run, engine.setup_run_context,
            orchestration.PrefectClient.__init__, orchestration.SyncPrefectClient.__init__,
            base.PrefectHttpxSyncClient._send_with_retry, base.PrefectHttpxAsyncClient._send_with_retry,
            configurations.AioSqliteConfiguration.begin_transaction, server.RequestLimitMiddleware.__call__)


def test_importing_the_flows_patches_nothing_and_install_patches_the_client():
    code = ("from prefect import flow_engine\n"
            "from prefect.client import orchestration\n"
            "from prefect.client import base\n"
            "before = (flow_engine._send_heartbeats, flow_engine.FlowRunEngine.create_flow_run,\n"
            "          orchestration.SyncPrefectClient.__init__, base.PrefectHttpxSyncClient._send_with_retry)\n"
            "import flows.train, flows.impact, flows.scheduler_flows, flows.experiments.cli, flows.actor\n"
            "after_import = (flow_engine._send_heartbeats, flow_engine.FlowRunEngine.create_flow_run,\n"
            "                orchestration.SyncPrefectClient.__init__, base.PrefectHttpxSyncClient._send_with_retry)\n"
            "from flows import prefect_patches\n"
            "prefect_patches.install()\n"
            "installed = (flow_engine._send_heartbeats, flow_engine.FlowRunEngine.create_flow_run,\n"
            "             orchestration.SyncPrefectClient.__init__, base.PrefectHttpxSyncClient._send_with_retry)\n"
            "print(before == after_import, all(a is not b for a, b in zip(before, installed)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "True"]


def test_the_package_docstring_lists_every_patch_module():
    modules = {p.stem for p in (ROOT / "flows" / "prefect_patches").glob("*.py")} - {"__init__"}
    assert modules == set(PATCHES)
    assert all(f"| {name} |" in prefect_patches.__doc__ for name in PATCHES)

"""Shared fixtures: a real temporary Prefect API and a real MLflow store in a temp dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session", autouse=True)
def prefect_database_template(tmp_path_factory):
    """Every fresh SQLite Prefect server of the session (ours, the stacks', those of the
    subprocesses) starts from one migrated database (deployments/local_api.py
    prepare_sqlite_database): each server's start falls from ~16 s to ~7 s here."""
    from deployments.local_api import DB_TEMPLATE_ENV

    saved = os.environ.get(DB_TEMPLATE_ENV)
    os.environ[DB_TEMPLATE_ENV] = str(tmp_path_factory.getbasetemp() / "prefect-db-template" / "prefect.db")
    yield
    if saved is None:
        os.environ.pop(DB_TEMPLATE_ENV, None)
    else:
        os.environ[DB_TEMPLATE_ENV] = saved


@pytest.fixture(scope="session")
def prefect_api_url(tmp_path_factory):
    """One temporary Prefect API server on 127.0.0.1 for the whole session, with its own home."""
    home = tmp_path_factory.mktemp("prefect_home")
    saved = {k: os.environ.get(k) for k in ("PREFECT_HOME", "PREFECT_API_URL")}
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.pop("PREFECT_API_URL", None)
    from deployments.local_api import prefect_api

    with prefect_api() as url:
        yield url
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def fault_dir(tmp_path_factory):
    """Where tests/slow_env.py's faulty envs note what they did: set for the rest of the session
    before any actor process or worker that needs it starts (the shared stack's worker included)."""
    from tests.slow_env import FAULT_DIR_ENV

    folder = tmp_path_factory.mktemp("fault_notes")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAULT_DIR_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def workpool_stack(fault_dir, tmp_path_factory):
    """One Prefect server, process pool, actor deployments and worker for every work-pool test
    (each module points its client at it with `client_env()`): a stack's start costs ~13 s here.
    The tests that use it run last, together (pytest_collection_modifyitems), so it is not idle
    through the rest of the suite; they filter what they read from it to their own runs."""
    from deployments.local_stack import ACTOR_DEPLOYMENTS, prefect_stack

    with prefect_stack(tmp_path_factory.mktemp("workpool_stack"), deployments=ACTOR_DEPLOYMENTS) as stack:
        yield stack


def pytest_collection_modifyitems(items):
    """The tests on the shared work-pool stack go last, in their collected order."""
    on_stack = [item for item in items if "workpool_stack" in getattr(item, "fixturenames", ())]
    if on_stack:
        moved = set(map(id, on_stack))
        items[:] = [item for item in items if id(item) not in moved] + on_stack


@pytest.fixture(scope="session")
def mlflow_store_template(tmp_path_factory) -> Path:
    """One migrated MLflow SQLite store for the session, made on first use: creating a store's
    schema (its migrations) costs ~1 s here, copying the file a millisecond."""
    from mlflow.tracking import MlflowClient

    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{template}").search_experiments(max_results=1)
    return template


@pytest.fixture
def mlflow_uri(tmp_path, mlflow_store_template):
    """A store of the test's own, already migrated (a copy of the session's template); a test of
    what happens on a brand-new store names a path of its own instead."""
    store = tmp_path / "mlruns"
    store.mkdir()
    shutil.copyfile(mlflow_store_template, store / "mlflow.db")
    return f"sqlite:///{store / 'mlflow.db'}"


@pytest.fixture
def new_mlflow_uri(tmp_path):
    """A store that does not exist yet: the first client to open it creates its schema."""
    store = tmp_path / "new-mlruns"
    store.mkdir()
    return f"sqlite:///{store / 'mlflow.db'}"

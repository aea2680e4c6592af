"""Shared fixtures: a real temporary Prefect API and a real MLflow store in a temp dir."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


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


@pytest.fixture
def mlflow_uri(tmp_path):
    store = tmp_path / "mlruns"
    store.mkdir()
    return f"sqlite:///{store / 'mlflow.db'}"

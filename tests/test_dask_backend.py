"""The dask backend on a real LocalCluster: two training rounds, and a timed-out actor."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # Dask's worker processes copy sys.path: they find tests.slow_env
    sys.path.insert(0, str(ROOT))

from tests.slow_env import HANG  # noqa: E402
from tests.test_backends_local import make_job  # noqa: E402

pytestmark = pytest.mark.e2e


def test_train_two_rounds_on_a_local_dask_cluster(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=2, fragment=128, seed=5,
                    backend="dask", local_workers=2, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path / "ckpt"))
    assert summary.rounds == 2 and summary.env_steps == 2 * 2 * 128
    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.data.tags["minionsrl.backend"] == "dask"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "time/actor_startup_s"))
    assert steps == [0, 1]


def test_dask_actor_past_its_timeout_restarts_its_worker():
    from models.run.config import DaskBackendSpec
    from tasks.backends import ActorError, make_backend

    backend = make_backend(DaskBackendSpec(workers=2), "CartPole-v1")
    try:
        first = backend.run(make_job(), timeout_s=120)
        assert first.timings.cold_start in (False, True) and first.steps == 64
        before = set(backend.client.scheduler_info()["workers"])
        started = time.monotonic()
        with pytest.raises(ActorError) as info:
            backend.run(make_job(HANG, actor=1), timeout_s=3.0)
        assert info.value.timed_out and time.monotonic() - started < 3.0 + 1.5
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            after = set(backend.client.scheduler_info()["workers"])
            if len(after) == 2 and after != before:
                break
            time.sleep(0.5)
        assert len(after - before) == 1  # the hung worker was replaced by a fresh process
        second = backend.run(make_job(actor=2), timeout_s=120)
        assert second.steps == 64
    finally:
        backend.close()

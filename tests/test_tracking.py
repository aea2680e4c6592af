"""The MLflow side of a run: store checks, the creation lock, failure reasons."""

from __future__ import annotations

import threading

import pytest

from flows.tracking import RunTracker
from models.errors import ConfigError


def test_start_on_a_new_store_without_open_does_not_deadlock_on_its_own_lock(new_mlflow_uri):
    tracker = RunTracker(new_mlflow_uri)
    done = threading.Event()

    def start():
        tracker.start("exp", "run", params={"a": 1})
        done.set()

    threading.Thread(target=start, daemon=True).start()
    assert done.wait(60), "RunTracker.start hung on the store lock"
    tracker.finish("FAILED", RuntimeError("why it failed"))
    run = tracker.client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["minionsrl.failure"] == "RuntimeError: why it failed"


def test_stores_that_cannot_work_are_named_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"http://127.0.0.1:9 is unreachable"):
        RunTracker("http://127.0.0.1:9").check_reachable()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create its folder"):
        RunTracker(f"sqlite:///{blocker}/sub/mlflow.db").check_reachable()


def test_a_missing_storage_block_or_deployment_is_named_before_any_actor_starts(prefect_api_url):
    import time

    from models.run.config import WorkPoolBackendSpec
    from tasks.backends import make_backend

    started = time.monotonic()
    with pytest.raises(ConfigError, match="storage block 'azure-blob-storage-container/no-such-block' not found"):
        make_backend(WorkPoolBackendSpec(storage_block="azure-blob-storage-container/no-such-block"), "CartPole-v1")
    with pytest.raises(ConfigError, match="deployment 'actor/no-such-actor' not found"):
        make_backend(WorkPoolBackendSpec(actor_deployment="actor/no-such-actor",
                                         storage_block="local-file-system/minionsrl-test-store"),
                     "CartPole-v1")
    assert time.monotonic() - started < 10


def test_experiments_open_in_mlflows_model_training_view(mlflow_uri):
    """MLflow 3 shows an experiment without mlflow.experimentKind as a GenAI one; ours are marked
    as model training when created, and older ones when a run opens them, unless a user chose."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    older = client.create_experiment("older")
    client.create_experiment("chosen", tags={"mlflow.experimentKind": "genai_development"})
    for name in ("new", "older", "chosen"):
        RunTracker(mlflow_uri).start(name, "run", params={})
    kinds = {name: client.get_experiment_by_name(name).tags.get("mlflow.experimentKind")
             for name in ("new", "older", "chosen")}
    assert kinds == {"new": "custom_model_development", "older": "custom_model_development",
                     "chosen": "genai_development"}
    client.delete_experiment_tag(older, "mlflow.experimentKind")
    resumed = RunTracker(mlflow_uri)
    resumed.resume(client.search_runs([older])[0].info.run_id)
    assert client.get_experiment(older).tags["mlflow.experimentKind"] == "custom_model_development"


def test_experiments_carry_a_runs_view_with_return_time_and_cost_as_columns(mlflow_uri):
    import json

    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    tracker = RunTracker(mlflow_uri)
    tracker.start("viewed", "run", params={})
    view = json.loads(client.get_experiment(tracker.experiment_id).tags["mlflow.sharedViewState.minionsrl"])
    assert view["selectedColumns"][:3] == ["metrics.`summary/target_reached`", "metrics.`summary/time_to_stop_s`",
                                           "metrics.`summary/cost_usd`"]
    assert "viewStateShareKey=minionsrl" in tracker.run_url_hint()


def test_metrics_are_written_in_the_background_and_all_there_once_the_run_finishes(mlflow_uri):
    tracker = RunTracker(mlflow_uri)
    tracker.start("exp", "async", params={})
    for step in range(20):
        tracker.log_metrics({"x": float(step), "y": 2.0 * step}, step=step)
    assert tracker.has_metric_at("x", 19)  # a read waits for what was queued
    tracker.log_metrics({"x": 20.0}, step=20)
    tracker.finish()
    history = sorted(tracker.client.get_metric_history(tracker.run_id, "x"), key=lambda m: m.step)
    assert [m.value for m in history] == [float(s) for s in range(21)]
    assert tracker.client.get_run(tracker.run_id).info.status == "FINISHED"


def test_a_metric_write_that_fails_fails_the_run_and_says_why(mlflow_uri):
    from mlflow.exceptions import MlflowException

    tracker = RunTracker(mlflow_uri)
    tracker.start("exp", "bad-metric", params={})
    tracker.log_metrics({"fine": 1.0}, step=0)
    tracker.log_metrics({"not a valid name?": 1.0}, step=1)  # MLflow refuses the key
    with pytest.raises(MlflowException):
        tracker.finish("FINISHED")
    run = tracker.client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert "not a valid name?" in run.data.tags["minionsrl.failure"]
    assert [m.value for m in tracker.client.get_metric_history(tracker.run_id, "fine")] == [1.0]

"""A training run's Prefect artifacts (read back through the Prefect client), its MLflow plots
and model; and that an artifact that cannot be published never fails training."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from models.report.run_report import artifact_key
from models.run.records import RoundRecord, RunProgress
from models.scheduling.training import SchedulerEpisodeRecord


@pytest.mark.e2e
def test_train_publishes_progress_rounds_summary_plots_and_model(prefect_api_url, mlflow_uri, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.train import train

    summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=3, fragment=64, seed=5,
                    tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"), local_workers=2,
                    register_model="ux-test-policy")
    keys = {kind: artifact_key(kind, summary.run_id) for kind in ("progress", "rounds", "summary")}
    with get_client(sync_client=True) as prefect:
        found = {a.key: a for a in prefect.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys.values()))))}
        progress, rounds, text = found[keys["progress"]], found[keys["rounds"]], found[keys["summary"]]
        train_run = prefect.read_flow_run(progress.flow_run_id)
    assert train_run.name == "CartPole-v1-fixed2-seed5"  # the artifacts belong to the train flow run
    assert progress.type == "progress" and float(progress.data) == 100.0
    assert progress.description.startswith(("K=3 rounds done", "J=500 reached", "J=475 reached"))
    assert rounds.type == "table" and rounds.flow_run_id == progress.flow_run_id
    import json
    rows = json.loads(rounds.data)
    assert [r["round"] for r in rows] == [0, 1, 2] and all(r["actors"] == 2 for r in rows)
    assert text.type == "markdown"
    assert f"**Stopped: {summary.stop_reason}**" in text.data and summary.run_id in text.data
    assert "mlflow.pyfunc.load_model('models:/m-" in text.data and "ux-test-policy version 1" in text.data

    client = MlflowClient(mlflow_uri)
    plots = sorted(a.path for a in client.list_artifacts(summary.run_id, "plots"))
    assert plots == ["plots/actors.png", "plots/cost.png", "plots/return.png"]
    run = client.get_run(summary.run_id)
    budget = float(run.data.params["budget_usd"])
    assert math.isclose(rows[-1]["budget left ($)"], budget - summary.cost_usd, abs_tol=1e-6)
    assert run.data.tags["minionsrl.model_uri"].startswith("models:/m-")
    version = client.get_model_version("ux-test-policy", "1")
    assert version.run_id == summary.run_id
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


class FakeTracker:
    tracking_uri, experiment_id, run_id = "sqlite:////nowhere/mlflow.db", "1", "abcdef0123456789"

    def __init__(self):
        self.logged, self.tags = [], {}

    def log_artifact(self, path, artifact_path=None):
        self.logged.append(f"{artifact_path}/{path.name}")

    def set_tags(self, tags):
        self.tags.update(tags)


def fake_session(rounds: int):
    history = [RoundRecord(k, 2, 10.0 * k, 128, 1.0, 1.5, 0.2, 0.8, 0.001, 0.1, 0.01) for k in range(rounds)]
    cfg = SimpleNamespace(env_id="CartPole-v1", max_rounds=10, max_env_steps=None, target_return=475.0, budget_usd=0.05)
    return SimpleNamespace(run_id="abcdef0123456789", cfg=cfg, round_index=rounds, stop_reason=None,
                           last=history[-1] if history else None,
                           progress=RunProgress(round_index=rounds, history=history, spent_usd=0.001 * rounds))


def test_an_artifact_that_cannot_be_published_never_fails_training(monkeypatch, caplog):
    import prefect.artifacts

    from flows.artifacts import RunArtifacts

    def down(*args, **kwargs):
        raise ConnectionError("the Prefect API is down")

    for name in ("create_progress_artifact", "update_progress_artifact", "create_table_artifact",
                 "create_markdown_artifact"):
        monkeypatch.setattr(prefect.artifacts, name, down)
    session, tracker = fake_session(0), FakeTracker()
    logger = logging.getLogger("test-artifacts")
    with caplog.at_level(logging.WARNING, logger="test-artifacts"):
        artifacts = RunArtifacts(session, tracker, logger, table_every=2)
        for k in range(1, 5):
            session.__dict__.update(vars(fake_session(k)))
            artifacts.round_done(session)
        artifacts.failed(RuntimeError("boom"))
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "progress" in w]) == 1  # once per kind, not every round
    assert any("'rounds' not published: ConnectionError" in w for w in warnings)
    assert sorted(tracker.logged) == ["plots/actors.png", "plots/cost.png", "plots/return.png"]
    calls = [what for what, _ in artifacts.timings]
    assert calls.count("progress") == 5 and calls.count("rounds") == 3  # rounds 2 and 4, and at the failure


def test_plots_that_cannot_be_drawn_are_a_warning_and_the_run_goes_on(monkeypatch, caplog):
    import flows.artifacts
    from flows.artifacts import RunArtifacts

    def no_process(*args, **kwargs):
        raise OSError("no process can be started")

    monkeypatch.setattr(flows.artifacts, "run_aside", no_process)
    session, tracker = fake_session(3), FakeTracker()
    logger = logging.getLogger("test-artifacts-plots")
    with caplog.at_level(logging.WARNING, logger="test-artifacts-plots"):
        artifacts = RunArtifacts(session, tracker, logger)
        artifacts.start_plots()  # as `train` does when its rounds end
        artifacts.log_plots()
    assert tracker.logged == []
    assert any("plots not logged to MLflow: OSError: no process can be started" in r.getMessage()
               for r in caplog.records)


@pytest.mark.e2e
def test_scheduler_training_artifacts(prefect_api_url, caplog):
    from prefect import flow, get_client

    from flows.artifacts import EpisodeArtifacts

    tracker = FakeTracker()
    episode = SchedulerEpisodeRecord(episode=0, run_id="r0", actors=[6, 7] * 4, reward=-1.5, time_to_stop_s=3.25,
                                     cost_usd=0.0012, server_cluster_cost_usd=0.01,
                                     server_cluster_cost_no_startup_usd=0.005, rounds=8, target_reached=True,
                                     best_return=480.0, wall_time_s=4.0)

    @flow(name="ux-scheduler-artifacts")
    def training():
        artifacts = EpisodeArtifacts("feedface99", 4, 0, logging.getLogger("test-artifacts"))
        artifacts.episodes_done(2, -1.5, [episode])
        artifacts.finished("CartPole-v1", [episode], 1, "runs:/r/scheduler/scheduler.pt", tracker)
        return artifacts.keys

    with caplog.at_level(logging.WARNING, logger="test-artifacts"):
        keys = training()
    assert not caplog.records
    with get_client(sync_client=True) as prefect:
        progress = prefect.read_latest_artifacts()
        by_key = {a.key: a for a in progress}
    assert float(by_key[keys["scheduler-progress"]].data) == 50.0
    assert by_key[keys["scheduler-progress"]].description == "2 of 4 scheduler episodes done, last reward -1.5"
    assert "| 0 | -1.5 | 8 | yes |" in by_key[keys["scheduler-summary"]].data
    import json

    assert json.loads(by_key[keys["scheduler-episodes"]].data) == [
        {"episode": 0, "reward": -1.5, "rounds": 8, "J reached": "yes", "time to stop (s)": 3.25,
         "cost ($)": 0.0012, "mean actors": 6.5}]


@pytest.mark.e2e
def test_a_failed_impact_training_publishes_its_chunks_and_the_error(prefect_api_url, caplog):
    import json

    from prefect import flow, get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

    from flows.artifacts import ImpactArtifacts
    from models.impact.config import ImpactRunConfig
    from models.impact.progress import ImpactChunkRecord

    cfg = ImpactRunConfig(env_id="CartPole-v1", target_return=475.0, max_env_steps=10_000, max_wall_s=60.0)

    @flow(name="ux-impact-artifacts")
    def training():
        artifacts = ImpactArtifacts(cfg, FakeTracker(), logging.getLogger("test-artifacts"), table_every=5)
        for i in range(2):
            artifacts.chunk_done(ImpactChunkRecord(i, 5 * (i + 1), 1000 * (i + 1), 20.0, 0.5, 2.0 * (i + 1),
                                                   2.0 * (i + 1), 0.01 * (i + 1)), None)
        artifacts.failed(RuntimeError("actor 0 died"))
        return artifacts.keys

    with caplog.at_level(logging.WARNING, logger="test-artifacts"):
        keys = training()
    assert not caplog.records
    with get_client(sync_client=True) as prefect:
        latest = {a.key: a for a in prefect.read_latest_artifacts(artifact_filter=ArtifactCollectionFilter(
            key=ArtifactCollectionFilterKey(any_=list(keys.values()))))}
    progress = latest[keys["progress"]]
    assert float(progress.data) == pytest.approx(20.0)  # 2000 of 10000 env steps: the nearest rule
    assert progress.description.startswith("chunk 1: 10 learner steps, return 20.0 vs J=475")
    assert [r["chunk"] for r in json.loads(latest[keys["chunks"]].data)] == [0, 1]  # published at the failure
    assert "failed after 2 chunks" in latest[keys["summary"]].data
    assert "RuntimeError: actor 0 died" in latest[keys["summary"]].data

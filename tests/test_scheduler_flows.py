"""End to end: train-scheduler on a real Prefect API and MLflow store, then `train` with its result.

Three tiny workload runs in all (CartPole-v1, i_max 4, two rounds of 128-step fragments).
"""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.e2e

TINY = {"env": "CartPole-v1", "i_max": 4, "max_rounds": 2, "fragment": 128, "local_workers": 2}


def test_train_scheduler_resume_and_train_with_it(prefect_api_url, mlflow_uri, tmp_path, monkeypatch):
    from flows.scheduler_flows import train_scheduler
    from flows.train import train
    from models.scheduler_agent import load_scheduler

    ckpt_dir = str(tmp_path / "ckpt")
    first = train_scheduler(episodes=1, batch_episodes=1, tracking_uri=mlflow_uri,
                            checkpoint_dir=ckpt_dir, **TINY)
    assert first["episodes_done"] == 1 and first["updates"] == 1
    client = MlflowClient(mlflow_uri)
    run_id = first["run_id"]
    assert [a.path for a in client.list_artifacts(run_id, "scheduler")] == ["scheduler/scheduler.pt"]

    # Resume (as after a crash): the same parent run continues from its last checkpoint artifact.
    out = tmp_path / "sched.pt"
    result = train_scheduler(episodes=2, batch_episodes=1, resume_run_id=run_id, output=str(out),
                             tracking_uri=mlflow_uri, checkpoint_dir=ckpt_dir, **TINY)
    assert result["run_id"] == run_id
    assert [e["episode"] for e in result["episodes"]] == [1] and result["updates"] == 2
    assert all(1 <= a <= 4 for e in first["episodes"] + result["episodes"] for a in e["actors"])

    # The parent run: per-episode and per-update metrics, the checkpoint as an artifact.
    parent = client.get_run(run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["minionsrl.kind"] == "scheduler-training"
    for key in ("episode/reward", "episode/cost_usd", "episode/time_to_stop_s", "episode/rounds",
                "episode/target_reached", "train/loss"):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == [0, 1], key
    # The workload runs are nested under it, in the same experiment.
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
    assert {c.info.run_id for c in children} == {e["run_id"] for e in first["episodes"] + result["episodes"]}
    assert all(c.info.run_name.startswith("CartPole-v1__learned__") and c.info.status == "FINISHED"
               for c in children)
    assert len(children) == 2

    _, _, meta = load_scheduler(out)
    assert meta["progress"] == {"episodes_done": 2, "updates": 2}
    assert meta["trained_on"][0]["env"] == "CartPole-v1" and meta["trained_on"][0]["episodes"] == 2

    # `train` with the learned scheduler, loaded by MLflow URI (a path is covered by the episodes).
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    summary = train(scheduler=f"learned:{result['artifact_uri']}", seed=5, tracking_uri=mlflow_uri,
                    checkpoint_dir=ckpt_dir, **TINY)
    assert summary["scheduler"] == "learned"
    trace = summary["scheduler_trace"]
    assert trace["mode"] == "greedy" and trace["i_max"] == 4
    assert [s["actors"] for s in trace["steps"]] == [h["sched/actors"] for h in summary["history"]]


# -- the experiments' pure helpers (no Prefect run) ---------------------------------------------

def _summary(time_s, cost, reached, actors):
    return {"time_to_stop_s": time_s, "cost_usd": cost, "server_cluster_cost_usd": 10 * cost,
            "rounds": len(actors), "target_reached": reached,
            "history": [{"sched/actors": a} for a in actors]}


def test_aggregate_mean_std_over_seeds():
    from flows.experiments import aggregate

    runs = [_summary(2.0, 0.1, True, [4, 4]), _summary(4.0, 0.3, False, [8, 8, 8])]
    row = aggregate("x", runs)
    assert row["runs"] == 2 and row["reached"] == 1
    assert row["time_s_mean"] == pytest.approx(3.0) and row["time_s_std"] == pytest.approx(1.0)
    assert row["cost_usd_mean"] == pytest.approx(0.2) and row["cost_usd_std"] == pytest.approx(0.1)
    assert row["actors_mean"] == pytest.approx(6.0) and row["rounds_mean"] == pytest.approx(2.5)
    assert aggregate("server", runs, cost_key="server_cluster_cost_usd")["cost_usd_mean"] == pytest.approx(2.0)


@pytest.mark.parametrize(("actors", "expected"), [
    ([32, 30, 8, 6, 20, 28], (31.0, 7.0, 24.0)),
    ([5, 5, 5, 5], (5.0, 5.0, 5.0)),
    ([3, 9], (3.0, 9.0, float("nan"))),
])
def test_phases_are_thirds_of_the_run(actors, expected):
    import math

    from flows.experiments import phases

    got = phases(actors)
    for g, e in zip(got, expected, strict=True):
        assert (math.isnan(g) and math.isnan(e)) or g == pytest.approx(e)

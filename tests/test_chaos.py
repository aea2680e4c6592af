"""Crash-consistent rounds: the training killed at 20 points across rounds, inside the round's
work and inside its bookkeeping, then resumed each time; the MLflow record and the checkpoint
must end with every round logged once and every billed second counted."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tasks.chaos import CHAOS_ENV, POINTS, SimulatedCrash

pytestmark = pytest.mark.e2e

ROUNDS = 6  # round 0 runs, kills in rounds 1-4, round 5 runs clean
RUN = {"env": "CartPole-v1", "scheduler": "fixed:1", "fragment": 64, "seed": 9, "local_workers": 1,
       "target_return": 1e6}


def check_consistent(client: MlflowClient, run_id: str, checkpoint: str, rounds: int) -> float:
    from models.run.checkpoint import load_run_checkpoint

    steps = sorted(m.step for m in client.get_metric_history(run_id, "time/round_s"))
    assert steps == list(range(rounds)), f"round steps logged {steps}"  # none missing, none twice
    for key in ("cost/round_usd", "cost/total_usd", "rollout/env_steps"):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == list(range(rounds)), key
    per_round = sum(m.value for m in client.get_metric_history(run_id, "cost/round_usd"))
    total = {m.step: m.value for m in client.get_metric_history(run_id, "cost/total_usd")}[rounds - 1]
    progress = load_run_checkpoint(checkpoint).progress
    assert progress["round_index"] == rounds
    # every billed second: the rounds that finished plus the attempts the crashes cut short
    assert math.isclose(total, per_round + progress["lost_usd"], rel_tol=1e-9)
    assert math.isclose(progress["spent_usd"], total, rel_tol=1e-9)
    return progress["lost_usd"]


def test_killed_at_20_points_and_resumed_each_time_loses_nothing(prefect_api_url, mlflow_uri, tmp_path,
                                                                   monkeypatch):
    from flows.train import train

    # Five points a round, every point in some round: inside the round's work (start, an actor
    # back, the update done), inside its bookkeeping (recorded, not yet checkpointed), and after
    # its checkpoint ("saved" or "logged": a kill there ends the round, so one of the two).
    kills = [(point, r) for r in range(1, ROUNDS - 1)
             for point in ("round_start", "actor_returned", "update_done" if r % 2 else "round_work",
                           "recorded", "saved" if r % 2 else "logged")]
    assert len(kills) == 20 and set(POINTS) == {p for p, _ in kills}
    first = train(**RUN, max_rounds=1, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    checkpoint, run_id = first.checkpoint, first.run_id
    for point, r in kills:
        monkeypatch.setenv(CHAOS_ENV, f"{point}:{r}")
        with pytest.raises(SimulatedCrash, match=f"{point} of round {r}"):
            train(resume=checkpoint, max_rounds=ROUNDS, tracking_uri=mlflow_uri)
    monkeypatch.delenv(CHAOS_ENV)
    summary = train(resume=checkpoint, max_rounds=ROUNDS, tracking_uri=mlflow_uri)
    assert summary.rounds == ROUNDS and summary.run_id == run_id
    lost = check_consistent(MlflowClient(mlflow_uri), run_id, checkpoint, ROUNDS)
    assert lost > 0  # attempts killed after their actors returned were billed


def test_a_real_sigkill_between_checkpoint_and_mlflow_record(prefect_api_url, mlflow_uri, tmp_path):
    """SIGKILL of the training process itself (no finally blocks run), then resume from the CLI."""
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url, CHAOS_ENV: "saved:1:kill"}
    args = [sys.executable, "-m", "flows.train", "--scheduler", "fixed:1", "--fragment", "64", "--seed", "3",
            "--local-workers", "1", "--max-rounds", "3", "--target-return", "1e6",
            "--tracking-uri", mlflow_uri, "--checkpoint-dir", str(tmp_path)]
    killed = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    checkpoint = str(tmp_path / run.info.run_id / "latest.pt")
    env.pop(CHAOS_ENV)
    resumed = subprocess.run([sys.executable, "-m", "flows.train", "--resume", checkpoint,
                              "--tracking-uri", mlflow_uri], env=env, capture_output=True, text=True,
                             timeout=240)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    console = resumed.stdout + resumed.stderr  # one line per round, with how far the run is
    assert "round 2/3 (100%): 1 actors" in console and "Task run" not in console, console
    check_consistent(client, run.info.run_id, checkpoint, 3)
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    # The killed process's flow run was left Running; the resume marked it Crashed.
    from prefect import get_client

    from models.run.checkpoint import load_run_checkpoint

    killed_run, resumed_run = load_run_checkpoint(checkpoint).progress["flow_run_ids"]
    assert client.get_run(run.info.run_id).data.tags["prefect.flow_run_id"] == resumed_run
    with get_client(sync_client=True) as prefect:
        assert prefect.read_flow_run(killed_run).state.type.value == "CRASHED"
        assert prefect.read_flow_run(resumed_run).state.is_completed()

"""End to end: the `train` flow on a real Prefect API, real worker processes, a real MLflow store."""

from __future__ import annotations

import gc
import math
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from models.errors import ConfigError
from tests.prefect_reads import task_runs_eventually

pytestmark = pytest.mark.e2e

REQUIRED_METRICS = [
    "rollout/ep_return_mean", "rollout/env_steps", "train/loss", "train/approx_kl",
    "train/clipfrac", "train/policy_kl", "sched/actors", "time/learner_s", "time/actor_mean_s",
    "time/actor_max_s", "time/round_s", "time/round_wall_s", "cost/round_usd", "cost/total_usd",
    "cost/budget_left_usd", "cost/server_cluster_usd", "time/actor_startup_s",
    "time/actor_weight_load_s", "time/actor_sampling_s", "time/actor_upload_s",
    "cost/actors_usd", "cost/learner_usd", "cost/startup_usd", "cost/projected_aci_startup_usd",
    "cost/server_cluster_no_startup_usd", "cost/round_bound_usd", "cost/learner_on_cuda",
]


def test_train_two_rounds_two_actors(prefect_api_url, mlflow_uri, tmp_path, monkeypatch):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId

    from flows.artifacts import RunArtifacts
    from flows.train import train

    frozen, round_done = [], RunArtifacts.round_done  # the collector's freeze count at each round's end

    def observed_round_done(self, *args):
        frozen.append(gc.get_freeze_count())
        round_done(self, *args)
    monkeypatch.setattr(RunArtifacts, "round_done", observed_round_done)
    called_at = time.time()
    summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=2, fragment=128,
                    seed=3, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"),
                    local_workers=2)
    returned_at = time.time()

    # the run's timeline: start-up (call to first round), rounds, shut-down (to the return)
    assert called_at < summary.rounds_started_at < summary.rounds_finished_at < returned_at
    assert summary.rounds_finished_at - summary.rounds_started_at == pytest.approx(summary.wall_time_s, abs=0.1)
    assert summary.stop_reason in ("max_rounds", "target_reached")
    assert summary.rounds == 2
    assert summary.env_steps == 2 * 2 * 128
    assert summary.cost_usd > 0
    assert len(frozen) == 2 and min(frozen) > 10_000 and gc.get_freeze_count() == 0, frozen  # unfrozen after

    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name.startswith("CartPole-v1__fixed2__3__")
    assert run.data.params["ppo.gamma"] == "0.99"
    assert run.data.params["fragment"] == "128"
    for key in REQUIRED_METRICS:
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        assert steps == [0, 1], f"{key} logged at steps {steps}"
    actors = client.get_metric_history(run.info.run_id, "sched/actors")
    assert [m.value for m in actors] == [2.0, 2.0]
    total = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "cost/total_usd")}
    per_round = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "cost/round_usd")}
    assert math.isclose(total[1], per_round[0] + per_round[1], rel_tol=1e-9)
    parts = [{m.step: m.value for m in client.get_metric_history(run.info.run_id, f"cost/{p}_usd")}
             for p in ("actors", "learner", "startup")]
    for k in (0, 1):
        assert math.isclose(sum(p[k] for p in parts), per_round[k], rel_tol=1e-12)
    startup = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "time/learner_startup_s")}
    assert startup[0] > 0 and startup[1] == 0  # the learner's start-up is billed once
    summary_metrics = client.get_run(summary.run_id).data.metrics
    assert summary_metrics["summary/server_cluster_cost_usd"] > summary_metrics["summary/server_cluster_cost_no_startup_usd"]
    assert run.data.tags["minionsrl.learner_device"] in ("cpu", "cuda")
    assert run.data.tags["minionsrl.system"] == "serverless" and summary.system == "serverless"
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "policy")]
    assert artifacts == ["policy/final_policy.pt"]
    assert (tmp_path / "ckpt" / summary.run_id / "latest.pt").exists()

    # Prefect recorded one train-round subflow per round, each with its mapped rollouts.
    with get_client(sync_client=True) as prefect:
        rounds = prefect.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["train-round"])))
        ours = [r for r in rounds if r.state.is_completed()]
        assert {r.name for r in ours} >= {"round-0-x2", "round-1-x2"}
        trains = prefect.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["train"])))
        assert "CartPole-v1-fixed2-seed3" in {r.name for r in trains}  # says what ran
        expected = {"rollout-r0-a0", "rollout-r0-a1", "rollout-r1-a0", "rollout-r1-a1", "update-r0", "update-r1"}
        tasks = task_runs_eventually(prefect, lambda runs: expected <= {t.name for t in runs},
                                     flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[r.id for r in ours])))
        assert expected <= {t.name for t in tasks}


def test_bad_input_fails_before_any_actor_or_run(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    with pytest.raises(ConfigError, match="unknown gymnasium env id"):
        train(env="NoSuchEnv-v0", tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="fragment"):
        train(env="CartPole-v1", fragment=100, envs_per_actor=3, tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="budget_usd"):
        train(env="CartPole-v1", budget_usd=-1.0, tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="unknown backend"):
        train(env="CartPole-v1", backend="nowhere", tracking_uri=mlflow_uri)
    # Nothing was started: no MLflow run exists.
    client = MlflowClient(mlflow_uri)
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments]) if experiments else []
    assert runs == []


def test_budget_admits_a_round_only_when_its_cost_bound_fits(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    first = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=1, fragment=128, seed=1,
                  tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "a"))
    round_zero_bound = first.history[0].bound_usd
    assert first.cost_usd <= round_zero_bound

    # B below round 0's bound: the run stops before any actor starts, and says so
    refused = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=5, fragment=128, seed=1,
                    budget_usd=round_zero_bound * 0.4, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path / "b"))
    assert (refused.stop_reason, refused.rounds, refused.cost_usd) == ("budget_spent", 0, 0.0)
    assert refused.stop_detail.startswith("budget: round 0 not started")
    tags = MlflowClient(mlflow_uri).get_run(refused.run_id).data.tags
    assert tags["minionsrl.stop_reason"] == "budget_spent" and tags["minionsrl.stop_detail"] == refused.stop_detail
    assert tags["minionsrl.learner_device"] == refused.learner_device

    # B a little above it: every round started fitted its bound in what was left, and cost no more
    budget = round_zero_bound * 1.5
    summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=6, fragment=128, seed=1,
                    budget_usd=budget, target_return=10_000.0, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path / "c"))
    assert summary.stop_reason in ("budget_spent", "max_rounds") and summary.rounds >= 1
    assert summary.cost_usd <= budget
    costs = [r.cost_usd for r in summary.history]
    for k, record in enumerate(summary.history):
        assert record.bound_usd <= budget - sum(costs[:k]) + 1e-15
        assert record.cost_usd <= record.bound_usd


def crash_before_recording(monkeypatch, round_index: int):
    """Make TrainingSession.record raise in that round (after its work, before its bookkeeping);
    returns the original record, to put back."""
    from models.run.session import TrainingSession

    original = TrainingSession.record

    def crash(self, *args, **kwargs):
        if self.round_index == round_index:
            raise RuntimeError("simulated crash after the round's work, before its bookkeeping")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TrainingSession, "record", crash)
    return original


def test_a_crashed_run_resumes_without_losing_a_round(prefect_api_url, mlflow_uri, tmp_path,
                                                       monkeypatch):
    from flows import train as train_module
    from models.run.session import TrainingSession

    original = crash_before_recording(monkeypatch, round_index=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_module.train(env="CartPole-v1", scheduler="fixed:2", max_rounds=4, fragment=128,
                           seed=5, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    monkeypatch.setattr(TrainingSession, "record", original)
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED"
    checkpoint = tmp_path / run.info.run_id / "latest.pt"

    summary = train_module.train(resume=str(checkpoint), tracking_uri=mlflow_uri)
    assert summary.run_id == run.info.run_id and summary.rounds == 4
    assert summary.env_steps == 4 * 2 * 128
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "time/round_s")]
    assert sorted(steps) == [0, 1, 2, 3]  # round 2 ran once, after the resume


def test_non_finite_rewards_fail_the_run_with_its_reason_and_keep_the_last_good_checkpoint(
        prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train
    from models.errors import NonFiniteError
    from models.run.checkpoint import load_run_checkpoint
    from tests.slow_env import NAN_AFTER_ROUND_0

    with pytest.raises(NonFiniteError, match="non-finite rewards"):
        train(env=NAN_AFTER_ROUND_0, scheduler="fixed:2", max_rounds=3, fragment=64, seed=0,
              target_return=1e6, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path), local_workers=2)
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED"
    assert "NonFiniteError" in run.data.tags["minionsrl.failure"]
    assert "non-finite rewards" in run.data.tags["minionsrl.failure"]
    latest = load_run_checkpoint(tmp_path / run.info.run_id / "latest.pt")
    assert latest.progress["round_index"] == 1  # round 0's, the last good one
    assert all(bool(v.isfinite().all()) for v in latest.learner["policy"].values())
    assert not (tmp_path / run.info.run_id / "final_policy.pt").exists()


def test_an_unreachable_store_or_a_missing_run_fails_in_seconds_before_any_actor(
        prefect_api_url, mlflow_uri, tmp_path):
    import time

    from flows.train import train

    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"MLflow tracking server http://127.0.0.1:9 is unreachable"):
        train(env="CartPole-v1", tracking_uri="http://127.0.0.1:9", checkpoint_dir=str(tmp_path))
    assert time.monotonic() - started < 10
    first = train(env="CartPole-v1", scheduler="fixed:1", max_rounds=1, fragment=64, local_workers=1,
                  tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    other_store = f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=f"MLflow run {first.run_id} not found"):
        train(resume=first.checkpoint, tracking_uri=other_store, max_rounds=2)


def test_three_first_trainings_at_once_on_a_new_prefect_home_and_store_all_finish(tmp_path):
    """Concurrent first users: a new PREFECT_HOME (no Prefect database yet, no migrated template to
    copy) and a new MLflow store; three CLI trainings at once, each starting its own temporary API
    on that one database: it is created once, under a lock, and every training finishes."""
    import os
    import subprocess
    import sys

    from deployments.local_api import DB_TEMPLATE_ENV

    store = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", DB_TEMPLATE_ENV)}
    env["PREFECT_HOME"] = str(tmp_path / "new-prefect-home")
    procs = [subprocess.Popen(
        [sys.executable, "-m", "flows.train", "--scheduler", "fixed:1", "--max-rounds", "1", "--fragment", "64",
         "--local-workers", "1", "--seed", str(seed), "--tracking-uri", store,
         "--checkpoint-dir", str(tmp_path / "ckpt")], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for seed in range(3)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
    assert len({r.info.experiment_id for r in runs}) == 1


def test_episodes_longer_than_a_fragment_are_named_in_the_log_and_mlflow(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    # MountainCar-v0: a near-random policy never reaches the flag, so every episode lasts 200
    # steps and none ends inside a 64-step fragment.
    summary = train(env="MountainCar-v0", scheduler="fixed:1", max_rounds=1, fragment=64, local_workers=1,
                    tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    assert math.isnan(summary.final_return)
    tags = MlflowClient(mlflow_uri).get_run(summary.run_id).data.tags
    assert "no episode of MountainCar-v0 ended inside a 64-step fragment" in tags["minionsrl.warning"]
    assert "eval_every" in tags["minionsrl.warning"]


def test_the_cli_names_bad_input_once_and_starts_nothing(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # never reached
    bad = subprocess.run([sys.executable, "-m", "flows.train", "--ppo", '{"learning_rate": "fast"}',
                          "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["error: ppo.learning_rate must be a number, got 'fast'"]
    down = subprocess.run([sys.executable, "-m", "flows.train", "--max-rounds", "1",
                           "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 2 and "http://127.0.0.1:9/api does not answer" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1


def test_carried_episodes_outlive_their_fragment_and_survive_a_crash(prefect_api_url, mlflow_uri, tmp_path,
                                                                     monkeypatch):
    """Hopper with 24-step fragments: with carry_episodes, episodes end that are longer than a
    fragment (without it none can); a run that crashes and resumes from its checkpoint learns
    exactly what an uninterrupted run with the same seed learns, carried episodes included."""
    from flows import train as train_module
    from models.run.session import TrainingSession

    common = dict(env="Hopper-v5", scheduler="fixed:2", max_rounds=5, fragment=24, seed=2,
                  tracking_uri=mlflow_uri, local_workers=2, log_model=False)
    whole = train_module.train(carry_episodes=True, checkpoint_dir=str(tmp_path / "whole"), **common)
    fresh = train_module.train(carry_episodes=False, checkpoint_dir=str(tmp_path / "fresh"), **common)
    client = MlflowClient(mlflow_uri)

    def lengths(summary) -> list[float]:
        return [m.value for m in client.get_metric_history(summary.run_id, "rollout/ep_length_mean")
                if not math.isnan(m.value)]

    assert max(lengths(fresh)) <= 24 < max(lengths(whole))

    original = crash_before_recording(monkeypatch, round_index=3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_module.train(carry_episodes=True, checkpoint_dir=str(tmp_path / "crashed"), **common)
    monkeypatch.setattr(TrainingSession, "record", original)
    (checkpoint,) = (tmp_path / "crashed").glob("*/latest.pt")
    resumed = train_module.train(resume=str(checkpoint), tracking_uri=mlflow_uri)
    assert resumed.rounds == whole.rounds == 5
    for a, b in zip(resumed.history, whole.history, strict=True):
        assert (a.mean_return, a.loss, a.policy_kl) == pytest.approx((b.mean_return, b.loss, b.policy_kl),
                                                                      rel=1e-6, nan_ok=True)


def test_stop_at_eval_ends_the_run_at_the_evaluation_that_reaches_j(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    summary = train(env="CartPole-v1", scheduler="fixed:2", max_rounds=4, fragment=128, seed=1,
                    target_return=5.0, eval_every=1, eval_episodes=1, stop_at_eval=True,
                    tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    assert (summary.stop_reason, summary.rounds) == ("target_reached", 1)
    assert summary.stop_detail.startswith("target: the evaluation after round 0 returned")
    assert MlflowClient(mlflow_uri).get_run(summary.run_id).data.metrics["eval/return_mean"] >= 5.0


def test_two_clocks_sum_of_p_k_within_cloud_within_wall(prefect_api_url, mlflow_uri, tmp_path):
    """Issue 33's clocks on a real run: 8 actors on 2 local workers (so actors wait for a core). Per
    round, P_k <= the cloud clock (P_k + orchestration) <= this machine's cycle; what lies between
    the cloud clock and the wall is the actors' waits for a free core; the summary's wall is the
    rounds' span on this machine's clock."""
    from flows.train import train

    summary = train(env="CartPole-v1", scheduler="fixed:8", max_rounds=3, fragment=128, local_workers=2, seed=1,
                    target_return=1e9, log_model=False, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path))
    client = MlflowClient(mlflow_uri)

    def series(key):
        return [m.value for m in sorted(client.get_metric_history(summary.run_id, key), key=lambda m: m.step)]

    p_k, cloud, cycle = series("time/round_s"), series("time/round_cloud_s"), series("time/round_cycle_wall_s")
    subflow, busy, learner = series("time/round_wall_s"), series("time/actor_busy_s"), series("time/learner_s")
    assert len(p_k) == len(cloud) == len(cycle) == 3
    for k in range(3):
        assert p_k[k] <= cloud[k] <= cycle[k]
        outside = cycle[k] - subflow[k]  # scheduling, the budget check, the round before's writes
        orchestration_in_round = max(subflow[k] - busy[k] - learner[k], 0.0)
        assert math.isclose(cloud[k], min(subflow[k], p_k[k] + orchestration_in_round) + outside, abs_tol=1e-9)
    waits = sum(cycle) - sum(cloud)  # 8 actors on 2 cores: the 6 queued ones waited
    assert waits > 0
    assert summary.time_to_stop_s <= summary.cloud_time_s <= summary.wall_time_s
    assert math.isclose(summary.time_to_stop_s, sum(p_k), rel_tol=1e-9)
    assert summary.rounds_finished_at - summary.rounds_started_at == pytest.approx(summary.wall_time_s, abs=0.1)
    logged = client.get_run(summary.run_id).data.metrics
    assert logged["summary/wall_time_s"] == pytest.approx(summary.wall_time_s)
    assert logged["summary/cloud_time_s"] == pytest.approx(summary.cloud_time_s)


CALLED_FROM_PYTHON = """
import os, sys
from pathlib import Path
from flows.train import train

assert not os.environ.get("PREFECT_API_URL")
summary = train(env="CartPole-v1", scheduler="fixed:1", max_rounds=1, fragment=64, local_workers=1, log_model=False,
                tracking_uri=sys.argv[1], checkpoint_dir=sys.argv[2])
servers = []
for proc in Path("/proc").iterdir():
    if proc.name.isdigit():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\\0")
        except OSError:
            continue
        if b"deployments.local_api" in args and str(os.getpid()).encode() in args:
            servers.append(proc.name)
from mlflow.tracking import MlflowClient
from prefect import get_client
with get_client(sync_client=True) as client:
    flow_run = client.read_flow_run(MlflowClient(sys.argv[1]).get_run(summary.run_id).data.tags["prefect.flow_run_id"])
print("API", os.environ["PREFECT_API_URL"], "SERVERS", ",".join(servers), "STATE", flow_run.state.type.value)
"""


def test_the_flow_called_from_python_runs_on_the_projects_api_and_leaves_no_server(tmp_path):
    """No PREFECT_API_URL: the call starts the project's temporary API (not Prefect's own
    ephemeral server), the flow run is recorded there, and the server is gone once the process is."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", CALLED_FROM_PYTHON, f"sqlite:///{tmp_path / 'm.db'}",
                           str(tmp_path / "ckpt")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("API "))
    _, api, _, servers, _, state = line.split()
    assert api.startswith("http://127.0.0.1:") and state == "COMPLETED"
    pids = [int(p) for p in servers.split(",") if p]
    assert len(pids) == 1  # one server of the project's, serving this process
    time.sleep(1.0)
    assert not Path(f"/proc/{pids[0]}").exists() or "Z" in Path(f"/proc/{pids[0]}/stat").read_text().split(")")[1][:3]

"""Faults at round level: the real `train` flow, a real Prefect API and a real MLflow store.

One round of two actors in which one actor is SIGKILLed mid-rollout or hangs past
actor_timeout_s (tests/slow_env.py: the fault follows the actor's seed, so only actor 0 of
round 0 misbehaves, and its retry fails the same way). The round must end promptly, count the
failure in MLflow (`rollout/actor_failures` at step 0), and the run must finish on the other
actor's batch when the quorum allows it, or fail clearly when it does not. Backends: `local`
(warm worker processes) and `work-pool` (cold actor flow runs and warm actor servers on a
process pool, deployments/local_stack.py).

The faulty env writes a note (pid, time) just before it kills itself or hangs, so the round's
end, as MLflow timestamps its metrics, can be timed against the fault itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # spawned actor processes copy sys.path: they import tests.slow_env
    sys.path.insert(0, str(ROOT))

from tests.slow_env import HANG_ONE, KILL_ONE  # noqa: E402
from tests.test_workpool import gone  # noqa: E402

pytestmark = pytest.mark.e2e

# Round end (its metrics logged) after the fault: the backend noticing it, the subflow ending,
# a PPO update on one 64-step batch and the bookkeeping, on a busy 2-core machine.
LOCAL_MARGIN_S = 4.0
# ... plus the work-pool monitor's state poll (0.5 s) and the worker noticing a dead process.
WORKPOOL_MARGIN_S = 6.0

FRAGMENT = 64  # the faulty actor dies / hangs after 20 of its steps (tests/slow_env.py)


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory):
    """One MLflow store (as the `mlflow_uri` fixture makes it) for the module's runs, each test in
    its own experiment: one store's schema is made once."""
    store = tmp_path_factory.mktemp("round_faults_mlruns")
    return f"sqlite:///{store / 'mlflow.db'}"


@pytest.fixture
def experiment(request) -> str:
    return f"round-faults/{request.node.name}"


@pytest.fixture
def notes(fault_dir):
    for old in fault_dir.glob("*.json"):
        old.unlink()

    def read() -> list[dict]:
        return sorted((json.loads(p.read_text()) for p in fault_dir.glob("*.json")),
                      key=lambda n: n["at"])

    return read


def run_one_round(env: str, mlflow_uri: str, experiment: str, tmp_path: Path, **overrides):
    from flows.train import train

    params = dict(env=env, scheduler="fixed:2", max_rounds=1, fragment=FRAGMENT, seed=0,
                  quorum=0.5, ppo={"update_epochs": 1}, experiment=experiment,
                  tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
    params.update(overrides)
    return train(**params)


def round_zero(mlflow_uri: str, run_id: str) -> tuple[str, dict[str, float], float]:
    """The run's status, its step-0 metrics, and when (epoch s) they were logged."""
    client = MlflowClient(mlflow_uri)
    run = client.get_run(run_id)
    keys = ("rollout/actor_failures", "rollout/batches", "sched/actors", "rollout/env_steps",
            "time/round_wall_s", "rollout/actor_retries")
    metrics, logged_at = {}, []
    for key in keys:
        [m] = [m for m in client.get_metric_history(run_id, key) if m.step == 0]
        metrics[key] = m.value
        logged_at.append(m.timestamp / 1000)
    return run.info.status, metrics, max(logged_at)


def assert_one_of_two_failed(summary, status, m):
    assert summary.rounds == 1 and summary.stop_reason == "max_rounds"
    assert status == "FINISHED"
    assert m["rollout/actor_failures"] == 1.0  # the failure is recorded ...
    assert m["sched/actors"] == 2.0 and m["rollout/batches"] == 1.0  # ... and the quorum met
    assert m["rollout/env_steps"] == FRAGMENT == summary.env_steps  # by the other actor
    assert summary.history[0].actors == 2


def assert_ended_by_the_timeout(m, logged_at: float, hang: dict, timeout_s: float,
                                margin_s: float, label: str) -> None:
    """The round waited for the hung actor's timeout, and not much longer.

    The timeout counts from the actor's hand-off, a moment before its env hung (fresh env, 20
    steps); round 0's time/round_wall_s also holds the backend's one-off wait for its
    pre-warmed actors (tasks/backends.py), so the bound is taken from the hang itself.
    """
    after_hang = logged_at - hang["at"]
    print(f"{label} hang: metrics logged {after_hang:.2f} s after the actor hung "
          f"(actor_timeout_s {timeout_s} s); round wall {m['time/round_wall_s']:.2f} s")
    assert timeout_s - 1.0 < after_hang < timeout_s + margin_s, after_hang
    assert m["time/round_wall_s"] >= timeout_s


# -- local backend ---------------------------------------------------------------------------

def test_local_actor_killed_mid_rollout(prefect_api_url, store_uri, experiment, tmp_path, notes):
    timeout_s = 60.0
    summary = run_one_round(KILL_ONE, store_uri, experiment, tmp_path, backend="local", local_workers=2,
                            actor_timeout_s=timeout_s, actor_retries=1)
    status, m, logged_at = round_zero(store_uri, summary.run_id)
    assert_one_of_two_failed(summary, status, m)
    # Both attempts of actor 0 were SIGKILLed mid-rollout, each in its own worker process.
    kills = notes()
    assert [(n["fault"], n["seed"], n["steps"]) for n in kills] == [("kill", 0, 20)] * 2
    assert kills[0]["pid"] != kills[1]["pid"] and all(gone(n["pid"]) for n in kills)
    # The round ended right after the second death, far from its timeout.
    took = logged_at - kills[-1]["at"]
    print(f"local kill: round wall {m['time/round_wall_s']:.2f} s, "
          f"metrics logged {took:.2f} s after the last kill")
    assert 0 < took < LOCAL_MARGIN_S, took
    assert m["time/round_wall_s"] < timeout_s / 2


def test_local_actor_past_its_timeout(prefect_api_url, store_uri, experiment, tmp_path, notes):
    # No retry: the round's bound is then one actor_timeout_s (a retry would add another).
    timeout_s = 3.0
    summary = run_one_round(HANG_ONE, store_uri, experiment, tmp_path, backend="local", local_workers=2,
                            actor_timeout_s=timeout_s, actor_retries=0)
    status, m, logged_at = round_zero(store_uri, summary.run_id)
    assert_one_of_two_failed(summary, status, m)
    [hang] = notes()
    assert (hang["fault"], hang["seed"], hang["steps"]) == ("hang", 0, 20)
    assert_ended_by_the_timeout(m, logged_at, hang, timeout_s, LOCAL_MARGIN_S, "local")
    assert gone(hang["pid"])  # the hung worker was killed, not left sampling


def test_local_quorum_not_met_fails_the_run_clearly(prefect_api_url, store_uri, experiment, tmp_path, notes):
    from flows.rounds import RoundFailedError

    started = time.time()
    with pytest.raises(RoundFailedError, match=r"round 0: 1 of 2 actors returned, quorum needs 2") as info:
        run_one_round(KILL_ONE, store_uri, experiment, tmp_path, backend="local", local_workers=2,
                      actor_timeout_s=60.0, actor_retries=0, quorum=1.0)
    failed_at = time.time()
    assert "died" in str(info.value)  # the failure says what happened to the actor
    [kill] = notes()
    assert started < kill["at"] < failed_at
    # Prefect shows the round's subflow and the train run failed, with the reason.
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as prefect:
        flow_runs = prefect.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["train", "train-round"])))
    ours = [r for r in flow_runs if r.created.timestamp() > started]
    assert sorted(r.name for r in ours if r.parent_task_run_id) == ["round-0-x2"]  # subflow
    assert len(ours) == 2  # ... and the train run
    for flow_run in ours:
        assert flow_run.state.is_failed() and "quorum needs 2" in flow_run.state.message
    client = MlflowClient(store_uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == "FAILED"
    # The failed round's failures are counted; nothing else of it was logged as if it had run,
    # and no checkpoint was written.
    [failures] = client.get_metric_history(run.info.run_id, "rollout/actor_failures")
    [returned] = client.get_metric_history(run.info.run_id, "rollout/batches")
    assert (failures.step, failures.value, returned.value) == (0, 1.0, 1.0)
    assert client.get_metric_history(run.info.run_id, "rollout/env_steps") == []
    assert not (tmp_path / "ckpt" / run.info.run_id / "latest.pt").exists()


# -- work-pool backend -----------------------------------------------------------------------
#
# The `train` flow runs in a process of its own pointed at the stack's server (as the `train`
# deployment would run it): Prefect's events worker, which records task runs, is a
# per-process singleton bound to the first API it met, here the session's temporary API.

@pytest.fixture(scope="module")
def stack(workpool_stack):
    """The session's work-pool stack (tests/conftest.py); its actors see FAULT_DIR_ENV."""
    with workpool_stack.client_env():
        yield workpool_stack


TRAIN_IN_A_PROCESS = """
import dataclasses, json, sys
from flows.train import train
summary = train(**json.loads(sys.argv[1]))
print("SUMMARY " + json.dumps(dataclasses.asdict(summary), default=str))
"""


def run_one_round_on_stack(stack, env: str, mlflow_uri: str, experiment: str, tmp_path: Path,
                           **overrides) -> SimpleNamespace:
    params = dict(env=env, scheduler="fixed:2", max_rounds=1, fragment=FRAGMENT, seed=0,
                  quorum=0.5, ppo={"update_epochs": 1}, experiment=experiment,
                  tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"),
                  backend="work-pool", **overrides)
    proc = subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, json.dumps(params)],
                          cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("SUMMARY ")]
    summary = json.loads(line.removeprefix("SUMMARY "))
    summary["history"] = [SimpleNamespace(**r) for r in summary["history"]]
    return SimpleNamespace(**summary)


def rollout_task_runs(since: float, timeout_s: float = 30.0) -> dict[str, object]:
    """This test's two final `rollout` task runs (name -> task run), from the Prefect API (the
    server records task runs from their events, a moment after the flow's process sent them)."""
    from prefect import get_client

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            runs = {r.name: r for r in client.read_task_runs()
                    if r.name.startswith("rollout-r0-") and r.start_time is not None
                    and r.start_time.timestamp() > since}
            done = len(runs) == 2 and all(r.state.is_final() and r.end_time for r in runs.values())
            if done or time.monotonic() > deadline:
                return runs
            time.sleep(0.5)


def test_workpool_actor_killed_mid_rollout(stack, store_uri, experiment, tmp_path, notes):
    """Cold actors: each its own flow run, a process started by the pool's worker."""
    timeout_s = 120.0  # above a cold actor's start-up here (20-25 s, tests/test_workpool.py)
    since = time.time()
    summary = run_one_round_on_stack(stack, KILL_ONE, store_uri, experiment, tmp_path,
                                     actor_timeout_s=timeout_s, actor_retries=0)
    status, m, logged_at = round_zero(store_uri, summary.run_id)
    assert_one_of_two_failed(summary, status, m)
    [kill] = notes()
    assert (kill["fault"], kill["seed"], kill["steps"]) == ("kill", 0, 20) and gone(kill["pid"])
    # Prefect's record of the round: the killed actor's rollout ended (as an ActorFailure)
    # soon after the kill, and the round's metrics soon after the last rollout.
    runs = rollout_task_runs(since)
    assert sorted(runs) == ["rollout-r0-a0", "rollout-r0-a1"]
    assert all(r.state.is_completed() for r in runs.values())
    failed_end = runs["rollout-r0-a0"].end_time.timestamp()
    last_end = max(r.end_time.timestamp() for r in runs.values())
    print(f"work-pool kill: actor's rollout ended {failed_end - kill['at']:.2f} s after the kill, "
          f"metrics logged {logged_at - last_end:.2f} s after the last rollout; "
          f"round wall {m['time/round_wall_s']:.2f} s")
    assert 0 < failed_end - kill["at"] < WORKPOOL_MARGIN_S
    assert 0 < logged_at - last_end < WORKPOOL_MARGIN_S
    assert m["time/round_wall_s"] < timeout_s  # the kill, not the timeout, ended the actor


def test_workpool_warm_actor_past_its_timeout(stack, store_uri, experiment, tmp_path, notes):
    """Warm actors (a cold actor's start-up alone is longer than a short timeout here)."""
    timeout_s = 5.0
    since = time.time()
    summary = run_one_round_on_stack(stack, HANG_ONE, store_uri, experiment, tmp_path,
                                     warm_actors=2, actor_timeout_s=timeout_s, actor_retries=0)
    status, m, logged_at = round_zero(store_uri, summary.run_id)
    assert_one_of_two_failed(summary, status, m)
    [hang] = notes()
    assert (hang["fault"], hang["seed"], hang["steps"]) == ("hang", 0, 20)
    assert_ended_by_the_timeout(m, logged_at, hang, timeout_s, WORKPOOL_MARGIN_S, "work-pool")
    # The hung server's flow run was cancelled through Prefect and its process killed.
    deadline = time.monotonic() + 30
    while not gone(hang["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gone(hang["pid"])
    # No warm server outlives the run: the two first ones and the hung one's replacement (when
    # it was started before the run closed) are over, or being cancelled by their worker.
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["actor-server"])))
    ours = [r for r in runs if r.created.timestamp() > since]
    print("work-pool hang: actor servers " + ", ".join(f"{r.name} {r.state.name}" for r in ours))
    assert len(ours) in (2, 3), [(r.name, r.state.name) for r in ours]
    assert all(r.state.is_final() or r.state.name == "Cancelling" for r in ours), \
        [(r.name, r.state.name) for r in ours]

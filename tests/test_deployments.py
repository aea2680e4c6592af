"""`prefect deploy --all` with prefect.yaml, then `prefect deployment run 'train/cartpole'` with
the work-pool backend, on a real server and a real process worker: 2 rounds, every actor its own
flow run on the process pool, the metrics in MLflow."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployments.local_stack import POOL, prefect_stack  # noqa: E402
from tests.prefect_reads import task_runs_eventually  # noqa: E402

pytestmark = pytest.mark.e2e


def test_deploy_and_run_train_on_the_process_pool(tmp_path):
    store = tmp_path / "mlruns"
    store.mkdir()
    mlflow_uri = f"sqlite:///{store / 'mlflow.db'}"
    with prefect_stack(tmp_path / "stack", mlflow_uri, deploy=False) as stack, stack.client_env():
        out = stack.deploy()
        for name in ("train/cartpole", "actor/minionsrl-actor", "actor-server/minionsrl-actor-server"):
            assert name in out, out[-2000:]
        from prefect import get_client

        with get_client(sync_client=True) as client:
            train_deployment = client.read_deployment_by_name("train/cartpole")
        # Defaults and descriptions (from the flow's docstring) show in the UI.
        props = train_deployment.parameter_openapi_schema["properties"]
        assert "actors run" in props["backend"]["description"]  # its default: the preset's
        assert train_deployment.parameters["env"] == "CartPole-v1"
        assert train_deployment.work_pool_name == POOL

        run = stack.cli("deployment", "run", "train/cartpole", "-p", "env=CartPole-v1",
                        "-p", "backend=work-pool", "-p", "max_rounds=2", "-p", "scheduler=fixed:2",
                        "-p", "fragment=128", "-p", f"checkpoint_dir={tmp_path / 'ckpt'}")
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", run.stdout).group(1)
        deadline = time.monotonic() + 600
        with get_client(sync_client=True) as client:
            while True:
                train_run = client.read_flow_run(flow_run_id)
                if train_run.state.is_final() or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert train_run.state.is_completed(), (
                f"{train_run.state}\n" + (stack.logs / "worker.log").read_text()[-6000:])
            assert train_run.work_pool_name == POOL

            from prefect.client.schemas.filters import (
                FlowFilter,
                FlowFilterName,
                TaskRunFilter,
                TaskRunFilterId,
            )

            actors = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["actor"])))
            parent_ids = {r.parent_task_run_id for r in actors}
            task_runs = {t.id: t for t in task_runs_eventually(
                client, lambda runs: parent_ids <= {t.id for t in runs},
                task_run_filter=TaskRunFilter(id=TaskRunFilterId(any_=list(parent_ids))))}
            flow_run_names = {r.id: r.name for r in client.read_flow_runs()}
    # Each actor was its own flow run on the process pool, in its own process, under its
    # round's rollout task.
    names = sorted(r.name.rsplit("-", 1)[0] for r in actors)
    assert names == ["actor-r0-a0", "actor-r0-a1", "actor-r1-a0", "actor-r1-a1"], names
    assert all(r.state.is_completed() and r.work_pool_name == POOL for r in actors)
    assert len({r.infrastructure_pid for r in actors}) == 4
    # Names come from the server's event recorder, which can keep a task run's first name
    # (rollout-<random>) over its templated one: check the task and the round instead.
    parents = [task_runs[r.parent_task_run_id] for r in actors]
    assert len({p.id for p in parents}) == 4 and all(p.task_key.startswith("rollout") for p in parents)
    for actor, parent in zip(actors, parents, strict=True):
        round_index = actor.name.split("-")[1][1:]  # actor-r<k>-a<i>-<token>
        assert flow_run_names[parent.flow_run_id] == f"round-{round_index}-x2"

    client = MlflowClient(mlflow_uri)
    [experiment] = [e for e in client.search_experiments() if e.name == "minionsrl/CartPole-v1"]
    [mlrun] = client.search_runs([experiment.experiment_id])
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.tags["minionsrl.backend"] == "work-pool"
    for key in ("rollout/ep_return_mean", "train/loss", "time/actor_startup_s",
                "time/actor_weight_load_s", "time/actor_sampling_s", "time/actor_upload_s",
                "time/round_s", "cost/round_usd"):
        steps = sorted(m.step for m in client.get_metric_history(mlrun.info.run_id, key))
        assert steps == [0, 1], (key, steps)
    startup = [m.value for m in client.get_metric_history(mlrun.info.run_id, "time/actor_startup_s")]
    assert all(s > 0.5 for s in startup)  # cold flow runs: process start, imports

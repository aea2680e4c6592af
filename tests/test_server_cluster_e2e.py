"""End to end: the fixed server cluster as a system of its own (real Prefect API, real worker
processes, real MLflow store): billed for its wall time, its actors the same processes every round."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest
from mlflow.tracking import MlflowClient

from models.billing.cost import PriceTable
from models.errors import ConfigError

pytestmark = pytest.mark.e2e

CORES = 3


def history(client: MlflowClient, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


def test_a_server_cluster_run_bills_its_wall_time_on_the_same_actor_processes(prefect_api_url, mlflow_uri, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    from flows.train import train

    prices_file = tmp_path / "prices.toml"  # a 3-core cluster at the packaged prices
    prices_file.write_text(resources.files("models.data").joinpath("prices.toml").read_text()
                           .replace("actor_cores = 32", f"actor_cores = {CORES}"))
    prices = PriceTable.load(prices_file)
    summary = train(env="CartPole-v1", system="server-cluster", prices_file=str(prices_file), max_rounds=2,
                    fragment=64, seed=4, budget_usd=5.0, target_return=10_000.0, tracking_uri=mlflow_uri,
                    checkpoint_dir=str(tmp_path / "ckpt"))
    assert (summary.system, summary.rounds, summary.stop_reason) == ("server-cluster", 2, "max_rounds")
    assert [h.actors for h in summary.history] == [CORES, CORES]

    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.data.tags["minionsrl.system"] == "server-cluster"
    assert run.info.run_name.startswith(f"CartPole-v1__server-cluster__fixed{CORES}__4__")
    billed_wall = history(client, run.info.run_id, "time/billed_wall_s")
    round_wall = history(client, run.info.run_id, "time/round_wall_s")
    per_round = history(client, run.info.run_id, "cost/round_usd")
    cluster_round = history(client, run.info.run_id, "time/cluster_round_s")
    round_s = history(client, run.info.run_id, "time/round_s")
    # each round as on the cluster's own cores (here its 3 processes share 2): P_k plus the round's
    # orchestration, at most this machine's round wall; billed with the time between rounds
    assert sorted(billed_wall) == [0, 1]
    assert all(round_s[k] <= cluster_round[k] <= round_wall[k] and billed_wall[k] >= cluster_round[k] > 0
               for k in (0, 1))
    # billed: the cluster's price x its wall time, idle included, + its start-up once (round 0); the
    # learner ran on the CPU here, so its VM is the CPU one (4 actor VMs at $1.008/h + a D4s_v5 at $0.192/h)
    per_s = prices.server_cluster_per_second(summary.learner_device)
    assert summary.learner_device != "cpu" or math.isclose(per_s, (4 * 1.008 + 0.192) / 3600, rel_tol=1e-12)
    assert math.isclose(sum(per_round.values()),
                        per_s * (sum(billed_wall.values()) + prices.server_startup_s), rel_tol=1e-9)
    startup = history(client, run.info.run_id, "cost/startup_usd")
    assert math.isclose(startup[0], 300.0 * per_s, rel_tol=1e-12) and startup[1] == 0.0
    parts = [history(client, run.info.run_id, f"cost/{p}_usd") for p in ("actors", "learner", "startup")]
    for k in (0, 1):
        assert math.isclose(sum(p[k] for p in parts), per_round[k], rel_tol=1e-12)
    metrics = run.data.metrics
    assert math.isclose(metrics["summary/cost_usd"], metrics["summary/server_cluster_cost_usd"], rel_tol=1e-9)
    assert math.isclose(metrics["summary/server_cluster_cost_no_startup_usd"],
                        per_s * sum(billed_wall.values()), rel_tol=1e-9)
    # the cluster's actors: one pool of CORES processes, started once, reused in round 1
    pids = json.loads(run.data.tags["minionsrl.worker_pids"])
    assert len(pids) == CORES
    assert history(client, run.info.run_id, "cluster/worker_processes") == {0: CORES, 1: CORES}
    assert history(client, run.info.run_id, "cluster/new_worker_processes") == {0: CORES, 1: 0}

    with get_client(sync_client=True) as prefect:
        trains = prefect.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["train"])))
        assert "CartPole-v1-server-cluster-fixed-seed4" in {r.name for r in trains}

    # what it cannot run on is refused before any actor or MLflow run starts
    for bad, match in (({"backend": "dask"}, "use backend local"), ({"scheduler": "fixed:2"}, "use scheduler fixed:3")):
        with pytest.raises(ConfigError, match=match):
            train(env="CartPole-v1", system="server-cluster", prices_file=str(prices_file),
                  tracking_uri=mlflow_uri, **bad)
    assert len(client.search_runs([run.info.experiment_id])) == 1

"""B is never exceeded: small budgets x schedulers x seeds, checked from the MLflow store.

Budgets are set from the price table's prior (models/data/prices.toml [budget_prior]):
- SMALL is below what one actor's round-0 bound alone comes to, so every run must stop by the
  budget before round 0 starts;
- MEDIUM admits round 0 of one actor (with the learner's start-up) but not 6 new actors, so
  increase:4:6:1 (1 actor, then 7) must stop by the budget after round 0; the other schedulers
  stop by the budget or by K. (The packaged learned scheduler was trained for i_max=32.)
"""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from models.billing.budget import BOUND_MARGIN
from models.billing.cost import PriceTable

pytestmark = pytest.mark.e2e

FRAGMENT = 64
_PRICES = PriceTable.load()
ONE_COLD_ACTOR_USD = (BOUND_MARGIN * (_PRICES.prior.actor_startup_s("local") + FRAGMENT * _PRICES.prior.actor_step_s)
                      * _PRICES.actor_per_second)
SMALL = 0.5 * ONE_COLD_ACTOR_USD
MEDIUM = ONE_COLD_ACTOR_USD + 1e-3  # room for the learner's start-up (~15 s on the CPU) and update
SCHEDULERS = ["fixed:2", "increase:4:6:1", "adapt", "learned:cartpole:sample"]


def history(client: MlflowClient, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_sum_of_billed_cost_never_exceeds_b(prefect_api_url, mlflow_uri, tmp_path, scheduler):
    from flows.train import train

    client = MlflowClient(mlflow_uri)
    for budget in (SMALL, MEDIUM):
        for seed in (0, 1):
            summary = train(env="CartPole-v1", scheduler=scheduler, budget_usd=budget, max_rounds=2,
                            i_max=32 if scheduler.startswith("learned") else 8, fragment=FRAGMENT, envs_per_actor=1, seed=seed,
                            target_return=10_000.0, local_workers=2, tracking_uri=mlflow_uri,
                            checkpoint_dir=str(tmp_path / f"{budget}-{seed}"))
            run = client.get_run(summary.run_id)
            costs = history(client, summary.run_id, "cost/round_usd")
            bounds = history(client, summary.run_id, "cost/round_bound_usd")
            where = f"{scheduler} B={budget:.3g} seed {seed}: rounds cost {costs}"
            assert sum(costs.values()) <= budget, where
            assert summary.cost_usd <= budget, where
            assert sorted(costs) == list(range(summary.rounds)), where
            for k, cost in costs.items():
                assert cost <= bounds[k], f"{where}: round {k} cost more than its bound {bounds[k]}"
            tags = run.data.tags
            assert tags["minionsrl.stop_reason"] == summary.stop_reason
            assert summary.stop_reason in ("budget_spent", "max_rounds"), where
            if summary.stop_reason == "budget_spent":
                assert tags["minionsrl.stop_detail"].startswith("budget: round "), where
                assert f"round {summary.rounds} not started" in tags["minionsrl.stop_detail"]
            if budget == SMALL:  # not even round 0 fits: no actor ran, nothing was billed
                assert summary.stop_reason == "budget_spent" and summary.rounds == 0, where
                assert costs == {} and summary.cost_usd == 0.0
            if budget == MEDIUM and scheduler.startswith("increase"):
                assert summary.stop_reason == "budget_spent" and summary.rounds == 1, where

"""A scheduler checkpoint's provenance: typed, round-trips through JSON, reads older entries."""

from __future__ import annotations

import json

import pytest

from models.errors import ConfigError
from models.run.workload import Placement, Workload
from models.scheduling.provenance import SchedulerProvenance, SchedulerTrainingRun

# The trained_on entry of models/data/schedulers/cartpole-v2.pt, written before the reward's
# cost term and the workload's backend existed.
STORED = {"env": "CartPole-v1", "episodes": 100, "mlflow_run_id": "ef37", "seed": 0, "mode": "scratch",
          "workload": {"env": "CartPole-v1", "i_max": 32, "target_return": 475.0, "budget_usd": None,
                       "max_rounds": None, "fragment": None, "ppo": None, "local_workers": None},
          "beta": 0.1, "batch_episodes": 4, "wall_s": 1480.6}


def test_an_older_entry_reads_with_the_time_only_reward_and_the_default_backend():
    meta = SchedulerProvenance.from_json({"trained_on": [STORED], "progress": {"episodes_done": 100, "updates": 25}})
    (session,) = meta.trained_on
    assert (session.cost_weight, session.placement) == (0.0, Placement())  # its legacy local_workers: None
    assert session.workload.preset is None  # the env's own preset, as it was trained
    assert (meta.episodes_done, meta.updates, meta.episodes_total, meta.fine_tuned_from) == (100, 25, 100, None)
    assert meta.session("ef37") is session and meta.session("other") is None


def test_the_provenance_round_trips_through_json():
    workload = Workload(env="Hopper-v5", i_max=16, preset="locomotion", ppo={"learning_rate": 1e-4})
    placement = Placement(backend="dask", backend_options={"dask_address": "tcp://10.0.0.5:8786"})
    sessions = [SchedulerTrainingRun.from_json(STORED),
                SchedulerTrainingRun("Hopper-v5", "h1", 7, "finetune", workload, beta=0.05, batch_episodes=2,
                                cost_weight=3000.0, episodes=10, wall_s=812.5, placement=placement)]
    meta = SchedulerProvenance(sessions, fine_tuned_from="cartpole-v2", episodes_done=10, updates=5)
    again = SchedulerProvenance.from_json(json.loads(json.dumps(meta.to_json())))
    assert again == meta and again.episodes_total == 110
    assert again.trained_on[1].workload.for_ppo()["preset"] == "locomotion"
    assert again.trained_on[1].placement == placement


def test_an_entry_written_with_its_placement_inside_the_workload_reads_it_out():
    legacy = {**STORED, "workload": {**STORED["workload"], "backend": "dask", "local_workers": 3,
                                     "backend_options": {"dask_address": "tcp://h:8786"}}}
    session = SchedulerTrainingRun.from_json(legacy)
    assert session.placement == Placement(backend="dask", backend_options={"dask_address": "tcp://h:8786"},
                                          local_workers=3)
    assert session.workload == Workload(env="CartPole-v1", i_max=32, target_return=475.0)


def test_a_preset_variant_sets_the_workloads_target():
    from flows.scheduler_flows import scheduler_target

    assert scheduler_target(Workload(env="Hopper-v5")) == 600.0  # the paper's J
    assert scheduler_target(Workload(env="Hopper-v5", preset="locomotion")) == 2000.0
    with pytest.raises(ConfigError, match="preset"):
        scheduler_target(Workload(env="Hopper-v5", preset="no-such-variant"))


def test_a_resumed_training_may_place_its_actors_elsewhere_and_learn_on_the_same_workload():
    stored = Placement(backend="dask", backend_options={"dask_address": "tcp://old:8786"}, local_workers=2)
    moved = Placement(backend_options={"dask_address": "tcp://new:8786"}).over(stored)
    assert moved == Placement(backend="dask", backend_options={"dask_address": "tcp://new:8786"}, local_workers=2)
    assert Placement().over(stored) == stored


@pytest.mark.parametrize(("data", "says"), [
    ({"trained_on": [{**STORED, "when": "today"}]}, "unknown key"),
    ({"trained_on": [{k: v for k, v in STORED.items() if k != "seed"}]}, "missing ['seed']"),
    ({"trained_on": [{**STORED, "mode": "transfer"}]}, "mode"),
    ({"trained_on": [{**STORED, "workload": {"i_max": 4}}]}, "env"),
    ({"trained_on": {"env": "CartPole-v1"}}, "list"),
    ({"trained_on": [], "progress": {"done": 1}}, "progress"),
    ([STORED], "mapping"),
])
def test_a_malformed_provenance_is_a_config_error(data, says):
    with pytest.raises(ConfigError, match=None) as info:
        SchedulerProvenance.from_json(data)
    assert says in str(info.value)

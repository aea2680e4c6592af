"""The `table2` flow at toy size: two cells (CartPole-v1 Fixed(1) and Fixed(2), one seed, two
rounds), its process dying in the second cell, re-runs that skip what finished with the same code
and settings, and `only` with changed settings."""

from __future__ import annotations

import hashlib
import json

import pytest
from mlflow.tracking import MlflowClient

from models.errors import ConfigError
from models.run.workload import Placement
from tests.experiment_faults import dies_at_run

pytestmark = pytest.mark.e2e

TWO_ROUNDS = {"i_max": 2, "max_rounds": 2, "fragment": 128}  # J of 500: both rounds run


def test_a_table_resumes_after_a_crash_reuses_finished_cells_and_reruns_changed_ones(
        prefect_api_url, mlflow_uri, tmp_path, monkeypatch):
    from flows.experiments import common
    from flows.experiments.table2 import table2

    args = dict(workloads=["CartPole-v1"], systems=["fixed:1", "fixed:2"], seeds=[0],
                workload_settings={"CartPole-v1": TWO_ROUNDS}, placement=Placement(local_workers=1),
                table="toy", tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
    real_train, ran = common.train, []
    client = MlflowClient(mlflow_uri)

    # the process "dies" in the second cell, its run RUNNING in MLflow
    monkeypatch.setattr(common, "train", dies_at_run(1, real_train, ran, client))
    with pytest.raises(RuntimeError, match="the process died"):
        table2(**args)
    assert ran == ["fixed:1"]

    monkeypatch.setattr(common, "train", lambda **kw: ran.append(kw["scheduler"]) or real_train(**kw))
    ran.clear()
    second = table2(**args)  # found by its name, not by a run id
    assert ran == ["fixed:2"]
    assert second.ran == ["CartPole-v1 / fixed:2 / seed 0"] and second.kept == ["CartPole-v1 / fixed:1 / seed 0"]
    assert second.missing == []
    parent = client.get_run(second.run_id)
    assert parent.data.tags["minionsrl.table"] == "toy" and parent.info.status == "FINISHED"
    children = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{second.run_id}'")
    assert sorted(r.info.status for r in children) == ["FAILED", "FINISHED", "FINISHED"]  # the crashed cell: FAILED
    rows = {r["scheduler"]: r for r in second.tables["CartPole-v1"]}
    assert rows["fixed:1"]["runs"] == rows["fixed:2"]["runs"] == 1
    assert rows["fixed:1"]["rounds_mean"] == rows["fixed:2"]["rounds_mean"] == 2
    assert rows["fixed:2"]["actors_mean"] == 2 and rows["fixed:2"]["env_steps_mean"] == 2 * 2 * 128
    assert rows["fixed:1"]["time_s_mean"] <= rows["fixed:1"]["wall_s_mean"]  # the cloud clock leaves out local waits

    from benchmarks.table2_page import render  # the results page, generated from the results file

    page, results_here, records, _ = render(client, "toy", "minionsrl-experiments")
    from benchmarks.table2_page import record_of

    assert record_of(records, results_here["cells"][0]) is not None  # a record is the cell's only if it is the run reported
    assert record_of(records, {**results_here["cells"][0], "run_id": "a-later-run"}) is None
    assert "## CartPole-v1" in page and "--workloads CartPole-v1 --seeds 0 --systems fixed:1 fixed:2" in page
    assert "| fixed:2 | 1 | 0 |" in page and "Missing cells" not in page
    from benchmarks.table2_page import schedule_figure  # a row's actors per round, from its cells' metrics

    figure = tmp_path / "results" / "toy_actors.png"
    figure.parent.mkdir()
    lines = schedule_figure(records, results_here, figure, tmp_path / "docs" / "toy.md", which=lambda s: s == "fixed:2")
    assert figure.stat().st_size > 0 and "](../results/toy_actors.png)" in lines
    assert "| CartPole-v1 | fixed:2 | 0 | 2 | 2.0 / 2.0 / - | other |" in lines  # 2 rounds: no last third

    ran.clear()
    third = table2(**args)  # nothing changed: nothing runs
    assert ran == [] and third.run_id == second.run_id and len(third.kept) == 2
    assert third.tables == second.tables
    from benchmarks.figure_export import export  # an experiment's plot and results, copied beside the page

    exported = export(client, third.run_id, "toy_table", out=tmp_path)
    assert (tmp_path / "toy_table.png").stat().st_size > 0 and exported["export"]["run_id"] == third.run_id
    assert json.loads((tmp_path / "toy_table.json").read_text())["tables"] == third.tables

    # another machine's fresh store: the exported cells are carried in and kept, nothing runs
    from benchmarks.table2_page import export_cells

    assert export_cells(records, results_here, tmp_path / "cells") == 2
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    carried = table2(**{**args, "tracking_uri": elsewhere, "carry": [str(tmp_path / "cells")]})
    assert ran == [] and sorted(carried.kept) == sorted(third.kept) and carried.tables == third.tables
    there, results_there, _, _ = render(MlflowClient(elsewhere), "toy", "minionsrl-experiments")
    assert all(c["carried"] for c in results_there["cells"]) and "(2 of 2 carried in from an earlier store)" in there
    with pytest.raises(ConfigError, match="no finished-run record"):
        table2(**{**args, "carry": [str(tmp_path / "docs")]})

    # other settings: every key changes; `only` runs one cell and the other is missing, not stale
    changed = {**args, "workload_settings": {"CartPole-v1": {**TWO_ROUNDS, "max_rounds": 3}}, "only": ["system=fixed:2"]}
    ran.clear()
    fourth = table2(**changed)
    assert ran == ["fixed:2"] and fourth.missing == ["CartPole-v1 / fixed:1 / seed 0"]
    assert [r["scheduler"] for r in fourth.tables["CartPole-v1"]] == ["fixed:2"]  # no J in 3 rounds: no best fixed
    assert fourth.tables["CartPole-v1"][0]["rounds_mean"] == 3

    # a carried cell of other settings never replaces a store's own matching one
    page4, results4, records4, _ = render(client, "toy", "minionsrl-experiments")
    assert export_cells(records4, results4, tmp_path / "cells4") == 1  # fixed:2 at 3 rounds
    ran.clear()
    again = table2(**{**args, "tracking_uri": elsewhere, "carry": [str(tmp_path / "cells4")]})
    assert ran == [] and sorted(again.kept) == sorted(third.kept) and again.tables == third.tables
    _, results_again, _, _ = render(MlflowClient(elsewhere), "toy", "minionsrl-experiments")
    assert all(c["carried"] for c in results_again["cells"])  # still known as carried in, a call later


def test_a_table_refuses_bad_cells_before_any_run(prefect_api_url, mlflow_uri, monkeypatch):
    from flows.experiments import common
    from flows.experiments.table2 import table2

    monkeypatch.setattr(common, "train", lambda **kw: pytest.fail("no run may start"))
    base = dict(workloads=["CartPole-v1"], systems=["fixed:1"], seeds=[0], tracking_uri=mlflow_uri)
    for bad, says in [({"systems": ["fixed:99"]}, "i_max"), ({"systems": ["sometimes"]}, "unknown scheduler"),
                      ({"only": ["system=max"]}, "matches no cell"),
                      ({"workload_settings": {"CartPole-v1": {"colour": 1}}}, "colour"),
                      ({"workload_seeds": {"Hopper-v5": [1]}}, "not in the table"),
                      ({"workloads": ["Hopper-v5-sprinting"]}, "sprinting"),
                      ({"systems": ["learned", "learned:cartpole-v9"]}, "same scheduler"),
                      ({"systems": ["learned:"]}, "not a learned row"),
                      ({"systems": ["learned:no-such-scheduler"]}, "no-such-scheduler")]:
        with pytest.raises(ConfigError, match=says):
            table2.fn(**{**base, **bad})


def test_scalability_splits_each_round_into_parts_that_add_up_to_its_cloud_time(prefect_api_url, mlflow_uri, tmp_path):
    from flows.experiments.scalability import scalability
    from models.report.scalability import PARTS
    from models.run.workload import Workload

    result = scalability(workload=Workload(env="CartPole-v1", fragment=128), placement=Placement(local_workers=1),
                         actors=[1, 2], rounds=3, seed=0, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "c"))
    assert [r["actors"] for r in result.rows] == [1, 2] and all(r["rounds"] == 2 for r in result.rows)
    for row in result.rows:
        assert sum(row[p] for p in PARTS) == pytest.approx(row["round_cloud_s"], rel=1e-9)
        assert row["sampling_s"] > 0 and row["learner_s"] > 0 and row["orchestration_s"] > 0
        assert row["round_cloud_s"] <= row["round_wall_s"] + 1e-9
    children = MlflowClient(mlflow_uri).search_runs(
        [MlflowClient(mlflow_uri).get_run(result.run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{result.run_id}'")
    assert sorted(r.data.params["scheduler"] for r in children) == ["fixed:1", "fixed:2"]
    assert {r.data.params["max_rounds"] for r in children} == {"3"}


def test_each_row_says_which_schedule_it_ran():
    from flows.experiments.table2 import cell_call
    from models.report.table2_cells import Cell
    from models.run.workload import Workload

    cartpole, hopper = Workload(env="CartPole-v1"), Workload(env="Humanoid-v5")
    ramp = cell_call(Cell("CartPole-v1", "increase", 100), cartpole, Placement(), {})
    assert ramp.label == "increase (fixed:8's budget over its rounds)" and ramp.scheduler == "increase:8:1:6:60"
    assert cell_call(Cell("CartPole-v1", "learned", 100), cartpole, Placement(), {}).label == "learned (cartpole-v9)"
    learned = cell_call(Cell("Humanoid-v5", "learned", 100), hopper, Placement(), {})
    assert learned.label == "learned (cartpole-v9, transferred)" and learned.scheduler == "learned:cartpole-v9"
    cluster = cell_call(Cell("CartPole-v1", "server-cluster", 100), cartpole, Placement(), {})
    assert (cluster.label, cluster.scheduler, cluster.system) == ("server cluster", "fixed:32", "server-cluster")


def test_the_impact_row_gets_the_workloads_env_step_budget_where_its_preset_has_one(mlflow_uri):
    """Humanoid-v5's walk gives every row S = 3M env steps, IMPACT's 32 actors included; without an
    S (Hopper-v5's variant) IMPACT keeps its own preset's budget per actor (2 actors' 1M x 16)."""
    from flows.experiments.common import Experiment
    from models.run.workload import Workload

    walk = Workload(env="Humanoid-v5", preset="locomotion")
    table = Experiment("t", walk, None, {}, mlflow_uri, None, None)
    assert table.impact_parameters(100)["max_env_steps"] == 3_000_000
    assert table.impact_parameters(100, Workload(env="Hopper-v5", preset="locomotion"))["max_env_steps"] == 16_000_000
    assert table.impact_parameters(100, walk.with_values(max_env_steps=5000))["max_env_steps"] == 5000


def test_a_table_holds_several_learned_rows_each_named_by_its_scheduler():
    """`learned:<ref>` rows beside `learned`: e.g. fine-tuned from two sources and from scratch,
    each its own row against the same cells."""
    from flows.experiments.table2 import cell_call
    from models.report.table2_cells import Cell
    from models.run.workload import Workload
    from models.scheduling.learned import shipped_checkpoint

    cartpole = Workload(env="CartPole-v1")
    own = cell_call(Cell("CartPole-v1", "learned", 100), cartpole, Placement(), {})
    named = cell_call(Cell("CartPole-v1", "learned:cartpole-v3", 100), cartpole, Placement(), {})
    assert (named.label, named.scheduler) == ("learned (cartpole-v3)", "learned:cartpole-v3")
    assert named.label != own.label and named.system == own.system == "serverless"
    assert named.settings()["scheduler_sha256"] == hashlib.sha256(shipped_checkpoint("cartpole-v3").read_bytes()).hexdigest()
    humanoid = cell_call(Cell("Humanoid-v5", "learned:cartpole-v3", 100), Workload(env="Humanoid-v5"), Placement(), {})
    assert humanoid.label == "learned (cartpole-v3)"  # named by the user: no "transferred" guess


def test_a_learned_cell_is_keyed_by_its_scheduler_bytes(tmp_path):
    """A retrained scheduler re-runs the cells that load it (and only those: its bytes are in their
    settings, not in the code fingerprint)."""
    from flows.experiments.table2 import cell_call
    from models.report.table2_cells import Cell, cell_key
    from models.run.workload import Workload
    from models.scheduling.learned import shipped_checkpoint

    cell, cartpole = Cell("CartPole-v1", "learned", 100), Workload(env="CartPole-v1")
    copy = tmp_path / "mine.pt"
    copy.write_bytes(shipped_checkpoint().read_bytes())
    packaged = cell_call(cell, cartpole, Placement(), {})
    mine = cell_call(cell, cartpole, Placement(), {"CartPole-v1": str(copy)})
    assert packaged.settings()["scheduler_sha256"] == mine.settings()["scheduler_sha256"]  # the same bytes
    before = cell_key(cell, "code", mine.settings())
    copy.write_bytes(shipped_checkpoint("cartpole-v3").read_bytes())  # retrained in place
    after = cell_call(cell, cartpole, Placement(), {"CartPole-v1": str(copy)})
    assert cell_key(cell, "code", after.settings()) != before
    fixed = cell_call(Cell("CartPole-v1", "fixed:2", 100), cartpole, Placement(), {})
    assert "scheduler_sha256" not in fixed.settings()
    with pytest.raises(ConfigError, match="no scheduler checkpoint"):
        cell_call(cell, cartpole, Placement(), {"CartPole-v1": str(tmp_path / "gone.pt")})


def test_a_cells_key_holds_only_the_settings_its_run_reads():
    """An IMPACT override (tuned after a table's PPO rows ran) re-keys the IMPACT cells only; a PPO
    override re-keys the PPO cells only."""
    from flows.experiments.table2 import cell_call
    from models.report.table2_cells import Cell, cell_key
    from models.run.workload import Workload

    def keys(workload: Workload) -> tuple[str, str]:
        ppo, impact = Cell("CartPole-v1", "fixed:2", 100), Cell("CartPole-v1", "impact", 100)
        return (cell_key(ppo, "code", cell_call(ppo, workload, Placement(), {}).settings()),
                cell_key(impact, "code", cell_call(impact, workload, Placement(), {}).settings()))

    plain = keys(Workload(env="CartPole-v1"))
    tuned_impact = keys(Workload(env="CartPole-v1", impact={"learning_rate": 0.002}))
    tuned_ppo = keys(Workload(env="CartPole-v1", ppo={"learning_rate": 0.002}))
    assert tuned_impact[0] == plain[0] and tuned_impact[1] != plain[1]
    assert tuned_ppo[0] != plain[0] and tuned_ppo[1] == plain[1]


def test_a_learned_cells_result_names_the_checkpoint_bytes_it_ran():
    """The results file's cells carry them, for the transfer page's provenance check."""
    from types import SimpleNamespace

    from flows.experiments.table2 import cell_call, kept_cell
    from models.report.table2_cells import Cell
    from models.run.workload import Workload
    from models.scheduling.learned import shipped_checkpoint

    cell = Cell("CartPole-v1", "learned", 100)
    call = cell_call(cell, Workload(env="CartPole-v1"), Placement(), {})
    exp = SimpleNamespace(finished=lambda *_: SimpleNamespace(summary=None, impact=None))
    kept = kept_cell(exp, cell, call, "key")
    assert kept.scheduler_sha256 == hashlib.sha256(shipped_checkpoint().read_bytes()).hexdigest()


def test_a_ramp_runs_over_the_rounds_its_seeds_fixed_8_cell_took():
    from types import SimpleNamespace

    from flows.experiments.table2 import cell_call, over_base_rounds
    from models.report.table2_cells import Cell
    from models.run.workload import Workload

    cell = Cell("CartPole-v1", "decrease", 101)
    call = cell_call(cell, Workload(env="CartPole-v1"), Placement(), {})
    other_seed = SimpleNamespace(cell=Cell("CartPole-v1", "fixed:8", 100), summary=SimpleNamespace(rounds=30))
    assert over_base_rounds(call, cell, [other_seed]) is None  # its own seed's Fixed(8) has not finished
    base = SimpleNamespace(cell=Cell("CartPole-v1", "fixed:8", 101), summary=SimpleNamespace(rounds=9))
    ramp = over_base_rounds(call, cell, [other_seed, base])
    assert ramp.scheduler == "decrease:8:1:1:9" and ramp.label == call.label  # one row, whatever each seed's rounds
    assert ramp.settings() != call.settings()  # the spec run is the cache key's
    fixed = Cell("CartPole-v1", "fixed:2", 101)
    fixed_call = cell_call(fixed, Workload(env="CartPole-v1"), Placement(), {})
    assert over_base_rounds(fixed_call, fixed, []) is fixed_call


def test_the_page_names_a_learned_scheduler_that_is_not_the_workloads_own():
    from benchmarks.table2_page import _learned_option

    def results(row: str) -> dict:
        return {"cells": [{"workload": "HalfCheetah-v5-locomotion", "system": "learned", "row": row},
                          {"workload": "HalfCheetah-v5-locomotion", "system": "fixed:2", "row": "fixed:2"}]}

    assert _learned_option("HalfCheetah-v5-locomotion", results("learned (halfcheetah-locomotion)")) == ""
    mine = results("learned (/tmp/hc-48ep.pt)")
    assert _learned_option("HalfCheetah-v5-locomotion", mine) == " --learned HalfCheetah-v5-locomotion=/tmp/hc-48ep.pt"
    transferred = {"cells": [{"workload": "Humanoid-v5", "system": "learned", "row": "learned (cartpole-v9, transferred)"}]}
    assert _learned_option("Humanoid-v5", transferred) == ""  # the shipped one, transferred: the default

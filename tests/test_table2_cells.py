"""models/report/table2_cells.py: a Table 2's cells, their cache keys and `--only`; the page's body table."""

from __future__ import annotations

import hashlib
import math

import pytest

from models.errors import ConfigError
from models.report.table2_cells import (
    SHIPPED,
    Cell,
    cell_key,
    code_fingerprint,
    file_digest,
    is_learned,
    learned_ref,
    learned_row_ref,
    plan_cells,
    ramp_spec,
    select,
    workload_parts,
)
from models.report.table2_rows import LastEvaluation

CELLS = plan_cells(["CartPole-v1", "Hopper-v5-locomotion"], ["learned", "max", "impact"],
                   {"CartPole-v1": [100, 101], "Hopper-v5-locomotion": [100]})


def test_cells_run_seed_by_seed_with_every_system_of_a_seed_together():
    assert len(CELLS) == 9
    assert CELLS[:4] == [Cell("CartPole-v1", "learned", 100), Cell("CartPole-v1", "max", 100),
                         Cell("CartPole-v1", "impact", 100), Cell("CartPole-v1", "learned", 101)]
    assert CELLS[-1].label == "Hopper-v5-locomotion / impact / seed 100"


def test_the_cache_key_changes_with_the_code_and_the_settings_and_only_with_them():
    cell = Cell("CartPole-v1", "max", 100)
    key = cell_key(cell, "code-a", {"i_max": 32, "ppo": {"lr": 3e-4, "epochs": 10}})
    assert key == cell_key(cell, "code-a", {"ppo": {"epochs": 10, "lr": 3e-4}, "i_max": 32})  # order: same
    assert key != cell_key(cell, "code-b", {"i_max": 32, "ppo": {"lr": 3e-4, "epochs": 10}})
    assert key != cell_key(cell, "code-a", {"i_max": 32, "ppo": {"lr": 1e-3, "epochs": 10}})
    assert key != cell_key(Cell("CartPole-v1", "max", 101), "code-a", {"i_max": 32, "ppo": {"lr": 3e-4, "epochs": 10}})
    with pytest.raises(ConfigError, match="JSON"):
        cell_key(cell, "code-a", {"when": object()})


def test_the_code_fingerprint_follows_every_source_file(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "flows").mkdir()
    (tmp_path / "models" / "ppo.py").write_text("LR = 3e-4\n")
    (tmp_path / "flows" / "notes.md").write_text("not code\n")
    first = code_fingerprint(tmp_path, ("models", "flows"))
    (tmp_path / "flows" / "notes.md").write_text("changed, still not code\n")
    assert code_fingerprint(tmp_path, ("models", "flows")) == first
    (tmp_path / "models" / "ppo.py").write_text("LR = 1e-3\n")
    second = code_fingerprint(tmp_path, ("models", "flows"))
    assert second != first
    (tmp_path / "models" / "hopper.pt").write_bytes(b"a packaged scheduler")  # not code: its cells key its bytes
    assert code_fingerprint(tmp_path, ("models", "flows")) == second
    assert file_digest(tmp_path / "models" / "hopper.pt") == hashlib.sha256(b"a packaged scheduler").hexdigest()


def test_only_takes_any_filter_and_all_parts_of_one():
    assert select(CELLS, []) == CELLS
    assert select(CELLS, ["system=max"]) == [c for c in CELLS if c.system == "max"]
    assert select(CELLS, ["workload=CartPole-v1,seed=101"]) == [c for c in CELLS if c.seed == 101]
    both = select(CELLS, ["system=impact,workload=Hopper-v5-locomotion", "system=learned,seed=101"])
    assert both == [Cell("CartPole-v1", "learned", 101), Cell("Hopper-v5-locomotion", "impact", 100)]


@pytest.mark.parametrize("bad, says", [("system", "field=value"), ("colour=red", "field=value"),
                                       ("seed=100,seed=101", "twice"), ("system=maxx", "matches no cell")])
def test_a_bad_only_is_refused_before_anything_runs(bad, says):
    with pytest.raises(ConfigError, match=says):
        select(CELLS, [bad])


def test_a_plan_without_seeds_for_a_workload_or_with_a_system_twice_is_refused():
    with pytest.raises(ConfigError, match="no seeds"):
        plan_cells(["CartPole-v1", "Hopper-v5"], ["max"], {"CartPole-v1": [100]})
    with pytest.raises(ConfigError, match="twice"):
        plan_cells(["CartPole-v1"], ["max", "max"], {"CartPole-v1": [100]})


def test_a_workload_name_carries_its_preset_variant():
    assert workload_parts("Hopper-v5-locomotion") == ("Hopper-v5", "locomotion")
    assert workload_parts("CartPole-v1") == ("CartPole-v1", None)
    assert workload_parts("-locomotion") == ("-locomotion", None)  # no env before it: left to the env check


def test_each_workload_gets_its_own_learned_scheduler_unless_told():
    assert learned_ref("Hopper-v5", {}) == ("hopper", True)
    assert learned_ref("CartPole-v1", {}) == (SHIPPED, True)
    assert learned_ref("Humanoid-v5", {}) == (SHIPPED, False)  # none of its own: the CartPole one, transferred
    assert learned_ref("Hopper-v5", {"Hopper-v5": "hopper-scratch"}) == ("hopper-scratch", True)
    # a variant's own scheduler, else its env's; the user's by workload name or env id
    assert learned_ref("HalfCheetah-v5-locomotion", {}) == ("halfcheetah-locomotion", True)
    assert learned_ref("Hopper-v5-locomotion", {}) == ("hopper-locomotion", True)
    assert learned_ref("Humanoid-v5-locomotion", {}) == (SHIPPED, False)
    assert learned_ref("HalfCheetah-v5-locomotion", {"HalfCheetah-v5": "x.pt"}) == ("x.pt", True)
    assert learned_ref("Hopper-v5-locomotion", {"Hopper-v5-locomotion": "y.pt", "Hopper-v5": "x.pt"}) == ("y.pt", True)


def test_a_named_learned_row_runs_the_scheduler_it_names():
    assert learned_row_ref("learned", "Hopper-v5", {}) == ("hopper", True)
    assert learned_row_ref("learned:hopper-locomotion", "HalfCheetah-v5-locomotion", {}) == ("hopper-locomotion", True)
    assert learned_row_ref("learned:runs:/abc/scheduler/s.pt", "Hopper-v5", {}) == ("runs:/abc/scheduler/s.pt", True)
    assert learned_row_ref("learned:/tmp/a:b.pt", "Hopper-v5", {"Hopper-v5": "x.pt"}) == ("/tmp/a:b.pt", True)
    assert is_learned("learned") and is_learned("learned:x") and not is_learned("fixed:8") and not is_learned("learnedx")
    for bad in ("learned:", "fixed:2"):
        with pytest.raises(ConfigError, match="not a learned row"):
            learned_row_ref(bad, "Hopper-v5", {})


@pytest.mark.parametrize(("system", "rounds", "spec"), [
    ("increase", 60, "increase:8:1:6:60"), ("decrease", 28, "decrease:8:1:3:28"), ("increase", 5, "increase:8:1:1:5")])
def test_the_ramps_spread_fixed_8s_budget_over_the_rounds_it_took(system, rounds, spec):
    assert ramp_spec(system, rounds) == spec
    from models.scheduling.schedulers import RoundState, make_scheduler

    ramp = make_scheduler(spec, 32, 488, 100.0)  # K = 488: the spec's own rounds, not K, centre it
    counts = [ramp.choose(RoundState(k, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)) for k in range(rounds)]
    assert min(counts) >= 3 and max(counts) <= 13  # 8 -+ 4.5, clipped to whole actors
    assert (counts[0] < counts[-1]) == (system == "increase")
    blocks = -(-rounds // ramp.every)
    assert abs(sum(counts[: blocks * ramp.every]) / (blocks * ramp.every) - 8) <= 0.5  # Fixed(8)'s budget
    with pytest.raises(ConfigError, match="rounds >= 1"):
        ramp_spec(system, 0)


def test_a_seeds_ramps_come_after_its_fixed_8_cell_and_need_it():
    cells = plan_cells(["CartPole-v1"], ["increase", "fixed:8", "decrease", "max"], {"CartPole-v1": [100, 101]})
    assert [(c.seed, c.system) for c in cells] == [(100, "fixed:8"), (100, "max"), (100, "increase"), (100, "decrease"),
                                                    (101, "fixed:8"), (101, "max"), (101, "increase"), (101, "decrease")]
    with pytest.raises(ConfigError, match="add fixed:8"):
        plan_cells(["CartPole-v1"], ["increase", "max"], {"CartPole-v1": [100]})


def test_a_ramp_is_only_increase_or_decrease():
    with pytest.raises(ConfigError, match="ramps"):
        ramp_spec("max", 60)


def test_the_page_states_what_the_body_did_at_each_rows_last_evaluation(mlflow_uri):
    # real MLflow runs with the eval/ metrics a train or IMPACT run logs; the last evaluation counts
    from mlflow.tracking import MlflowClient

    from benchmarks.table2_page import body_lines, cell_evaluations, last_evaluation

    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("body")

    def run(evaluations: dict[int, tuple[float, ...]]) -> str:
        run_id = client.create_run(experiment).info.run_id
        keys = ("eval/return_mean", "eval/forward_displacement_mean", "eval/forward_displacement_min", "eval/length_mean")
        for step, values in evaluations.items():
            for key, value in zip(keys, values, strict=False):  # an older run has no eval/length_mean
                client.log_metric(run_id, key, value, step=step)
        return run_id

    hopping = run({8: (900.0, 0.1, -0.2, 300.0), 16: (2100.0, 8.0, 7.5, 1000.0)})
    older = run({8: (2300.0, 10.0, 9.0)})
    standing = run({8: (1000.0, 0.0, -0.1, 1000.0)})
    assert last_evaluation(client, hopping) == LastEvaluation(2100.0, 1000.0, 8.0, 7.5)
    assert math.isnan(last_evaluation(client, older).length_mean)
    assert last_evaluation(client, run({})) is None
    assert last_evaluation(client, "a-run-carried-in-from-elsewhere") is None
    cells = [{"workload": "Hopper-v5-locomotion", "row": "fixed:2", "run_id": hopping},
             {"workload": "Hopper-v5-locomotion", "row": "fixed:2", "run_id": older},
             {"workload": "Hopper-v5-locomotion", "row": "max", "run_id": standing},
             {"workload": "Hopper-v5-locomotion", "row": "max", "run_id": "carried"},
             {"workload": "CartPole-v1", "row": "max", "run_id": standing}]
    results = {"cells": cells, "workloads": {"Hopper-v5-locomotion": {"env": "Hopper-v5"},
                                             "CartPole-v1": {"env": "CartPole-v1"}}}
    evaluations = cell_evaluations(client, results, {})
    lines = "\n".join(body_lines("Hopper-v5-locomotion", results, evaluations))
    assert "| fixed:2 | 2 | 2,200 | 1,000 | 9 | 7.5 |" in lines  # means over seeds; the lowest episode anywhere
    assert "| max | 1 | 1,000 | 1,000 | 0 | -0.1 |" in lines
    assert "Not known for some cells of: max (carried in without their evaluations)" in lines
    assert body_lines("CartPole-v1", results, evaluations) == []  # no body: no section
    # a carried cell's evaluation, known from the file exported beside its record, joins its row
    carried = LastEvaluation(1200.0, 400.0, 2.0, 1.0)
    lines = "\n".join(body_lines("Hopper-v5-locomotion", results, cell_evaluations(client, results, {"carried": carried})))
    assert "| max | 2 | 1,100 | 700 | 1 | -0.1 |" in lines and "Not known" not in lines


def test_exported_evaluations_are_added_to_the_folders_file(tmp_path):
    # table2_page --cells DIR: a later export adds its cells' evaluations to those already there
    from benchmarks.table2_page import export_cells, exported_evaluations

    first, later = LastEvaluation(1.0, 2.0, 3.0, 4.0), LastEvaluation(5.0, 6.0, 7.0, 8.0)
    assert exported_evaluations(tmp_path) == {}
    export_cells({}, {"cells": []}, tmp_path, {"run-a": first})
    export_cells({}, {"cells": []}, tmp_path, {"run-b": later})
    assert exported_evaluations(tmp_path) == {"run-a": first, "run-b": later}


def test_last_evaluations_travel_as_strict_json_and_a_bad_file_is_refused():
    from models.report.table2_rows import evaluations_json, parse_evaluations

    evaluations = {"run-a": LastEvaluation(2100.0, math.nan, 8.0, 7.5), "run-b": LastEvaluation(5200.0, 950.0, 9.8, 7.9)}
    text = evaluations_json(evaluations)
    assert "NaN" not in text and "null" in text  # strict JSON: an older run's missing length is null
    back = parse_evaluations(text, "cells/last_evaluations.json")
    assert back["run-b"] == evaluations["run-b"] and math.isnan(back["run-a"].length_mean)
    assert back["run-a"].return_mean == 2100.0
    for bad in ("[1, 2]", '{"run-a": {"return_mean": 1.0}}', "not json",
                '{"run-a": {"return_mean": "x", "length_mean": 1, "displacement_mean": 1, "displacement_min": 1}}'):
        with pytest.raises(ConfigError, match="cells/last_evaluations.json: not a file of last evaluations"):
            parse_evaluations(bad, "cells/last_evaluations.json")




def test_the_page_names_the_commit_of_the_checkout_whose_code_the_cells_ran(tmp_path):
    # `table2_page --code-root <worktree of the cells' commit>`: newer page code, the cells' commit named
    from benchmarks.table2_page import ROOT, _commit

    code = code_fingerprint(ROOT)
    assert not _commit(code).startswith("not ")
    assert _commit(code, tmp_path).startswith("not unknown (its code differs")  # no checkout of that code there

"""models/report/transfer_table.py: a Table 2's learned rows with their schedulers' training, and
what fine-tuning saved against training from scratch."""

from __future__ import annotations

import pytest

from models.errors import ConfigError
from models.report.transfer_table import TrainingSpent, spent, transfer_rows, verdicts
from models.run.workload import Workload
from models.scheduling.provenance import SchedulerProvenance, SchedulerTrainingRun

HC = "HalfCheetah-v5"
TARGET = (HC, None)


def run(env: str, mode: str, episodes: int, wall_s: float, billed_usd: float) -> SchedulerTrainingRun:
    return SchedulerTrainingRun(env=env, mlflow_run_id=f"{env}-{mode}", seed=0, mode=mode, workload=Workload(env=env),
                                beta=0.1, batch_episodes=2, episodes=episodes, wall_s=wall_s, billed_usd=billed_usd)


PROVENANCE = {
    # CartPole 300 episodes, then 10 on HalfCheetah
    "from-cartpole": SchedulerProvenance([run("CartPole-v1", "scratch", 300, 2847.0, 0.09),
                                          run(HC, "finetune", 10, 431.0, 0.02)]),
    "from-hopper": SchedulerProvenance([run("CartPole-v1", "scratch", 300, 2847.0, 0.09),
                                        run("Hopper-v5", "finetune", 10, 1244.0, 0.05),
                                        run(HC, "finetune", 10, 500.0, 0.025)]),
    # from scratch in two sittings: the second one continued it (its mode says finetune)
    "scratch": SchedulerProvenance([run(HC, "scratch", 48, 4380.0, 0.225), run(HC, "finetune", 52, 2620.0, 0.1)]),
}


def row(ref: str, time_s: float, reached: int = 5) -> dict[str, object]:
    return {"scheduler": f"learned ({ref})", "runs": 5, "reached": reached, "time_s_mean": time_s,
            "time_s_std": 1.0, "cost_usd_mean": time_s / 10_000}


def test_each_learned_row_gets_its_training_on_the_target_and_before_it():
    rows = transfer_rows([row("from-cartpole", 34.0), {"scheduler": "fixed:2", "runs": 5, "reached": 5,
                                                        "time_s_mean": 29.5, "cost_usd_mean": 0.001},
                          row("from-hopper", 40.0), row("scratch", 50.0)], PROVENANCE, TARGET)
    by = {r.ref: r for r in rows}
    assert list(by) == ["from-cartpole", "from-hopper", "scratch"]  # the fixed row is not a transfer
    assert by["from-cartpole"].sources == ("CartPole-v1",) and by["from-hopper"].sources == ("CartPole-v1", "Hopper-v5")
    assert by["scratch"].from_scratch and by["scratch"].on_target == TrainingSpent(100, 7000.0, pytest.approx(0.325))
    assert by["from-hopper"].before == TrainingSpent(310, 4091.0, pytest.approx(0.14))
    assert spent(PROVENANCE["from-cartpole"], TARGET, True) == TrainingSpent(10, 431.0, 0.02)
    locomotion = transfer_rows([row("from-cartpole", 34.0)], PROVENANCE, (HC, "locomotion"))
    assert locomotion == []  # trained on HalfCheetah-v5's own preset: zero-shot on its locomotion variant


def test_snapshots_of_the_scratch_training_bracket_what_fine_tuning_saved():
    snapshot = {"scratch-48": SchedulerProvenance([run(HC, "scratch", 48, 4380.0, 0.225)])}
    provenance = {**PROVENANCE, **snapshot}
    # scratch at 48 episodes slower, at 100 within 5% of the fine-tuned: matched in between
    (verdict,) = verdicts(transfer_rows([row("from-cartpole", 32.1), row("scratch-48", 50.0), row("scratch", 32.3)],
                                        provenance, TARGET))
    assert (verdict.matched_by, verdict.matched_wall_s, verdict.unmatched_wall_s) == ("learned (scratch)", 7000.0, 4380.0)
    assert verdict.saving() == "between 90% and 94% (from scratch matched it between 73 and 117 min of training)"
    (never,) = verdicts(transfer_rows([row("from-cartpole", 32.1), row("scratch-48", 50.0), row("scratch", 40.0)],
                                      provenance, TARGET))
    assert never.matched_by is None and never.saving() == "at least 94% (from scratch had not matched it after 117 min of training)"
    (early,) = verdicts(transfer_rows([row("from-cartpole", 32.1), row("scratch-48", 30.0), row("scratch", 29.0)],
                                      provenance, TARGET))
    assert early.matched_by == "learned (scratch-48)" and early.saving() == "at most 90% (from scratch matched it by 73 min)"


def test_a_scratch_row_that_missed_j_on_a_seed_is_no_yardstick_and_bad_rows_are_refused():
    assert verdicts(transfer_rows([row("from-cartpole", 34.0), row("scratch", 30.0, reached=4)], PROVENANCE, TARGET)) == []
    with pytest.raises(ConfigError, match="no provenance"):
        transfer_rows([row("unknown", 1.0)], PROVENANCE, TARGET)
    assert transfer_rows([row("from-cartpole", 1.0)], PROVENANCE, ("Hopper-v5", None)) == []  # zero-shot: no transfer
    # a fine-tuned row that missed J on a seed has a time to stop, not to J: not compared
    assert verdicts(transfer_rows([row("from-cartpole", 34.0, reached=4), row("scratch", 30.0)], PROVENANCE, TARGET)) == []


def test_a_bound_below_zero_is_no_bound():
    from models.report.transfer_table import TransferVerdict

    slower = TransferVerdict("learned (x)", 600.0, "learned (scratch)", 1200.0, 480.0)  # tuned 10 min > 8 min unmatched
    assert slower.saving() == "at most 50% (from scratch matched it by 20 min)"
    unknown = TransferVerdict("learned (x)", 600.0, None, float("inf"), 480.0)
    assert unknown.saving().startswith("unknown (from scratch had not matched it after 8 min")


def test_the_page_reads_each_rows_training_from_its_packaged_checkpoint(tmp_path):
    from benchmarks.transfer_page import render

    table = [row("halfcheetah-locomotion", 34.3), row("halfcheetah-locomotion-scratch", 55.7),
             {"scheduler": "best fixed (fixed:2)", "runs": 5, "reached": 5, "time_s_mean": 29.5, "cost_usd_mean": 0.00127}]
    results = {"tables": {"HalfCheetah-v5-locomotion": table}, "seeds": {"HalfCheetah-v5-locomotion": [100, 101]}}
    figure = tmp_path / "results" / "t.png"
    figure.parent.mkdir()
    page = render(results, "HalfCheetah-v5-locomotion", figure, tmp_path / "docs" / "t.md")
    assert "| `halfcheetah-locomotion` | CartPole-v1 | 300, 47 min, $0.090 | 10 |" in page
    assert "| `halfcheetah-locomotion-scratch` | nothing (from scratch) | - |" in page
    assert "- learned (halfcheetah-locomotion) (7.2 min of training on the target; matched by no from-scratch row" in page
    assert "training saved at least" in page and figure.stat().st_size > 0 and "](../results/t.png)" in page


def test_the_page_refuses_a_row_whose_checkpoint_was_retrained_since_the_table_ran(tmp_path):
    from benchmarks.transfer_page import render
    from models.report.table2_cells import file_digest
    from models.scheduling.learned import resolve_checkpoint

    name = "HalfCheetah-v5-locomotion"
    cell = {"workload": name, "row": "learned (halfcheetah-locomotion)", "seed": 100}
    results = {"tables": {name: [row("halfcheetah-locomotion", 34.3)]}, "seeds": {name: [100]},
               "cells": [{**cell, "scheduler_sha256": file_digest(resolve_checkpoint("halfcheetah-locomotion"))}]}
    assert "did not record which checkpoint" not in render(results, name, None, tmp_path / "t.md")
    results["cells"] = [{**cell, "scheduler_sha256": "0" * 64}]
    with pytest.raises(SystemExit, match="not the one row 'learned \\(halfcheetah-locomotion\\)' ran"):
        render(results, name, None, tmp_path / "t.md")

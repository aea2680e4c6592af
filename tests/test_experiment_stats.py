"""The experiments' statistics (models/report/experiment_stats.py) on hand-computed values."""

from __future__ import annotations

import json
import math

import pytest

from models.report.experiment_stats import (
    AggregateRow,
    PhaseRow,
    actor_rounds,
    aggregate,
    best_fixed,
    finite_row,
    fixed_sweep,
    judge_against_best_fixed,
    markdown_table,
    mean_curve,
    mean_phases,
    mean_std,
    metric_label,
    phase_row,
    phase_shape,
    phases,
    row_metrics,
    stripped,
    summary_record,
)
from models.run.records import STOP_TARGET, RoundRecord, RunSummary
from models.scheduling.features import SchedulerTrace


def _round(k: int, actors: int) -> RoundRecord:
    return RoundRecord(round_index=k, actors=actors, mean_return=10.0 * k, env_steps=100, round_s=1.0,
                       wall_s=1.5, learner_s=0.2, actor_mean_s=0.8, cost_usd=0.01, loss=0.5, policy_kl=0.01)


def _summary(time_s: float, cost: float, reached: bool, actors: list[int], seed: int = 0) -> RunSummary:
    return RunSummary(run_id=f"r{seed}", env_id="CartPole-v1", scheduler="max", seed=seed,
                      stop_reason=STOP_TARGET if reached else "max_rounds", rounds=len(actors),
                      final_return=1.0, best_return=2.0, env_steps=100 * len(actors), cost_usd=cost,
                      server_cluster_cost_usd=10 * cost, time_to_stop_s=0.5 * time_s, wall_time_s=2 * time_s,
                      cloud_time_s=time_s,
                      history=tuple(_round(k, a) for k, a in enumerate(actors)),
                      scheduler_trace=SchedulerTrace(mode="greedy", source=None, i_max=4, target_return=1.0,
                                                     max_rounds=3, budget_usd=None, features=(), steps=()))


def _close(got: float, expected: float) -> bool:
    return (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(("values", "expected"), [
    ([2.0, 4.0], (3.0, 1.0)),
    ([1.0, 2.0, 3.0, 4.0], (2.5, math.sqrt(1.25))),  # population std: sqrt((2.25+0.25+0.25+2.25)/4)
    ([5.0, math.nan, None, math.inf], (5.0, 0.0)),  # only finite values count
    ([], (math.nan, math.nan)),
    ([math.nan], (math.nan, math.nan)),
])
def test_mean_std(values, expected):
    got = mean_std(values)
    assert all(_close(g, e) for g, e in zip(got, expected, strict=True))


def test_aggregate_mean_std_over_seeds():
    runs = [_summary(2.0, 0.1, True, [4, 4]), _summary(4.0, 0.3, False, [8, 8, 8], seed=1)]
    row = aggregate("x", runs)
    assert isinstance(row, AggregateRow)
    assert (row.label, row.runs, row.reached) == ("x", 2, 1)
    assert row.time_s_mean == pytest.approx(3.0) and row.time_s_std == pytest.approx(1.0)  # the cloud clock
    assert row.value("wall_s_mean") == pytest.approx(6.0) and row.value("sum_pk_s_mean") == pytest.approx(1.5)
    assert row.cost_usd_mean == pytest.approx(0.2) and row.cost_usd_std == pytest.approx(0.1)
    assert row.rounds_mean == pytest.approx(2.5)
    assert row.actors_mean == pytest.approx(6.0)  # mean of the runs' means: (4 + 8) / 2
    assert row.reached_frac == 0.5
    server = aggregate("server", runs, cost_key="server_cluster_cost_usd")
    assert server.cost_usd_mean == pytest.approx(2.0) and server.cost_usd_std == pytest.approx(1.0)


def test_aggregate_of_no_runs_and_runs_without_rounds():
    empty = aggregate("none", [])
    assert empty.runs == 0 and empty.reached == 0 and empty.reached_frac == 0.0
    assert math.isnan(empty.time_s_mean) and math.isnan(empty.actors_mean)
    no_rounds = aggregate("r", [_summary(1.0, 0.1, False, [])])
    assert no_rounds.rounds_mean == 0.0 and math.isnan(no_rounds.actors_mean)


def test_aggregate_row_columns_keep_the_table_names_and_order():
    row = aggregate("server cluster", [_summary(2.0, 0.1, True, [4, 4])])
    more = row.with_columns(scheduler_training_wall_s=12.5, scheduler_episodes=3)
    assert list(more.as_dict()) == ["scheduler", "runs", "reached", "time_s_mean", "time_s_std", "cost_usd_mean",
                                    "cost_usd_std", "rounds_mean", "actors_mean", "wall_s_mean", "sum_pk_s_mean",
                                    "cost_resident_learner_usd_mean",
                                    "scheduler_training_wall_s", "scheduler_episodes"]
    assert more.value("scheduler") == "server cluster" and more.value("scheduler_episodes") == 3
    assert row.as_dict() == {k: v for k, v in more.as_dict().items() if not k.startswith("scheduler_")}  # frozen
    assert more.with_columns(scheduler_episodes=4).value("scheduler_episodes") == 4
    with pytest.raises(KeyError):
        row.value("nope")
    with pytest.raises(AttributeError):
        row.runs = 3  # type: ignore[misc]


def test_row_metrics_names_rows_by_label_without_spaces():
    a = aggregate("server cluster", [_summary(2.0, 0.1, True, [4])]).with_columns(actor_rounds_mean=4.0)
    b = aggregate("max", [_summary(3.0, 0.2, True, [8]), _summary(5.0, 0.4, True, [8])]).with_columns(
        actor_rounds_mean=8.0)
    assert row_metrics([a, b], ("time_s_mean", "actor_rounds_mean")) == pytest.approx({
        "server_cluster/time_s_mean": 2.0, "server_cluster/actor_rounds_mean": 4.0,
        "max/time_s_mean": 4.0, "max/actor_rounds_mean": 8.0})
    assert metric_label("best fixed (fixed:8)") == "best_fixed_fixed:8"


@pytest.mark.parametrize(("actors", "expected"), [
    ([32, 30, 8, 6, 20, 28], (31.0, 7.0, 24.0)),
    ([5, 5, 5, 5], (5.0, 5.0, 5.0)),
    ([1, 2, 3, 4, 5, 6, 7], (2.0, 4.5, 6.5)),  # thirds of 3, 2, 2 rounds
    ([3, 9], (3.0, 9.0, math.nan)),
    ([], (math.nan, math.nan, math.nan)),
])
def test_phases_are_thirds_of_the_run(actors, expected):
    assert all(_close(g, e) for g, e in zip(phases(actors), expected, strict=True))


@pytest.mark.parametrize(("thirds", "shape"), [
    ((31.0, 7.0, 24.0), "many-fewer-more"), ((5.0, 5.0, 5.0), "flat"), ((1.0, 2.0, 3.0), "other"),
    ((3.0, 9.0, math.nan), "other"),
])
def test_phase_shape(thirds, shape):
    assert phase_shape(*thirds) == shape


def test_phase_rows_and_their_means():
    a = phase_row(7, _summary(2.0, 0.1, True, [32, 30, 8, 6, 20, 28], seed=7))
    b = phase_row(8, _summary(2.0, 0.1, False, [5, 5, 5], seed=8))
    assert a == PhaseRow(seed=7, rounds=6, reached=True, actors=(32, 30, 8, 6, 20, 28), early=31.0, middle=7.0,
                         late=24.0, shape="many-fewer-more")
    assert a.as_dict() == {"seed": 7, "rounds": 6, "reached": True, "actors": "[32, 30, 8, 6, 20, 28]",
                           "early": 31.0, "middle": 7.0, "late": 24.0, "shape": "many-fewer-more"}
    assert b.shape == "flat" and not b.reached
    assert mean_phases([a, b]) == pytest.approx((18.0, 6.0, 14.5))
    short = phase_row(9, _summary(1.0, 0.1, False, [3, 9]))
    assert mean_phases([b, short]) == pytest.approx((4.0, 7.0, 5.0))  # NaN thirds left out


def test_actor_rounds_and_mean_curve():
    assert actor_rounds(_summary(1.0, 0.1, True, [4, 6, 2])) == 12
    assert actor_rounds(_summary(1.0, 0.1, True, [])) == 0
    assert mean_curve([[4, 6, 2], [8, 2]]) == pytest.approx([6.0, 4.0, 2.0])
    assert mean_curve([]) == []


def test_markdown_table():
    rows = [{"scheduler": "max", "runs": 2, "time_s_mean": 1 / 3}, {"scheduler": "adapt", "runs": 1,
                                                                      "time_s_mean": math.nan}]
    assert markdown_table(rows) == ("| scheduler | runs | time_s_mean |\n|---|---|---|\n"
                                    "| max | 2 | 0.333333 |\n| adapt | 1 | nan |")
    assert markdown_table([]) == "(no rows)"


def test_finite_row_turns_non_finite_floats_into_none():
    assert finite_row({"a": math.nan, "b": math.inf, "c": 1.5, "d": "x", "e": 3}) == {
        "a": None, "b": None, "c": 1.5, "d": "x", "e": 3}


def test_summary_record_drops_the_trace_and_keeps_json():
    s = _summary(2.0, 0.1, True, [4, 6])
    record = summary_record(s)
    assert "scheduler_trace" not in record and record["target_reached"] is True
    assert record["cloud_time_s"] == 2.0 and record["server_cluster_cost_usd"] == pytest.approx(1.0)
    assert [h["actors"] for h in record["history"]] == [4, 6]
    assert json.loads(json.dumps(record))["history"][1]["round_index"] == 1
    assert stripped({"max": [s]}) == {"max": [record]}


def test_importing_the_statistics_loads_neither_prefect_nor_mlflow():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nimport models.report.experiment_stats\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0].startswith(('prefect', 'mlflow')))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def _row(label: str, cost: float, time_s: float, reached: int = 3, runs: int = 3) -> AggregateRow:
    return AggregateRow(label=label, runs=runs, reached=reached, time_s_mean=time_s, time_s_std=0.0,
                        cost_usd_mean=cost, cost_usd_std=0.0, rounds_mean=1.0, actors_mean=1.0)


def test_fixed_sweep_stops_at_i_max():
    assert fixed_sweep(32) == ["fixed:1", "fixed:2", "fixed:4", "fixed:8", "fixed:16", "fixed:32"]
    assert fixed_sweep(8) == ["fixed:1", "fixed:2", "fixed:4", "fixed:8"]


def test_best_fixed_is_the_cheapest_count_that_reached_j_on_every_seed():
    rows = [_row("learned", 0.5, 1.0), _row("fixed:1", 0.1, 50.0, reached=2),  # missed J once
            _row("fixed:4", 0.3, 9.0), _row("fixed:8", 0.3, 7.0), _row("fixed:32", 0.9, 3.0),
            _row("max", 0.01, 1.0)]
    best = best_fixed(rows)
    assert best.label == "fixed:8"  # cost tie with fixed:4, faster
    assert best_fixed([_row("fixed:2", 0.1, 1.0, reached=0)]) is None


def test_judged_against_the_best_fixed_count():
    best = _row("fixed:8", 1.0, 10.0)
    assert all(judge_against_best_fixed(_row("learned", 1.04, 10.0), best).values())
    checks = judge_against_best_fixed(_row("learned", 1.06, 9.0), best)
    assert checks == {"cost <= 1.05 x best fixed (fixed:8)": False, "time <= best fixed (fixed:8)": True,
                      "reached J on every seed": True}
    assert not judge_against_best_fixed(_row("learned", 0.5, 10.5), best)["time <= best fixed (fixed:8)"]
    assert not judge_against_best_fixed(_row("learned", 0.5, 5.0, reached=2), best)["reached J on every seed"]


def test_a_learned_scheduler_that_is_a_fixed_count_is_named_as_that_count():
    from models.report.experiment_stats import same_schedule_as

    learned = [_summary(1.0, 0.1, True, [1, 1, 1]), _summary(1.2, 0.1, True, [1, 1], seed=1)]
    fixed = {"max": [_summary(9.0, 1.0, True, [1, 1, 1]), _summary(9.0, 1.0, True, [1, 1], seed=1)],
             "fixed:4": [_summary(2.0, 0.4, True, [4, 4]), _summary(2.0, 0.4, True, [4, 4], seed=1)],
             "fixed:1": [_summary(1.1, 0.1, True, [1, 1, 1]), _summary(1.0, 0.1, True, [1, 1], seed=1)]}
    assert same_schedule_as(learned, fixed) == "fixed:1"  # `max` has the same rounds but is no Fixed(N) row
    # one round more on one seed, or one seed fewer, is another schedule
    assert same_schedule_as(learned, {"fixed:1": [fixed["fixed:1"][0], _summary(1.0, 0.1, True, [1, 1, 1], seed=1)]}) is None
    assert same_schedule_as(learned, {"fixed:1": fixed["fixed:1"][:1]}) is None
    assert same_schedule_as([_summary(1.0, 0.1, True, [1, 2, 1])], {"fixed:1": [_summary(1.0, 0.1, True, [1, 1, 1])]}) is None
    assert same_schedule_as([], {"fixed:1": []}) is None


def test_seeds_note_says_whether_a_comparisons_seeds_are_held_out():
    from models.report.experiment_stats import DEFAULT_HELD_OUT_SEEDS, HELD_OUT_SEEDS_FROM, seeds_note

    assert min(DEFAULT_HELD_OUT_SEEDS) >= HELD_OUT_SEEDS_FROM == 100
    assert seeds_note([100, 104]).startswith("Seeds [100, 104]: held out")
    assert "NOT held out: [0, 99]" in seeds_note([0, 99, 100])


def test_a_kept_run_measured_before_the_cloud_clock_is_not_kept():
    import dataclasses

    from models.report.experiment_resume import FinishedRun, decode_finished, encode_finished

    measured = FinishedRun("max", 100, "max", summary=_summary(2.0, 0.1, True, [4]))
    before = FinishedRun("max", 100, "max", summary=dataclasses.replace(measured.summary, cloud_time_s=math.nan))
    assert measured.has_cloud_clock and not before.has_cloud_clock
    assert decode_finished(encode_finished(measured), "test").has_cloud_clock  # survives the round trip

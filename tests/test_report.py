"""The rendering of a run's progress, round table, summary and plots (models/report/run_report.py)."""

from __future__ import annotations

import math

import pytest

from models.report.run_report import (
    ROUND_COLUMNS,
    MlflowLinks,
    Progress,
    artifact_key,
    failure_markdown,
    plot_rounds,
    round_rows,
    run_progress,
    summary_markdown,
    table_due,
)
from models.run.records import RoundRecord, RunSummary
from models.scheduling.training import SchedulerEpisodeRecord


def record(k: int, actors: int, ret: float, cost: float) -> RoundRecord:
    return RoundRecord(round_index=k, actors=actors, mean_return=ret, env_steps=512 * actors,
                       round_s=1.5 + k, wall_s=2.25 + k, learner_s=0.5, actor_mean_s=1.0,
                       cost_usd=cost, loss=0.1, policy_kl=0.01)


HISTORY = (record(0, 8, math.nan, 0.001), record(1, 8, 120.456, 0.002), record(2, 4, 480.0, 0.0015))


def summary(**changes) -> RunSummary:
    values = dict(run_id="0123456789abcdef", env_id="CartPole-v1", scheduler="fixed8", seed=3,
                  stop_reason="target_reached", rounds=3, final_return=480.0, best_return=480.0,
                  env_steps=10240, cost_usd=0.0045, server_cluster_cost_usd=0.9,
                  time_to_stop_s=7.5, wall_time_s=9.75, history=HISTORY,
                  server_cluster_cost_no_startup_usd=0.01, actors_cost_usd=0.003,
                  learner_cost_usd=0.001, startup_cost_usd=0.0005, learner_device="cpu",
                  stop_detail="target: round 2 returned 480 >= J=475")
    values.update(changes)
    return RunSummary(**values)


def test_artifact_keys_are_valid_prefect_keys_unique_per_run():
    assert artifact_key("progress", "0123456789ABCDEF") == "minionsrl-progress-01234567"
    assert artifact_key("Round table", "ab_cd-ef12345") == "minionsrl-round-table-abcdef12"
    assert artifact_key("summary", None) == "minionsrl-summary-norun"
    assert artifact_key("summary", "aaaaaaaa1") != artifact_key("summary", "bbbbbbbb1")


def test_progress_counts_rounds_of_k_and_says_when_j_is_reached():
    running = run_progress(3, 60, 475.0, 120.456, spent_usd=0.0125, budget_usd=0.05)
    assert running.percent == pytest.approx(5.0)
    assert running.description == "3 of K=60 rounds done (return 120.5, J=475); $0.0125 of B=$0.05 spent"
    reached = run_progress(13, 60, 475.0, 480.0, stop_reason="target_reached")
    assert reached.percent == 100.0
    assert reached.description.startswith("J=475 reached at round 12 (return 480.0)")
    budget = run_progress(5, 60, 475.0, math.nan, stop_reason="budget_spent")
    assert budget.percent == 100.0
    assert "budget" in budget.description and "no episode ended" in budget.description
    assert run_progress(60, 60, 475.0, 1.0, stop_reason="max_rounds").description.startswith("K=60 rounds done")
    # with an env-step budget S nearer than K, the bar follows S, and its stop says so
    assert run_progress(3, 60, 475.0, 1.0, done=0.5).percent == pytest.approx(50.0)
    spent = run_progress(7, 60, 475.0, 1.0, stop_reason="max_env_steps").description
    assert spent.startswith("stopped by max_env_steps after 7 rounds") and "not reached" in spent


def test_round_rows_list_every_round_with_the_budget_left():
    rows = round_rows(HISTORY, budget_usd=0.05)
    assert [tuple(r) for r in rows] == [ROUND_COLUMNS] * 3
    assert rows[0] == {"round": 0, "actors": 8, "return": None, "P_k (s)": 1.5, "wall (s)": 2.25,
                       "cost ($)": 0.001, "budget left ($)": 0.049}
    assert rows[1]["return"] == 120.46
    assert rows[2]["budget left ($)"] == pytest.approx(0.05 - 0.0045)


def test_the_table_is_due_every_few_rounds_and_at_the_end():
    assert [k for k in range(1, 13) if table_due(k, stopped=False, every=5)] == [5, 10]
    assert table_due(7, stopped=True)
    assert not table_due(0, stopped=True)


def test_summary_says_why_it_stopped_what_it_cost_and_where_to_look():
    links = MlflowLinks("sqlite:////tmp/m/mlflow.db", "4", "0123456789abcdef", model_uri="models:/m-1",
                        registered="cartpole-policy version 2")
    text = summary_markdown(summary(), links, target_return=475.0, budget_usd=0.05)
    assert "**Stopped: target_reached** (target: round 2 returned 480 >= J=475)" in text
    assert "| rounds | 3 |" in text and "| final return | 480.0 |" in text
    assert "| cost | $0.004500 of B = $0.05 |" in text
    for part in ("| ↳ actors | $0.003000 |", "| ↳ learner (cpu) | $0.001000 |",
                 "| ↳ start-up | $0.000500 |"):
        assert part in text
    assert "mlflow ui --backend-store-uri sqlite:////tmp/m/mlflow.db" in text
    # opened in MLflow's model-training UI, not its GenAI one
    assert "http://127.0.0.1:5000/#/experiments/4/runs/0123456789abcdef?workflowType=machine_learning" in text
    assert "mlflow.pyfunc.load_model('models:/m-1')" in text and "cartpole-policy version 2" in text
    nan_run = summary_markdown(summary(final_return=math.nan, stop_reason="budget_spent"),
                               MlflowLinks("http://mlflow:5000", "1", "r"), 475.0, 0.05)
    assert "| final return | n/a |" in nan_run and "http://mlflow:5000/#/experiments/1/runs/r" in nan_run
    assert "mlflow ui" not in nan_run and "load_model" not in nan_run


def test_failure_summary_names_the_error():
    text = failure_markdown("CartPole-v1", 2, "NonFiniteError: loss is nan", MlflowLinks("http://h", "1", "r"))
    assert "failed after 2 rounds" in text and "NonFiniteError: loss is nan" in text


def test_plots_are_pngs_of_return_actors_and_cost(tmp_path):
    paths = plot_rounds(HISTORY, tmp_path / "plots", title="CartPole-v1", target_return=475.0)
    assert [p.name for p in paths] == ["return.png", "actors.png", "cost.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000
    assert plot_rounds((), tmp_path / "none") == []


def test_scheduler_training_progress_and_summary():
    from models.report.run_report import episodes_progress, scheduler_summary_markdown

    p = episodes_progress(3, 12, -1.25)
    assert p.percent == 25.0 and p.description == "3 of 12 scheduler episodes done, last reward -1.25"
    assert episodes_progress(0, 12).description == "0 of 12 scheduler episodes done"
    episode = SchedulerEpisodeRecord(episode=0, run_id="r0", actors=[6, 7] * 4, reward=-1.5, time_to_stop_s=3.25,
                                     cost_usd=0.0012, server_cluster_cost_usd=0.01,
                                     server_cluster_cost_no_startup_usd=0.005, rounds=8, target_reached=True,
                                     best_return=480.0, wall_time_s=4.0)
    text = scheduler_summary_markdown("CartPole-v1", [episode], 1, "runs:/r/scheduler/scheduler.pt",
                                      MlflowLinks("sqlite:////s/mlflow.db", "2", "r"))
    assert "| 0 | -1.5 | 8 | yes | 3.25 | 0.001200 | 6.5 |" in text
    assert "--scheduler learned:runs:/r/scheduler/scheduler.pt" in text


def impact_cfg(**changes):
    from models.impact.config import ImpactRunConfig

    return ImpactRunConfig(**{"env_id": "CartPole-v1", "target_return": 475.0, "max_env_steps": 100_000,
                              "max_wall_s": 600.0, **changes})


def chunk(i: int, env_steps: int, wall_s: float, ret: float = 21.5):
    from models.impact.progress import ImpactChunkRecord

    return ImpactChunkRecord(chunk=i, learner_steps=50 * (i + 1), env_steps=env_steps, mean_return=ret,
                             policy_lag_mean=1.25, wall_s=wall_s, cloud_s=wall_s, server_cluster_usd=0.001 * (i + 1))


def test_impact_progress_follows_the_nearest_stop_rule():
    from models.report.run_report import impact_progress

    assert impact_progress(None, impact_cfg()).percent == 0.0
    steps_nearest = impact_progress(chunk(3, 25_000, 60.0), impact_cfg())  # 25 % of steps, 10 % of wall
    assert steps_nearest.percent == pytest.approx(25.0)
    assert steps_nearest.description == ("chunk 3: 200 learner steps, return 21.5 vs J=475, "
                                          "25000 of 100000 env steps, 60.0 of 600 s wall")
    assert impact_progress(chunk(3, 1000, 300.0), impact_cfg()).percent == pytest.approx(50.0)  # wall
    assert impact_progress(chunk(0, 10, 1.0), impact_cfg(max_chunks=4)).percent == pytest.approx(25.0)
    stopped = impact_progress(chunk(1, 900, 3.0, math.nan), impact_cfg(), stop_reason="max_chunks")
    assert stopped.percent == 100.0
    assert stopped.description.startswith("stopped (max_chunks) after 2 chunks: 100 learner steps, no episode ended")


def test_impact_chunk_rows_and_summary():
    from models.impact.progress import ImpactSummary
    from models.report.run_report import IMPACT_CHUNK_COLUMNS, impact_chunk_rows, impact_summary_markdown

    rows = impact_chunk_rows([chunk(0, 512, 1.5, math.nan), chunk(1, 1024, 3.25)])
    assert [tuple(r) for r in rows] == [IMPACT_CHUNK_COLUMNS] * 2
    assert rows[0] == {"chunk": 0, "learner steps": 50, "env steps": 512, "return": None, "policy lag": 1.25,
                       "cloud (s)": 1.5, "wall (s)": 1.5, "server cluster ($)": 0.001}
    s = ImpactSummary(run_id="0123456789abcdef", env_id="CartPole-v1", seed=2, stop_reason="target_reached",
                      env_steps=80_000, learner_steps=400, chunks=8, final_return=480.0, wall_s=95.5,
                      cloud_s=12.25, clock="virtual", server_cluster_at_wall_usd=0.4,
                      server_cluster_cost_usd=0.25, server_cluster_cost_no_startup_usd=0.02,
                      serverless_cost_usd=0.004, orchestration_frac=0.012, actor_replacements=0,
                      learner_device="cpu", tracking_uri="sqlite:////tmp/m/mlflow.db")
    text = impact_summary_markdown(s, MlflowLinks("sqlite:////tmp/m/mlflow.db", "4", s.run_id), 475.0)
    assert "**Stopped: target_reached**" in text and "| target J reached | yes (J = 475) |" in text
    for part in ("| chunks | 8 |", "| learner steps | 400 |", "| env steps | 80000 |", "| final return | 480.0 |",
                 "| time, cloud clock (the virtual executor: a core per actor) | 12.25 s |",
                 "| wall time (this machine's clock) | 95.50 s |", "$0.250000 with its start-up, $0.020000 without",
                 "| server cluster for this machine's wall, for reference | $0.400000 |",
                 "| serverless, for reference | $0.004000 |"):
        assert part in text, part
    assert "mlflow ui --backend-store-uri sqlite:////tmp/m/mlflow.db" in text
    assert "http://127.0.0.1:5000/#/experiments/4/runs/0123456789abcdef" in text
    failed = failure_markdown("CartPole-v1", 3, "ActorError: boom", MlflowLinks("http://h", "1", "r"), unit="chunks")
    assert "failed after 3 chunks" in failed


def test_experiment_progress_and_run_table():
    from models.report.run_report import (
        EXPERIMENT_RUN_COLUMNS,
        ExperimentRun,
        experiment_progress,
        experiment_run_result,
        experiment_run_rows,
    )

    runs = [ExperimentRun("fixed:2", summary(seed=0, cloud_time_s=8.25)),
            ExperimentRun("learned", summary(seed=1, stop_reason="max_rounds", rounds=60, final_return=math.nan))]
    rows = experiment_run_rows(runs)
    assert [tuple(r) for r in rows] == [EXPERIMENT_RUN_COLUMNS] * 2
    assert rows[0] == {"run": 0, "scheduler": "fixed:2", "seed": 0, "target reached": "yes", "rounds": 3,
                       "wall (s)": 9.75, "cloud clock (s)": 8.25, "sum of P_k (s)": 7.5, "cost ($)": 0.0045}
    assert rows[1]["target reached"] == "no" and rows[1]["cloud clock (s)"] is None  # a run without one
    assert experiment_run_result(runs[0]) == ("fixed:2 seed 0: J reached in 3 rounds (return 480.0, "
                                              "wall 9.75 s, cloud 8.25 s, $0.004500)")
    assert experiment_run_result(runs[1]).startswith("learned seed 1: max_rounds after 60 rounds (return n/a")
    assert experiment_progress(0, 6) == Progress(0.0, "0 of 6 runs done")
    halfway = experiment_progress(3, 6, "x")
    assert halfway.percent == 50.0 and halfway.description == "3 of 6 runs done; last: x"
    assert experiment_progress(6, 6, finished=True).percent == 100.0
    assert experiment_progress(7, 6, finished=True).description == "7 runs done (6 planned)"

"""The experiment flows: the transfer experiment end to end at toy size, and the command line.

The smoke test runs five tiny Acrobot-v1 trainings (i_max 4, two rounds of 128-step fragments,
one worker): one fine-tuning and one from-scratch scheduler episode, and one greedy evaluation
each of the fine-tuned, scratch and zero-shot schedulers.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from mlflow.tracking import MlflowClient

from flows.experiments.results import ExperimentResult
from models.errors import ConfigError
from models.run.workload import Placement, Workload
from tests.experiment_faults import dies_at_run

pytestmark = pytest.mark.e2e

TINY = Workload(i_max=4, max_rounds=2, fragment=128)
ONE_WORKER = Placement(local_workers=1)


def test_transfer_end_to_end_on_a_workload_the_source_never_saw(prefect_api_url, mlflow_uri, tmp_path,
                                                                  monkeypatch):
    from flows.experiments import scheduler_transfer
    from flows.scheduler_flows import ARTIFACT_DIR, ARTIFACT_NAME
    from flows.tracking import RunTracker
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import load_scheduler, save_scheduler
    from models.scheduling.provenance import SchedulerProvenance
    from tests.scheduler_fixtures import trained_session

    # The source: a CartPole-style scheduler for i_max 4, logged in the experiment's own MLflow
    # store and named by URI while MLFLOW_TRACKING_URI points at another store.
    made = save_scheduler(tmp_path / "made" / ARTIFACT_NAME, SchedulerAgent(4, seed=7),
                          meta=SchedulerProvenance([trained_session("CartPole-v1")]))
    tracker = RunTracker(mlflow_uri)
    tracker.start("sources", "cartpole-source", params={})
    tracker.log_artifact(made, ARTIFACT_DIR)
    tracker.finish()
    source = f"runs:/{tracker.run_id}/{ARTIFACT_DIR}/{ARTIFACT_NAME}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")

    result = scheduler_transfer(workload=TINY.with_values(env="Acrobot-v1"), placement=ONE_WORKER, source=source,
                                finetune_episodes=1, batch_episodes=1, eval_seeds=[1000], tracking_uri=mlflow_uri,
                                checkpoint_dir=str(tmp_path / "ckpt"))

    rows = {r["scheduler"]: r for r in result.rows}
    assert set(rows) == {"finetuned", "scratch", "zero-shot"}
    assert all(r["runs"] == 1 for r in rows.values())
    assert rows["finetuned"]["scheduler_episodes"] == rows["scratch"]["scheduler_episodes"] == 1  # same budget
    for label in ("finetune", "scratch"):
        assert getattr(result, label).episodes_done == 1 and getattr(result, label).updates == 1
    _, _, meta = load_scheduler(result.finetune.checkpoint)
    assert meta.fine_tuned_from == source
    assert [(e.env, e.mode, e.episodes) for e in meta.trained_on] == [("CartPole-v1", "scratch", 0),
                                                                     ("Acrobot-v1", "finetune", 1)]
    _, _, scratch_meta = load_scheduler(result.scratch.checkpoint)
    assert scratch_meta.fine_tuned_from is None and [e.mode for e in scratch_meta.trained_on] == ["scratch"]

    client = MlflowClient(mlflow_uri)
    parent = client.get_run(result.run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["minionsrl.experiment"] == "scheduler_transfer"
    assert [a.path for a in client.list_artifacts(result.run_id, "plots")] == ["plots/scheduler_transfer.png"]
    evals = client.search_runs([parent.info.experiment_id],
                               filter_string=f"tags.mlflow.parentRunId = '{result.run_id}'")
    assert len(evals) == 3 and all(r.data.tags["minionsrl.scheduler"] == "learned" for r in evals)
    assert {r.data.params["seed"] for r in evals} == {"1000"}  # held out: training used seeds 0..
    # One J for training and evaluation: gymnasium's reward_threshold for Acrobot-v1.
    assert {r.data.params["target_return"] for r in evals} == {"-100.0"}
    for label in ("finetune", "scratch"):
        for e in getattr(result, label).episodes:
            assert client.get_run(e.run_id).data.params["target_return"] == "-100.0"

    # its progress counts the scheduler-training episodes (one run each) and the three evaluations
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

    from models.report.run_report import artifact_key

    key = artifact_key("experiment-progress", result.run_id)
    with get_client(sync_client=True) as prefect:
        progress, = prefect.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(key=ArtifactCollectionFilterKey(any_=[key])))
    assert float(progress.data) == 100.0
    assert progress.description.startswith("5 of 5 runs done; last: zero-shot seed 1000")


def test_compare_sweeps_fixed_counts_and_judges_the_learned_scheduler_against_the_best(
        prefect_api_url, mlflow_uri, tmp_path):
    from importlib import resources

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

    from flows.experiments import compare_schedulers
    from models.report.run_report import artifact_key
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import save_scheduler

    learned = save_scheduler(tmp_path / "s.pt", SchedulerAgent(2, seed=3))
    prices = tmp_path / "prices.toml"  # a 2-core server cluster
    prices.write_text(resources.files("models.data").joinpath("prices.toml").read_text()
                      .replace("actor_cores = 32", "actor_cores = 2"))
    # J=15: a fresh CartPole policy's episodes average about 20, so every run stops at round 0
    result = compare_schedulers(seeds=[0], learned=str(learned), baselines=["impact"], sweep=[1, 2],
                                workload=TINY.with_values(i_max=2, target_return=15.0, prices_file=str(prices)),
                                placement=ONE_WORKER, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
    rows = {r["scheduler"]: r for r in result.rows}
    # the server cluster's rows are its own runs (not another scheduler's re-priced)
    cluster = result.runs["server cluster"]
    assert [s.system for s in cluster] == ["server-cluster"]
    assert rows["server cluster"]["cost_usd_mean"] == pytest.approx(cluster[0].server_cluster_cost_usd)
    assert rows["server cluster without start-up"]["cost_usd_mean"] == pytest.approx(
        cluster[0].server_cluster_cost_no_startup_usd)
    assert MlflowClient(mlflow_uri).get_run(cluster[0].run_id).data.tags["minionsrl.system"] == "server-cluster"
    # IMPACT is a row of its own: its nested run, as the paper provisions it (the cluster's actor
    # cores as always-on actors, on the cloud clock), billed as the cluster for its cloud time
    (impact,) = result.impact_runs
    assert impact.target_reached and rows["impact"]["reached"] == 1 and impact.clock == "virtual"
    impact_params = MlflowClient(mlflow_uri).get_run(impact.run_id).data.params
    assert (impact_params["backend"], impact_params["impact.actors"]) == ("virtual", "2")  # the 2-core cluster
    assert impact_params["max_env_steps"] == "1000000"  # the CartPole preset's budget per actor: 2 actors there too
    assert rows["impact"]["time_s_mean"] == pytest.approx(impact.cloud_s)
    assert rows["impact"]["wall_s_mean"] == pytest.approx(impact.wall_s)
    assert rows["impact"]["cost_usd_mean"] == pytest.approx(impact.server_cluster_cost_usd)
    assert rows["impact without start-up"]["cost_usd_mean"] == pytest.approx(impact.server_cluster_cost_no_startup_usd)
    impact_run = MlflowClient(mlflow_uri).get_run(impact.run_id).data.tags
    assert impact_run["mlflow.parentRunId"] == result.run_id and impact_run["minionsrl.system"] == "impact"
    assert rows["learned"]["wall_s_mean"] > 0
    # the fork server was readied before the first run and billed to none (logged on the parent)
    parent_metrics = MlflowClient(mlflow_uri).get_run(result.run_id).data.metrics
    assert parent_metrics["experiment/worker_server_ready_s"] >= 0
    sweep = [rows["fixed:1"], rows["fixed:2"]]
    assert all(r["reached"] == 1 for r in sweep)
    cheapest = min(sweep, key=lambda r: (r["cost_usd_mean"], r["time_s_mean"]))
    best = rows[f"best fixed ({cheapest['scheduler']})"]
    assert best["cost_usd_mean"] == cheapest["cost_usd_mean"]
    m = result.metrics
    assert m["learned_vs_best_fixed/cost_ratio"] == pytest.approx(
        rows["learned"]["cost_usd_mean"] / cheapest["cost_usd_mean"])
    assert f"time <= best fixed ({cheapest['scheduler']})" in result.checks
    # every run stops at round 0, so the learned scheduler's one round is Fixed(its count)'s: said so
    (only_round,) = result.runs["learned"][0].history
    assert result.same_schedule_as == {"learned": f"fixed:{only_round.actors}"}

    # while it ran: the experiment's progress (5 runs planned: learned, fixed:1, fixed:2, the cluster,
    # IMPACT) and run table (its `train` runs)
    keys = [artifact_key(kind, result.run_id) for kind in ("experiment-progress", "experiment-runs")]
    with get_client(sync_client=True) as prefect:
        latest = {a.key: a for a in prefect.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(key=ArtifactCollectionFilterKey(any_=keys)))}
        progress, table = latest[keys[0]], latest[keys[1]]
        flow_run = prefect.read_flow_run(progress.flow_run_id)
        owner = prefect.read_flow(flow_run.flow_id)
    assert owner.name == "compare-schedulers" and table.flow_run_id == progress.flow_run_id
    assert flow_run.name == "compare-CartPole-v1"  # named for what ran
    assert float(progress.data) == 100.0
    assert progress.description.startswith("5 of 5 runs done; last: impact seed 0: J reached")
    runs = json.loads(table.data)  # versions after 2 runs and at the end
    assert [(r["scheduler"], r["seed"], r["target reached"]) for r in runs] == [
        ("learned", 0, "yes"), ("fixed:1", 0, "yes"), ("fixed:2", 0, "yes"), ("server cluster", 0, "yes")]
    assert [r["cost ($)"] for r in runs[1:3]] == pytest.approx(
        [rows["fixed:1"]["cost_usd_mean"], rows["fixed:2"]["cost_usd_mean"]], abs=1e-7)  # rounded to 7 places


def test_experiments_refuse_unknown_workload_before_any_run(prefect_api_url, mlflow_uri):
    from prefect.exceptions import ParameterTypeError

    from flows.experiments import compare_schedulers, scheduler_transfer

    with pytest.raises(ParameterTypeError, match="fragmnt"):  # a deployment's JSON with a typo
        compare_schedulers(seeds=[0], workload={"env": "CartPole-v1", "fragmnt": 128}, tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="vector observations"):  # IMPACT's MLP: before any run
        compare_schedulers(workload=Workload(env="QbertNoFrameskip-v4"), seeds=[0], baselines=["impact"],
                           tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="fragment"):  # the workload is checked before any episode
        scheduler_transfer(workload=Workload(env="Acrobot-v1", fragment=0), tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="dask_adress"):  # where its actors run too
        scheduler_transfer(placement=Placement(backend="dask", backend_options={"dask_adress": "tcp://x:8786"}),
                           tracking_uri=mlflow_uri)
    client = MlflowClient(mlflow_uri)
    experiments = client.search_experiments()
    assert not experiments or client.search_runs([e.experiment_id for e in experiments]) == []


def test_a_resumed_compare_keeps_its_finished_runs_and_runs_only_the_rest(prefect_api_url, mlflow_uri, tmp_path,
                                                                           monkeypatch):
    """The experiment's process dies at its third run (a run of a second learned scheduler is
    in flight in MLflow); resumed with its parent run's id, it runs only what was left."""
    from importlib import resources

    from flows.experiments import common, compare_schedulers
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import save_scheduler

    learned = save_scheduler(tmp_path / "s.pt", SchedulerAgent(2, seed=3))
    prices = tmp_path / "prices.toml"  # a 2-core server cluster
    prices.write_text(resources.files("models.data").joinpath("prices.toml").read_text()
                      .replace("actor_cores = 32", "actor_cores = 2"))
    args = dict(seeds=[0], learned=str(learned), more_learned={"again": str(learned)}, baselines=[], sweep=[1],
                workload=TINY.with_values(i_max=2, target_return=15.0, prices_file=str(prices)),
                placement=ONE_WORKER, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
    real_train, ran = common.train, []
    client = MlflowClient(mlflow_uri)

    # the process "dies" in the third run, a nested run of this one still RUNNING
    monkeypatch.setattr(common, "train", dies_at_run(2, real_train, ran, client))
    with pytest.raises(RuntimeError, match="the process died"):
        compare_schedulers(**args)
    assert ran == [f"learned:{learned}", f"learned:{learned}"]  # learned, then "again"
    (parent,) = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
                 if r.data.tags.get("minionsrl.experiment") == "compare_schedulers"]
    parent_id = parent.info.run_id
    assert parent.info.status == "FAILED"
    first = {r.info.run_id for r in client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and "
                                                   "attributes.status = 'FINISHED'")}

    # other parameters, or another experiment's run: refused before any run
    with pytest.raises(ConfigError, match="sweep"):
        compare_schedulers(**{**args, "sweep": [2]}, resume_run_id=parent_id)
    with pytest.raises(ConfigError, match="not a motivation experiment"):
        from flows.experiments import motivation
        motivation(seeds=[0], resume_run_id=parent_id, tracking_uri=mlflow_uri)
    assert len(ran) == 2

    ran.clear()
    monkeypatch.setattr(common, "train", lambda **kw: ran.append(kw["scheduler"]) or real_train(**kw))
    result = compare_schedulers(**args, resume_run_id=parent_id)
    assert result.run_id == parent_id and ran == ["fixed:1", "fixed:2"]  # the sweep's, then the cluster
    kept = result.runs
    assert {kept["learned"][0].run_id, kept["again"][0].run_id} == first  # the same runs, not rerun
    assert {r["scheduler"] for r in result.rows} >= {"learned", "again", "fixed:1", "server cluster"}
    assert "again: cost <= 0.56 x Max" not in result.checks  # no Max row in this compare
    assert any(k.startswith("again: ") for k in result.checks)  # judged against the best fixed count
    assert client.get_run(parent_id).info.status == "FINISHED"
    stale = client.search_runs([parent.info.experiment_id],
                               filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and attributes.status = 'FAILED'")
    assert [r.data.tags["minionsrl.failure"].startswith("the experiment's process stopped during") for r in stale] == [True]


@pytest.mark.parametrize(("argv", "expected"), [
    (["transfer"], {}),
    (["transfer", "--env", "Acrobot-v1", "--finetune-episodes", "1", "--scratch-episodes", "2",
      "--batch-episodes", "1", "--eval-seeds", "1000", "1001", "--target-return", "-100", "--i-max", "4",
      "--max-rounds", "2", "--fragment", "128", "--local-workers", "1", "--tracking-uri", "sqlite:///x.db",
      "--eval-every", "5", "--stop-at-eval"],
     {"finetune_episodes": 1, "scratch_episodes": 2, "eval_seeds": [1000, 1001], "batch_episodes": 1,
      "tracking_uri": "sqlite:///x.db", "placement": Placement(local_workers=1),
      "workload": Workload(env="Acrobot-v1", target_return=-100.0, i_max=4, max_rounds=2, fragment=128,
                           eval_every=5, stop_at_eval=True)}),
])
def test_transfer_command_line(monkeypatch, capsys, argv, expected):
    """Options left out are not passed (the flow's defaults apply); a Workload's and a Placement's
    fields come together as one of each."""
    from flows.experiments import cli

    seen = {}

    def fake_transfer(**kwargs):
        seen.update(kwargs)
        return ExperimentResult("x", "runs:/x/plots/p.png", [{"scheduler": "finetuned"}])

    monkeypatch.setitem(cli.FLOWS, "transfer", _FakeFlow(fake_transfer, cli.FLOWS["transfer"]))
    monkeypatch.setattr(cli, "prefect_api", contextlib.nullcontext)
    assert cli.main(argv) == 0
    assert seen == expected
    assert "runs:/x/plots/p.png" in capsys.readouterr().out


class _FakeFlow:
    """Stands in for a flow in the command line: called instead, with the real flow's signature."""

    def __init__(self, call, real):
        self.call, self.fn = call, real.fn

    def __call__(self, **kwargs):
        return self.call(**kwargs)


def test_learned_spec_names_the_packaged_scheduler():
    from flows.experiments import LEARNED, learned_spec
    from models.scheduling.learned import LearnedScheduler, resolve_checkpoint, shipped_checkpoint
    from models.scheduling.schedulers import make_scheduler

    assert resolve_checkpoint(LEARNED) == shipped_checkpoint()  # finetune's source
    assert isinstance(make_scheduler(learned_spec(LEARNED), 32, 60, -100.0), LearnedScheduler)


@pytest.mark.parametrize(("argv", "command", "expected"), [
    (["compare", "--seeds", "100", "101", "--i-max", "8"], "compare",
     {"seeds": [100, 101], "workload": Workload(i_max=8)}),
    (["compare", "--baselines", "max", "impact", "--sweep", "--more-learned", "scratch=s.pt", "zero-shot=cartpole-v2",
      "--resume-run-id", "abc"], "compare",
     {"more_learned": {"scratch": "s.pt", "zero-shot": "cartpole-v2"}, "baselines": ["max", "impact"], "sweep": [],
      "resume_run_id": "abc"}),
    (["motivation", "--env", "Acrobot-v1", "--experiment", "m", "--eval-every", "1000"], "motivation",
     {"experiment": "m", "workload": Workload(env="Acrobot-v1", eval_every=1000)}),
    (["actors-curve", "--learned", "x.pt", "--ppo", '{"learning_rate": 0.001}', "--resume-run-id", "r1"],
     "actors-curve", {"learned": "x.pt", "workload": Workload(ppo={"learning_rate": 0.001}), "resume_run_id": "r1"}),
    (["table2", "--workloads", "CartPole-v1", "Hopper-v5-locomotion", "--systems", "max", "impact", "--seeds", "100",
      "--workload-seeds", '{"Hopper-v5-locomotion": [101, 102]}', "--only", "system=max", "seed=101,system=impact",
      "--learned", "Hopper-v5=hopper-scratch", "--table", "t", "--local-workers", "1"], "table2",
     {"workloads": ["CartPole-v1", "Hopper-v5-locomotion"], "systems": ["max", "impact"], "seeds": [100],
      "workload_seeds": {"Hopper-v5-locomotion": [101, 102]}, "only": ["system=max", "seed=101,system=impact"],
      "learned": {"Hopper-v5": "hopper-scratch"}, "table": "t", "placement": Placement(local_workers=1)}),
])
def test_each_command_runs_its_flow(monkeypatch, capsys, argv, command, expected):
    from flows.experiments import cli

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return ExperimentResult("y", "runs:/y/plots/p.png", [{"scheduler": "learned", "time_s_mean": 1.5}])

    monkeypatch.setitem(cli.FLOWS, command, _FakeFlow(fake, cli.FLOWS[command]))
    monkeypatch.setattr(cli, "prefect_api", contextlib.nullcontext)
    assert cli.main(argv) == 0
    assert seen == expected
    assert "| learned | 1.5 |" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "says"), [
    (["transfer", "--resume-run-id", "abc"], "unrecognized arguments: --resume-run-id"),
    (["motivation", "--more-learned", "a=b.pt"], "unrecognized arguments: --more-learned"),
    (["compare", "--more-learned", "no-checkpoint"], "expected KEY=VALUE"),
])
def test_command_line_refuses_options_its_experiment_cannot_take(capsys, argv, says):
    from flows.experiments import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("command", "shows"), [(None, "compare,motivation,actors-curve,transfer,table2,scalability"),
                                                ("compare", "--target-return"), ("motivation", "--target-return"),
                                                ("actors-curve", "--target-return"), ("transfer", "--target-return"),
                                                ("table2", "--workload-settings")])
def test_help(capsys, command, shows):
    from flows.experiments import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(([command] if command else []) + ["--help"])
    assert stop.value.code == 0
    assert shows in capsys.readouterr().out


@pytest.mark.parametrize(("entrypoint", "name"), [
    ("flows/experiments/compare.py:compare_schedulers", "compare-schedulers"),
    ("flows/experiments/motivation.py:motivation", "motivation"),
    ("flows/experiments/actors_curve.py:actors_curve", "actors-curve"),
    ("flows/experiments/transfer.py:scheduler_transfer", "scheduler-transfer"),
    ("flows/experiments/table2.py:table2", "table2"),
    ("flows/experiments/scalability.py:scalability", "scalability"),
])
def test_each_flow_loads_from_its_own_file(monkeypatch, entrypoint, name):
    """What a Prefect deployment's entrypoint names (run from the repository root)."""
    from pathlib import Path

    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert load_flow_from_entrypoint(entrypoint).name == name


def test_an_experiment_reads_unset_settings_from_the_env_preset(mlflow_uri):
    from flows.experiments.common import Experiment
    from models.run.presets import resolve_parameters

    preset = resolve_parameters({"env": "CartPole-v1", "tracking_uri": mlflow_uri, "checkpoint_dir": "c"})
    with Experiment("probe", Workload(fragment=128), None, {}, mlflow_uri, None, None) as exp:
        assert exp.setting("i_max") == preset.i_max == 32  # not given: the preset's
        assert exp.setting("fragment") == 128  # given
        assert exp.setting("max_rounds") == preset.max_rounds


def test_compare_plots_each_learned_schedulers_actors_per_round_on_every_seed():
    import matplotlib.pyplot as plt

    from flows.experiments.compare import learned_schedules
    from tests.test_experiment_stats import _summary

    runs = {"learned": [_summary(1.0, 0.1, True, [8, 4, 2], seed=0), _summary(1.0, 0.1, True, [8, 8], seed=1)],
            "scratch": [_summary(1.0, 0.1, True, [16], seed=0)]}
    fig, ax = plt.subplots()
    learned_schedules(ax, runs, i_max=32)
    lines = ax.get_lines()
    # a step line per run, the last round drawn to its end; one legend entry per scheduler
    assert [list(line.get_ydata()) for line in lines] == [[8, 4, 2, 2], [8, 8, 8], [16, 16]]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["learned", "scratch"]
    assert ax.get_ylim() == (0, 33)
    plt.close(fig)


def test_motivation_and_actors_curve_return_their_tables_and_runs(prefect_api_url, mlflow_uri, tmp_path):
    """The two smaller experiments end to end at toy size: each returns its typed result, whose
    run and plot are in MLflow."""
    from flows.experiments import actors_curve, motivation
    from flows.experiments.results import ActorsCurveResult, MotivationResult
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import save_scheduler

    common = {"seeds": [0], "tracking_uri": mlflow_uri, "checkpoint_dir": str(tmp_path / "ckpt"),
              "placement": ONE_WORKER}
    mot = motivation(n=2, step=1, every=1, workload=Workload(fragment=128, i_max=4, max_rounds=2), **common)
    assert isinstance(mot, MotivationResult)
    assert sorted(mot.runs) == sorted(r["scheduler"] for r in mot.rows) and len(mot.rows) == 3
    assert all(len(summaries) == 1 for summaries in mot.runs.values())

    learned = save_scheduler(tmp_path / "s.pt", SchedulerAgent(2, seed=3))
    curve = actors_curve(learned=str(learned), workload=Workload(fragment=128, max_rounds=3, i_max=2), **common)
    assert isinstance(curve, ActorsCurveResult)
    assert len(curve.rows) == 1 and len(curve.phases) == 3 and all(1 <= p <= 2 for p in curve.phases)
    client = MlflowClient(mlflow_uri)
    for result, name in ((mot, "motivation"), (curve, "actors_curve")):
        assert result.plot == f"runs:/{result.run_id}/plots/{name}.png"
        assert [a.path for a in client.list_artifacts(result.run_id, "plots")] == [f"plots/{name}.png"]

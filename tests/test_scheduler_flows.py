"""End to end: train-scheduler on a real Prefect API and MLflow store, then `train` with its result.

Two tiny workload runs in all (CartPole-v1, i_max 4, two rounds of 128-step fragments, one worker).
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from models.run.workload import Placement, Workload
from models.scheduling.training import SchedulerTrainingResult

pytestmark = pytest.mark.e2e

TINY_WORK = Workload(env="CartPole-v1", i_max=4, max_rounds=2, fragment=128)
TINY = {"workload": TINY_WORK, "placement": Placement(local_workers=1)}


def test_train_scheduler_resume_and_train_with_it(prefect_api_url, mlflow_uri, tmp_path, monkeypatch):
    from flows.scheduler_flows import train_scheduler
    from models.scheduling.learned import load_scheduler

    ckpt_dir = str(tmp_path / "ckpt")
    first = train_scheduler(episodes=1, batch_episodes=1, tracking_uri=mlflow_uri,
                            checkpoint_dir=ckpt_dir, **TINY)
    assert first.episodes_done == 1 and first.updates == 1
    client = MlflowClient(mlflow_uri)
    run_id = first.run_id
    assert [a.path for a in client.list_artifacts(run_id, "scheduler")] == ["scheduler/scheduler.pt"]

    # Resume (as after a crash): the same parent run continues from its last checkpoint artifact.
    out = tmp_path / "sched.pt"
    result = train_scheduler(episodes=2, batch_episodes=1, resume_run_id=run_id, output=str(out),
                             tracking_uri=mlflow_uri, checkpoint_dir=ckpt_dir, **TINY)
    assert result.run_id == run_id
    assert [e.episode for e in result.episodes] == [1] and result.updates == 2
    assert all(1 <= a <= 4 for e in first.episodes + result.episodes for a in e.actors)

    # The parent run: per-episode and per-update metrics, the checkpoint as an artifact.
    parent = client.get_run(run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["minionsrl.kind"] == "scheduler-training"
    for key in ("episode/reward", "episode/cost_usd", "episode/time_to_stop_s", "episode/rounds",
                "episode/target_reached", "train/loss"):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == [0, 1], key
    # The workload runs are nested under it, in the same experiment.
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
    assert {c.info.run_id for c in children} == {e.run_id for e in first.episodes + result.episodes}
    assert all(c.info.run_name.startswith("CartPole-v1__learned__") and c.info.status == "FINISHED"
               for c in children)
    assert len(children) == 2
    for child in children:  # episodes log their policy file, not an MLflow model or plots
        assert {a.path for a in client.list_artifacts(child.info.run_id)} == {"policy"}

    from prefect import get_client

    with get_client(sync_client=True) as prefect:  # flow runs named for what ran
        names = {r.name for r in prefect.read_flow_runs()}
    assert {"train-scheduler-CartPole-v1-1ep-seed0", "train-scheduler-CartPole-v1-2ep-seed0",
            "CartPole-v1-learned-scheduler-sample-seed0"} <= names  # an episode: not its checkpoint's path

    _, _, meta = load_scheduler(out)
    assert (meta.episodes_done, meta.updates) == (2, 2)
    assert meta.trained_on[0].env == "CartPole-v1" and meta.trained_on[0].episodes == 2
    # what the training itself was billed: both attempts' episodes, kept through the resume
    billed = sum(e.cost_usd for e in first.episodes + result.episodes)
    assert billed > 0 and result.billed_usd == pytest.approx(billed) and meta.trained_on[0].billed_usd == pytest.approx(billed)
    assert [m.value for m in sorted(client.get_metric_history(run_id, "training/billed_usd"), key=lambda m: m.step)] \
        == pytest.approx([first.billed_usd, billed])

    # Every episode was a `train` run with scheduler='learned:<path>:sample': its trace is the
    # actor counts the run used.
    for e in first.episodes + result.episodes:
        child = client.get_run(e.run_id)
        assert child.data.tags["minionsrl.scheduler"] == "learned"
        logged = [m.value for m in sorted(client.get_metric_history(e.run_id, "sched/actors"),
                                          key=lambda m: m.step)]
        assert logged == e.actors

    # `train(scheduler='learned:runs:/...')` loads it from train's tracking_uri, whatever
    # MLFLOW_TRACKING_URI says (here: another store, which does not have the run).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{elsewhere / 'mlflow.db'}")
    from flows.train import train

    summary = train(scheduler=f"learned:{result.artifact_uri}", tracking_uri=mlflow_uri,
                    checkpoint_dir=ckpt_dir, **TINY_WORK.with_values(max_rounds=1).for_ppo(), local_workers=1)
    assert summary.tracking_uri == mlflow_uri and summary.rounds == 1
    assert summary.scheduler_trace.mode == "greedy"
    tags = client.get_run(summary.run_id).data.tags
    assert tags["minionsrl.scheduler"] == "learned"
    assert tags["minionsrl.scheduler_source"] == f"learned:{result.artifact_uri}"
    assert not (elsewhere / "artifacts").exists()


def _logged_scheduler(mlflow_uri, tmp_path):
    """A scheduler checkpoint logged the way train-scheduler logs it, in a non-default store."""
    from flows.scheduler_flows import ARTIFACT_DIR, ARTIFACT_NAME
    from flows.tracking import RunTracker
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import save_scheduler

    agent = SchedulerAgent(4, seed=3)
    path = save_scheduler(tmp_path / "made" / ARTIFACT_NAME, agent)
    tracker = RunTracker(mlflow_uri)
    run_id = tracker.start("schedulers", "logged", params={})
    tracker.log_artifact(path, ARTIFACT_DIR)
    tracker.finish()
    return agent, f"runs:/{run_id}/{ARTIFACT_DIR}/{ARTIFACT_NAME}"


@pytest.mark.parametrize("ambient", ["unset", "elsewhere"])
def test_learned_runs_uri_comes_from_trains_tracking_uri(mlflow_uri, tmp_path, monkeypatch, ambient):
    """What train does with scheduler='learned:runs:/...': download from its own tracking_uri
    (never MLFLOW_TRACKING_URI), then build the scheduler from the local copy."""
    from flows.run_setup import localise_scheduler_spec
    from models.run.config import ConfigError
    from models.scheduling.learned import LearnedScheduler
    from models.scheduling.learned_spec import parse_learned_spec
    from models.scheduling.schedulers import RoundState, make_scheduler

    agent, uri = _logged_scheduler(mlflow_uri, tmp_path)
    other = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    if ambient == "unset":
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    dest = tmp_path / "downloads"

    spec = localise_scheduler_spec(f"learned:{uri}:sample", mlflow_uri, dest)
    learned = parse_learned_spec(spec)
    ref = learned.ref
    assert learned.mode == "sample" and Path(ref).is_file() and dest in Path(ref).parents
    sched = make_scheduler(spec, 4, 10, 475.0, budget_usd=0.05, seed=1)
    assert isinstance(sched, LearnedScheduler) and sched.mode == "sample"
    for key, value in agent.policy.state_dict().items():
        assert torch.equal(sched.agent.policy.state_dict()[key], value), key
    assert 1 <= sched.choose(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05)) <= 4
    greedy = localise_scheduler_spec(f"learned:{uri}", mlflow_uri, dest)
    assert parse_learned_spec(greedy).mode == "greedy" and greedy != spec  # a fresh copy each run

    # The store matters: the run is not in another one, and the error names the store asked.
    with pytest.raises(ConfigError, match="elsewhere.db"):
        localise_scheduler_spec(f"learned:{uri}", other, dest)
    # Everything but an MLflow URI passes through untouched.
    for plain in (None, "fixed:8", "learned", "learned:cartpole:sample", f"learned:{ref}"):
        assert localise_scheduler_spec(plain, mlflow_uri, dest) == plain


@pytest.mark.parametrize(("env", "expected"), [("Acrobot-v1", -100.0), ("CartPole-v1", 475.0),
                                               ("Pendulum-v1", None), ("NoSuchEnv-v0", None)])
def test_scheduler_training_falls_back_to_gymnasiums_threshold(env, expected):
    from flows.scheduler_flows import registered_threshold

    assert registered_threshold(env) == expected


@pytest.mark.parametrize(("argv", "flow_name", "expected"), [
    (["train"], "train_scheduler", {}),
    (["finetune", "--source", "runs:/abc/scheduler/scheduler.pt", "--env", "Acrobot-v1", "--episodes", "3",
      "--i-max", "8", "--preset", "locomotion", "--target-return", "-100", "--tracking-uri", "sqlite:///x.db", "--concurrency", "2",
      "--backend", "dask", "--backend-options", '{"dask_address": "tcp://10.0.0.5:8786"}', "--common-seeds",
      "--agent", '{"gae_lambda": 0.5}', "--eval-every", "2", "--eval-episodes", "3", "--stop-at-eval"],
     "finetune_scheduler",
     {"source": "runs:/abc/scheduler/scheduler.pt", "concurrency": 2, "agent": {"gae_lambda": 0.5},
      "common_seeds": True, "episodes": 3, "tracking_uri": "sqlite:///x.db",
      "workload": Workload(env="Acrobot-v1", i_max=8, preset="locomotion", target_return=-100.0, eval_every=2,
                           eval_episodes=3, stop_at_eval=True),
      "placement": Placement(backend="dask", backend_options={"dask_address": "tcp://10.0.0.5:8786"})}),
])
def test_scheduler_command_line(monkeypatch, argv, flow_name, expected):
    """Options left out are not passed: the flows' defaults apply (train: CartPole-v1, 60 episodes,
    ...); a Workload's and a Placement's fields come together as one of each."""
    import contextlib

    import flows.scheduler_flows as scheduler_flows

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return SchedulerTrainingResult(run_id="x", checkpoint="c.pt", artifact_uri="runs:/x/scheduler/scheduler.pt",
                                       tracking_uri="sqlite:///x.db", experiment="e", episodes_done=0, updates=0,
                                       wall_s=0.0)

    class FakeFlow:  # called instead of the flow, with its signature
        fn = staticmethod(getattr(scheduler_flows, flow_name).fn)

        def __call__(self, **kwargs):
            return fake(**kwargs)

    monkeypatch.setattr(scheduler_flows, flow_name, FakeFlow())
    monkeypatch.setattr(scheduler_flows, "prefect_api", contextlib.nullcontext)
    assert scheduler_flows.main(argv) == 0
    assert seen == expected


def test_a_scheduler_workload_can_judge_j_on_evaluations(prefect_api_url, mlflow_uri, tmp_path):
    """stop_at_eval: each episode's run stops on an evaluation's mean return, not on R_k, and the
    checkpoint records it; without eval_every it is refused before any run."""
    from flows.scheduler_flows import train_scheduler
    from models.run.config import ConfigError
    from models.scheduling.learned import load_scheduler

    client = MlflowClient(mlflow_uri)
    with pytest.raises(ConfigError, match="stop_at_eval judges J on the periodic evaluations"):
        train_scheduler(episodes=1, batch_episodes=1, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path),
                        workload=TINY_WORK.with_values(stop_at_eval=True), placement=TINY["placement"])
    assert client.search_experiments(filter_string="name LIKE 'minionsrl-scheduler%'") == []

    # J=15: a fresh CartPole policy's deterministic episodes last about 10-40 steps
    result = train_scheduler(episodes=1, batch_episodes=1, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path),
                             workload=TINY_WORK.with_values(eval_every=1, eval_episodes=2, stop_at_eval=True,
                                                            target_return=15.0), placement=TINY["placement"])
    (episode,) = result.episodes
    run = client.get_run(episode.run_id)
    assert (run.data.params["stop_at_eval"], run.data.params["eval_every"]) == ("True", "1")
    evaluated = {m.step: m.value for m in client.get_metric_history(episode.run_id, "eval/return_mean")}
    assert evaluated and set(evaluated) <= {0, 1}
    if episode.target_reached:
        assert "the evaluation after round" in run.data.tags["minionsrl.stop_detail"]
        assert max(evaluated.values()) >= 15.0
    else:
        assert all(v < 15.0 for v in evaluated.values())
    _, _, meta = load_scheduler(result.checkpoint)
    workload = meta.trained_on[0].workload
    assert (workload.eval_every, workload.eval_episodes, workload.stop_at_eval) == (1, 2, True)


def test_common_seeds_give_a_batch_one_workload_seed_and_a_resume_keeps_its_env(prefect_api_url, mlflow_uri,
                                                                               tmp_path):
    """With common_seeds, the episodes of a batch train on the batch's seed and sample with their
    own; a resume that names no env (the flow's default is CartPole-v1) keeps the run's own:
    its episodes, its experiment, its flow run's name."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    from flows.scheduler_flows import train_scheduler
    from models.scheduling.learned import load_scheduler

    ckpt = str(tmp_path / "ckpt")
    first = train_scheduler(episodes=2, batch_episodes=2, seed=5, common_seeds=True, tracking_uri=mlflow_uri,
                            checkpoint_dir=ckpt, workload=TINY_WORK.with_values(env="Acrobot-v1", target_return=-100.0),
                            placement=TINY["placement"])
    client = MlflowClient(mlflow_uri)
    params = [client.get_run(e.run_id).data.params for e in first.episodes]
    assert [(p["seed"], p["scheduler_seed"]) for p in params] == [("5", "5"), ("5", "6")]

    resumed = train_scheduler(episodes=4, batch_episodes=2, resume_run_id=first.run_id, tracking_uri=mlflow_uri,
                              checkpoint_dir=ckpt, placement=TINY["placement"])
    runs = [client.get_run(e.run_id) for e in resumed.episodes]
    assert [(r.data.params["env_id"], r.data.params["seed"], r.data.params["scheduler_seed"]) for r in runs] == [
        ("Acrobot-v1", "7", "7"), ("Acrobot-v1", "7", "8")]
    assert {client.get_experiment(r.info.experiment_id).name for r in runs} == {"minionsrl-scheduler/Acrobot-v1"}
    _, _, meta = load_scheduler(resumed.checkpoint)
    assert meta.trained_on[0].common_seeds and meta.trained_on[0].episodes == 4
    with get_client(sync_client=True) as prefect:
        named = prefect.read_flow_runs(flow_run_filter=FlowRunFilter(
            name=FlowRunFilterName(any_=["train-scheduler-Acrobot-v1-4ep-seed5"])))
    assert len(named) == 1  # renamed from the default env's name once the resumed run said Acrobot-v1


def test_scheduler_episodes_run_concurrently_on_a_shared_dask_cluster(prefect_api_url, mlflow_uri, tmp_path):
    """Two episodes of one batch at once, their actors on one running Dask cluster (by address)."""
    from distributed import Client, LocalCluster

    from flows.scheduler_flows import train_scheduler
    from models.scheduling.learned import load_scheduler

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = train_scheduler(episodes=2, batch_episodes=2, concurrency=2, workload=TINY_WORK,
                                 placement=Placement(backend="dask",
                                                     backend_options={"dask_address": cluster.scheduler_address}),
                                 tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
        assert result.episodes_done == 2 and result.updates == 1
        with Client(cluster) as dask:  # every actor of both episodes ran on this cluster
            executed = dask.run(lambda dask_worker: dask_worker.state.executed_count)
        assert sum(executed.values()) == sum(sum(e.actors) for e in result.episodes)
    client = MlflowClient(mlflow_uri)
    runs = [client.get_run(e.run_id) for e in result.episodes]
    assert [r.data.tags["minionsrl.backend"] for r in runs] == ["dask", "dask"]
    first, second = sorted(runs, key=lambda r: r.info.start_time)
    assert second.info.start_time < first.info.end_time, "the batch's two episodes did not overlap"
    _, _, meta = load_scheduler(result.checkpoint)
    assert meta.trained_on[0].placement.backend == "dask"
    assert meta.trained_on[0].placement.backend_options == {"dask_address": cluster.scheduler_address}


def test_a_resume_reuses_what_it_had_played_of_the_batch_in_flight(prefect_api_url, mlflow_uri, tmp_path,
                                                                    monkeypatch):
    """A batch of two crashed after round 0 of its second episode: the resumed training learns
    from the first episode's finished run (not played again) and resumes the second's run after
    its last round; a run that sampled with other scheduler weights (before an update) is never
    reused."""
    import flows.scheduler_flows as scheduler_flows
    from flows.batch_in_flight import agents_checkpoint, batch_in_flight, finished_run_summary
    from flows.tracking import RunTracker
    from models.errors import ConfigError
    from models.run.checkpoint import load_run_checkpoint
    from models.scheduling.learned import load_scheduler
    from tasks.chaos import CHAOS_ENV, SimulatedCrash

    ckpt, client = str(tmp_path / "ckpt"), MlflowClient(mlflow_uri)
    first = scheduler_flows.train_scheduler(episodes=1, batch_episodes=1, tracking_uri=mlflow_uri,
                                            checkpoint_dir=ckpt, **TINY)
    after_update_1 = Path(shutil.copyfile(first.checkpoint, tmp_path / "after_update_1.pt"))
    real_train = scheduler_flows.train

    def crash_in_episode_2(**kwargs):
        with monkeypatch.context() as m:
            if kwargs["scheduler_seed"] == 2:
                m.setenv(CHAOS_ENV, "saved:0")  # dies after round 0's checkpoint (and so does its retry)
            return real_train(**kwargs)

    monkeypatch.setattr(scheduler_flows, "train", crash_in_episode_2)
    with pytest.raises(SimulatedCrash):
        scheduler_flows.train_scheduler(episodes=3, batch_episodes=2, resume_run_id=first.run_id,
                                        tracking_uri=mlflow_uri, checkpoint_dir=ckpt, **TINY)
    children = lambda: client.search_runs(  # noqa: E731
        [client.get_run(first.run_id).info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{first.run_id}'",
        order_by=["attributes.start_time DESC"])
    (episode_1,) = [c for c in children() if c.data.params["scheduler_seed"] == "1"]
    crashed = [c for c in children() if c.data.params["scheduler_seed"] == "2"]
    assert episode_1.info.status == "FINISHED" and [c.info.status for c in crashed] == ["FAILED", "FAILED"]

    # What the earlier attempt spent on the batch: episode 1's wall and episode 2's round 0.
    tracker = RunTracker(mlflow_uri)
    tracker.run_id, tracker.experiment_id = first.run_id, episode_1.info.experiment_id
    seeds = {e: (int(run.data.params["seed"]), e) for e, run in ((1, episode_1), (2, crashed[0]))}
    earlier = batch_in_flight(tracker, seeds, load_scheduler(after_update_1)[0], after_update_1,
                              logging.getLogger("test"))
    round_0 = load_run_checkpoint(Path(ckpt) / crashed[0].info.run_id / "latest.pt").progress["sum_cycle_wall_s"]
    assert round_0 > 0 and list(earlier.finished) == [1] and list(earlier.interrupted) == [2]
    assert earlier.earlier_wall_s == pytest.approx(episode_1.data.metrics["summary/wall_time_s"] + round_0)

    monkeypatch.setattr(scheduler_flows, "train", real_train)
    resumed = scheduler_flows.train_scheduler(episodes=3, batch_episodes=2, resume_run_id=first.run_id,
                                              tracking_uri=mlflow_uri, checkpoint_dir=ckpt, **TINY)
    assert [e.episode for e in resumed.episodes] == [1, 2] and resumed.updates == 2
    assert resumed.episodes[0].run_id == episode_1.info.run_id  # reused, not played again
    assert resumed.episodes[0].wall_time_s == pytest.approx(episode_1.data.metrics["summary/wall_time_s"])
    assert resumed.episodes[1].run_id == crashed[0].info.run_id  # the newest attempt, resumed
    assert resumed.episodes[1].rounds == 2 and client.get_run(crashed[0].info.run_id).info.status == "FINISHED"
    assert len(children()) == 4  # episode 0, episode 1, and episode 2's two attempts: no new run
    rewards = client.get_metric_history(first.run_id, "episode/reward")
    assert sorted(m.step for m in rewards) == [0, 1, 2]  # each episode's reward logged once
    assert resumed.billed_usd == pytest.approx(sum(e.cost_usd for e in first.episodes + resumed.episodes))
    assert load_scheduler(resumed.checkpoint)[2].episodes_done == 3
    # the training's wall covers both attempts: every episode's rounds, the interrupted one's too
    assert resumed.wall_s >= first.wall_s + sum(e.wall_time_s for e in resumed.episodes)

    # Episode 1 sampled with the scheduler after update 1; episode 0 before it: never reused.
    agent = load_scheduler(after_update_1)[0]
    episode_ckpt = {e: Path(ckpt) / run / "latest.pt"
                    for e, run in ((0, first.episodes[0].run_id), (1, episode_1.info.run_id))}
    summary = finished_run_summary(agents_checkpoint(episode_ckpt[1], agent), after_update_1, "episode 1")
    assert summary.rounds == resumed.episodes[0].rounds and summary.cost_usd == resumed.episodes[0].cost_usd
    with pytest.raises(ConfigError, match="other scheduler weights"):
        agents_checkpoint(episode_ckpt[0], agent)


def test_an_episode_whose_run_cannot_be_resumed_is_played_afresh(prefect_api_url, mlflow_uri, tmp_path):
    from prefect import flow

    from flows.scheduler_flows import scheduler_episode
    from models.scheduling.agent import SchedulerAgent
    from models.scheduling.learned import save_scheduler

    scheduler = save_scheduler(tmp_path / "scheduler.pt", SchedulerAgent(4))
    client = MlflowClient(mlflow_uri)
    parent = client.create_run(client.create_experiment("episode-afresh")).info.run_id

    @flow
    def one_episode():
        return scheduler_episode.fn(0, str(scheduler), TINY_WORK, TINY["placement"], 3, 4, parent, mlflow_uri,
                                    "episode-afresh", str(tmp_path / "ckpt"), resume=str(tmp_path / "gone.pt"))

    summary = one_episode()
    assert summary.rounds == 2 and summary.stop_reason is not None
    run = client.get_run(summary.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert (run.data.params["seed"], run.data.params["scheduler_seed"]) == ("3", "4")


def test_a_resumed_training_is_named_for_the_run_it_continues(monkeypatch):
    """Its workload is read from the run later: the name must not say the env parameter's default."""
    import types

    import flows.scheduler_flows as scheduler_flows

    monkeypatch.setattr(scheduler_flows, "flow_run_context",
                        types.SimpleNamespace(parameters={"resume_run_id": "1f5114bef90c485db428", "episodes": 96}))
    assert scheduler_flows.scheduler_run_name() == "train-scheduler-resume-1f5114bef90c-96ep"

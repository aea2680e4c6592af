"""IMPACT end to end: real actor processes (one killed mid-run), a real Prefect API, a real MLflow store."""

from __future__ import annotations

import json
import math
import os
import signal
import time

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from models.envs.batch import env_spaces
from models.errors import ConfigError
from models.impact.config import ImpactConfig
from models.impact.learner import ImpactLearner
from models.impact.progress import ImpactProgress
from models.report.run_report import artifact_key
from models.rl.normalization import Moments, NormStats
from tasks.impact.learn_chunk import ChunkClock, learn_chunk
from tasks.impact.local_pool import ImpactActorPool
from tests.prefect_reads import task_runs_eventually

pytestmark = pytest.mark.e2e

SMALL = {"actors": 2, "fragment": 64, "envs_per_actor": 2, "batch_fragments": 2, "buffer_fragments": 8}


def test_a_killed_actor_is_replaced_and_the_run_goes_on():
    cfg = ImpactConfig(**SMALL)
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    progress = ImpactProgress(target_return=1e9, max_env_steps=10**9, max_wall_s=120.0, return_window=10)
    clock = ChunkClock(time.time())
    with ImpactActorPool("CartPole-v1", cfg, len(learner.weights_vector()), seed=0) as pool:
        pool.publish(learner.weights_vector(), 0)
        first = learn_chunk(learner, pool, progress, clock, steps=5)
        assert first["train/grad_steps"] == 5
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while pool.counters.replacements == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.counters.replacements == 1
        assert victim not in pool.pids() and len(pool.pids()) == 2
        # the replacement (generation 1 of slot 0) samples with the newest weights, and the learner goes on
        seen_generations: set[tuple[int, int]] = set()
        while (0, 1) not in seen_generations and time.monotonic() < deadline:
            for fragment in pool.collect(timeout_s=0.5):
                seen_generations.add((fragment.actor_index, fragment.actor_generation))
                learner.add(fragment)
        assert (0, 1) in seen_generations
        later = learn_chunk(learner, pool, progress, clock, steps=5)
        assert later["train/grad_steps"] == 5 and later["impact/actor_replacements"] == 1
        assert learner.version == 10


def test_impact_flow_two_chunks_through_prefect_and_mlflow(prefect_api_url, mlflow_uri):
    from prefect import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
    )

    from flows.impact import impact

    summary = impact(env="CartPole-v1", seed=4, chunk_steps=5, max_chunks=2, max_wall_s=120.0,
                     impact=SMALL, tracking_uri=mlflow_uri, learner_device="cpu")
    assert summary.stop_reason == "max_chunks" and summary.chunks == 2
    assert summary.learner_steps == 10
    assert summary.env_steps > 0 and summary.server_cluster_cost_usd > summary.server_cluster_cost_no_startup_usd > 0

    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["minionsrl.system"] == "impact"
    assert run.data.params["impact.max_reuse"] == "2" and run.data.params["impact.rho_bar"] == "1.0"

    def history(key):
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}

    for key in ("rollout/env_steps", "rollout/env_steps_total", "time/learner_s", "time/total_wall_s",
                "train/loss", "train/entropy", "impact/policy_lag_mean", "impact/policy_lag_max",
                "impact/rho_mean", "impact/rho_clipped_frac", "impact/learner_version",
                "cost/total_usd", "cost/server_cluster_usd", "cost/server_cluster_no_startup_usd",
                "cost/serverless_total_usd", "time/orchestration_s", "time/orchestration_frac"):
        assert sorted(history(key)) == [0, 1], key
    assert history("impact/learner_version") == {0: 5.0, 1: 10.0}
    lag_mean, lag_max = history("impact/policy_lag_mean"), history("impact/policy_lag_max")
    assert all(0 <= lag_mean[k] <= lag_max[k] for k in (0, 1))
    totals = history("rollout/env_steps_total")
    assert 0 < totals[0] <= totals[1] and totals[1] == summary.env_steps
    assert all(0 < v < 10 for v in history("impact/rho_mean").values())
    cluster = history("cost/server_cluster_usd")
    assert 0 < cluster[0] < cluster[1] and history("cost/total_usd") == cluster
    assert all(0 <= v < 1 for v in history("time/orchestration_frac").values())
    assert math.isclose(run.data.metrics["summary/env_steps"], summary.env_steps)

    keys = {kind: artifact_key(kind, summary.run_id) for kind in ("progress", "chunks", "summary")}
    with get_client(sync_client=True) as prefect:
        flows = prefect.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["impact"])))
        ours = [f for f in flows if f.name == "CartPole-v1-impact-seed4"]
        assert ours and ours[0].state.is_completed()
        def completed_chunks(runs):
            return sorted(t.name for t in runs if t.flow_run_id == ours[0].id and t.state.is_completed())

        tasks = task_runs_eventually(prefect, lambda runs: len(completed_chunks(runs)) >= 2,
                                     flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[ours[0].id])))
        assert completed_chunks(tasks) == ["learn-chunk-0", "learn-chunk-1"]
        found = {a.key: a for a in prefect.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys.values()))))}
    progress, chunks, text = found[keys["progress"]], found[keys["chunks"]], found[keys["summary"]]
    assert {progress.flow_run_id, chunks.flow_run_id, text.flow_run_id} == {ours[0].id}
    assert progress.type == "progress" and float(progress.data) == 100.0
    assert progress.description.startswith("stopped (max_chunks) after 2 chunks: 10 learner steps")
    rows = json.loads(chunks.data)  # 2 chunks < TABLE_EVERY: the table published at the end
    assert chunks.type == "table" and [(r["chunk"], r["learner steps"]) for r in rows] == [(0, 5), (1, 10)]
    assert rows[-1]["env steps"] == summary.env_steps and 0 < rows[0]["server cluster ($)"] < rows[1]["server cluster ($)"]
    assert text.type == "markdown" and "**Stopped: max_chunks**" in text.data
    assert summary.run_id in text.data and "| learner steps | 10 |" in text.data
    assert f"${summary.server_cluster_cost_no_startup_usd:.6f} without" in text.data


def test_bad_input_fails_before_any_actor_or_run(prefect_api_url, mlflow_uri):
    from flows.impact import impact

    with pytest.raises(ConfigError, match="one-shot per round by design"):
        impact(env="CartPole-v1", backend="work-pool", tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="c_bar"):
        impact(env="CartPole-v1", impact={"c_bar": 2.0}, tracking_uri=mlflow_uri)
    with pytest.raises(ConfigError, match="max_reuse"):
        impact(env="CartPole-v1", impact={"max_reuse": 0}, tracking_uri=mlflow_uri)
    client = MlflowClient(mlflow_uri)
    experiments = client.search_experiments()
    assert not experiments or client.search_runs([e.experiment_id for e in experiments]) == []


def test_an_actor_whose_code_raises_fails_the_run_with_its_error():
    from tasks.errors import ActorError

    cfg = ImpactConfig(**{**SMALL, "actors": 1})
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    progress = ImpactProgress(target_return=1e9, max_env_steps=10**9, max_wall_s=60.0, return_window=10)
    with ImpactActorPool("NoSuchEnv-v0", cfg, len(learner.weights_vector()), seed=0) as pool:
        with pytest.raises(ActorError, match="actor 0: NameNotFound: Environment `NoSuchEnv`"):
            learn_chunk(learner, pool, progress, ChunkClock(time.time()), steps=5)


def test_impact_flow_on_a_local_dask_cluster(prefect_api_url, mlflow_uri):
    from flows.impact import impact

    summary = impact(env="CartPole-v1", seed=6, chunk_steps=5, max_chunks=2, max_wall_s=180.0,
                     impact=SMALL, backend="dask", tracking_uri=mlflow_uri, learner_device="cpu")
    assert (summary.stop_reason, summary.chunks, summary.learner_steps) == ("max_chunks", 2, 10)
    assert summary.env_steps > 0 and summary.actor_replacements == 0
    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.data.tags["minionsrl.backend"] == "dask"
    lag = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "impact/policy_lag_max")}
    assert sorted(lag) == [0, 1] and all(v >= 0 for v in lag.values())


def test_a_killed_dask_actor_is_resubmitted_and_the_run_goes_on():
    from tasks.impact.dask_pool import DaskImpactActorPool

    cfg = ImpactConfig(**SMALL)
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    progress = ImpactProgress(target_return=1e9, max_env_steps=10**9, max_wall_s=300.0, return_window=10)
    clock = ChunkClock(time.time())
    with DaskImpactActorPool("CartPole-v1", cfg, len(learner.weights_vector()), seed=0) as pool:
        pool.publish(learner.weights_vector(), 0)
        learn_chunk(learner, pool, progress, clock, steps=3)
        fragment = pool.collect(timeout_s=30)[0]
        victim = fragment.batch.timings.worker_pid
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120
        seen: set[tuple[int, int]] = set()
        while (fragment.actor_index, 1) not in seen and time.monotonic() < deadline:
            for f in pool.collect(timeout_s=0.5):
                seen.add((f.actor_index, f.actor_generation))
                learner.add(f)
        assert (fragment.actor_index, 1) in seen and pool.counters.replacements == 1
        later = learn_chunk(learner, pool, progress, clock, steps=3)
        assert later["train/grad_steps"] == 3 and learner.version == 6


HOPPER_SMALL = {**SMALL, "fragment": 32, "envs_per_actor": 1, "normalize_obs": True, "normalize_reward": True}


@pytest.mark.parametrize("backend", ["local", "dask"])
def test_actors_receive_the_normaliser_statistics_with_the_weights(backend):
    from tasks.impact.dask_pool import DaskImpactActorPool

    cfg = ImpactConfig(**{**HOPPER_SMALL, "actors": 1})
    pool_class = ImpactActorPool if backend == "local" else DaskImpactActorPool
    learner = ImpactLearner(env_spaces("Hopper-v5"), cfg, seed=0, device="cpu")
    far = NormStats(obs=Moments(1e12, np.full(11, 1000.0), np.ones(11)), reward=learner.norm_state().reward,
                    gamma=cfg.gamma)

    def fragment_of(version: int, deadline: float):
        while time.monotonic() < deadline:
            for fragment in pool.collect(timeout_s=0.5):
                if fragment.behaviour_version == version:
                    return fragment
        raise AssertionError(f"no fragment of version {version}")

    with pool_class("Hopper-v5", cfg, len(learner.weights_vector()), seed=0) as pool:
        deadline = time.monotonic() + 120
        # statistics far from Hopper's (mean 1000, count 1e12): every normalised value is clipped to -10
        pool.publish(learner.weights_vector(), 3, far)
        first = fragment_of(3, deadline)
        assert first.batch.obs.dtype == np.float32 and np.all(first.batch.obs == -10.0)
        assert first.batch.norm_deltas.obs.count == 32 + 1 and first.batch.norm_deltas.reward.count == 32
        # the next version's statistics replace them (the learner's empty ones: only the clip acts)
        pool.publish(learner.weights_vector(), 4, learner.norm_state())
        second = fragment_of(4, deadline)
        assert np.abs(second.batch.obs).max() < 10.0 and second.batch.norm_deltas.obs.count == 33
        learner.add(first)
        learner.add(second)
        assert learner.obs_rms.count == 66 and learner.ret_rms.count == 64
    with pytest.raises(ValueError, match="publish the learner's norm_state"):
        pool.publish(learner.weights_vector(), 5)


def test_hopper_impact_flow_with_normalisers_two_chunks(prefect_api_url, mlflow_uri):
    from flows.impact import impact

    summary = impact(env="Hopper-v5", seed=0, chunk_steps=5, max_chunks=2, max_wall_s=120.0,
                     impact=HOPPER_SMALL, tracking_uri=mlflow_uri, learner_device="cpu")
    assert (summary.stop_reason, summary.chunks, summary.learner_steps) == ("max_chunks", 2, 10)
    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["impact.normalize_obs"] == "True" and run.data.params["impact.normalize_reward"] == "True"
    counts = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "impact/obs_norm_count")}
    # every delivered fragment's observations merged once: its steps plus its first observation
    assert sorted(counts) == [0, 1] and 0 < counts[0] <= counts[1]
    assert counts[1] == summary.env_steps * 33 / 32


def test_impact_judged_on_evaluations_stops_at_the_first_one_that_reaches_j(prefect_api_url, mlflow_uri):
    """stop_at_eval (the locomotion presets' rule): the training episodes' window is over J from the
    first chunk on, but the run stops at the first evaluation (every second chunk) that reaches it."""
    from flows.impact import impact

    summary = impact(env="CartPole-v1", seed=5, chunk_steps=5, max_chunks=6, max_wall_s=120.0, target_return=5.0,
                     return_window=1, eval_every_chunks=2, eval_episodes=2, stop_at_eval=True, impact=SMALL,
                     tracking_uri=mlflow_uri, learner_device="cpu")
    assert (summary.stop_reason, summary.chunks) == ("target_reached", 2)
    client = MlflowClient(mlflow_uri)
    run = client.get_run(summary.run_id)
    evals = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "eval/return_mean")}
    assert list(evals) == [1] and evals[1] >= 5.0  # evaluated after chunk 1 only: CartPole scores >= 8 an episode
    assert {m.step for m in client.get_metric_history(run.info.run_id, "time/eval_s")} == {1}
    assert run.data.tags["minionsrl.stop_detail"].startswith("target: the evaluation after chunk 1 returned")
    assert run.data.params["eval_every_chunks"] == "2" and run.data.params["stop_at_eval"] == "True"

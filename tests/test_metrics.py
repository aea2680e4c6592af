"""Per-round time and cost figures from actors' own timings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.billing.cost import PriceTable, round_cost
from models.rl.rollout import RolloutBatch
from models.rl.timings import ActorPhases, ActorTimings
from models.run.metrics import busy_span, mean_return, round_metrics


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0.0),
        ([(1.0, 3.0)], 2.0),
        ([(0.0, 1.0), (2.0, 4.0)], 3.0),               # disjoint
        ([(0.0, 2.0), (1.0, 3.0)], 3.0),               # overlapping
        ([(1.0, 3.0), (0.0, 2.0)], 3.0),               # order does not matter
        ([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)], 10.0),  # nested
        ([(0.0, 1.0), (1.0, 2.0)], 2.0),               # touching
        ([(5.0, 6.0), (0.0, 1.0), (0.5, 2.0), (5.5, 7.0)], 4.0),  # two merged groups: 2 + 2
        ([(3.0, 3.0)], 0.0),
    ],
)
def test_busy_span(intervals, expected):
    assert busy_span(intervals) == pytest.approx(expected)


def batch(timings: ActorTimings, returns: list[float] = (), steps: int = 4, envs: int = 2) -> RolloutBatch:
    z = np.zeros((steps, envs), dtype=np.float32)
    return RolloutBatch(
        obs=np.zeros((steps, envs, 4), np.float32), actions=np.zeros((steps, envs), np.int64), logp=z,
        rewards=z, terminated=z.astype(bool), truncated=z.astype(bool), trunc_index=np.zeros((0, 2), np.int64),
        trunc_obs=np.zeros((0, 4), np.float32), last_obs=np.zeros((envs, 4), np.float32),
        episode_returns=list(returns), episode_lengths=[int(r) for r in returns], timings=timings)


# Asked at 100.0, dispatched at 100.5, started on a core at 103.0 (2.5 s queued), data back at 104.6.
QUEUED = ActorTimings(requested_at=100.0, dispatched_at=100.5, started_at=103.0, startup_s=0.2,
                      weight_load_s=0.1, sampling_s=1.0, sampled_at=104.3, received_at=104.6)


def test_actor_phases_exclude_queue_time():
    phases = ActorPhases.of(QUEUED)
    assert phases.dispatch_s == pytest.approx(0.5)
    assert phases.queue_s == pytest.approx(2.5)
    assert phases.upload_s == pytest.approx(0.3)
    assert (phases.startup_s, phases.weight_load_s, phases.sampling_s) == (0.2, 0.1, 1.0)
    # P^a = dispatch + startup + weight load + sampling + upload; the 2.5 s queue is not in it
    assert phases.duration_s == pytest.approx(0.5 + 0.2 + 0.1 + 1.0 + 0.3)
    assert phases.duration_s == pytest.approx(104.6 - 100.0 - 2.5)


def test_actor_phases_with_only_run_actor_timings():
    # run_actor's own fields: no dispatched_at / received_at
    t = ActorTimings(requested_at=10.0, started_at=11.0, startup_s=0.25, weight_load_s=0.05,
                     sampling_s=0.7, sampled_at=12.0)
    phases = ActorPhases.of(t)
    assert phases.dispatch_s == 0.0 and phases.upload_s == 0.0
    assert phases.queue_s == pytest.approx(1.0)
    assert phases.duration_s == pytest.approx(0.25 + 0.05 + 0.7)


def test_round_metrics():
    prices = PriceTable.load()
    fast = ActorTimings(requested_at=100.0, started_at=100.0, startup_s=0.1, weight_load_s=0.1,
                        sampling_s=0.8, sampled_at=101.0)
    batches = [batch(QUEUED, returns=[10.0, 20.0]), batch(fast, returns=[30.0])]
    out = round_metrics(batches, learner_s=3.0, wall_s=9.0, prices=prices, learner_device="cuda")
    assert set(out) == {
        "rollout/ep_return_mean", "rollout/episodes", "rollout/ep_length_mean", "rollout/env_steps", "sched/actors",
        "time/actor_mean_s", "time/actor_max_s", "time/round_s", "time/round_wall_s",
        "time/orchestration_s", "cost/round_usd", "time/actor_dispatch_s", "time/actor_queue_s",
        "time/actor_startup_s", "time/actor_weight_load_s", "time/actor_sampling_s",
        "time/actor_upload_s", "perf/actor_steps_per_s", "time/actor_busy_s",
        "rollout/batches", "rollout/actor_failures", "rollout/actor_retries", "cost/actors_usd",
        "cost/learner_usd", "cost/startup_usd", "cost/warm_idle_usd", "cost/projected_aci_startup_usd",
        "cost/learner_on_cuda", "time/learner_startup_s", "time/pool_startup_s"}
    durations = [2.1, 1.0]
    assert out["time/round_s"] == pytest.approx(3.0 + max(durations))  # P_k = P^l + max_i P^a
    assert out["time/actor_max_s"] == pytest.approx(2.1)
    assert out["time/actor_mean_s"] == pytest.approx(1.55)
    assert out["time/round_wall_s"] == 9.0
    # actors busy over [100, 101] and [103, 104.3]: 2.3 s; 9 - 2.3 - 3 = 3.7 s orchestration
    assert out["time/orchestration_s"] == pytest.approx(3.7)
    assert out["cost/round_usd"] == pytest.approx(round_cost(3.0, durations, prices, "cuda"))
    assert out["cost/round_usd"] == pytest.approx((3.0 * 3.2932 + 3.1 * 0.04495) / 3600)
    # the parts: 0.3 s of the actors' 3.1 s is their measured start-up
    assert out["cost/startup_usd"] == pytest.approx(0.3 * 0.04495 / 3600)
    assert out["cost/learner_usd"] == pytest.approx(3.0 * 3.2932 / 3600)
    assert out["cost/actors_usd"] == pytest.approx(2.8 * 0.04495 / 3600)
    assert out["cost/actors_usd"] + out["cost/learner_usd"] + out["cost/startup_usd"] == out["cost/round_usd"]
    assert out["cost/learner_on_cuda"] == 1.0 and out["cost/warm_idle_usd"] == 0.0
    assert out["rollout/ep_return_mean"] == pytest.approx(20.0)
    assert out["rollout/episodes"] == 3.0
    assert out["rollout/ep_length_mean"] == pytest.approx(20.0)  # lengths 10, 20, 30
    assert out["rollout/env_steps"] == 16.0
    assert out["sched/actors"] == 2.0
    assert out["time/actor_queue_s"] == pytest.approx(1.25)
    assert out["perf/actor_steps_per_s"] == pytest.approx(16 / 1.8)


def test_round_metrics_without_finished_episodes():
    t = ActorTimings(requested_at=0.0, started_at=0.0, startup_s=0.0, weight_load_s=0.0,
                     sampling_s=0.0, sampled_at=0.0)
    out = round_metrics([batch(t)], learner_s=1.0, wall_s=0.5, prices=PriceTable.load(),
                        learner_device="cpu")
    assert math.isnan(out["rollout/ep_return_mean"])
    assert math.isnan(out["perf/actor_steps_per_s"])
    assert out["time/orchestration_s"] == 0.0  # never negative
    assert out["time/round_s"] == pytest.approx(1.0)


def test_mean_return():
    t = ActorTimings(requested_at=0.0, started_at=0.0, startup_s=0.0, weight_load_s=0.0,
                     sampling_s=0.0, sampled_at=0.0)
    assert mean_return([batch(t, [1.0, 2.0]), batch(t, [6.0])]) == pytest.approx(3.0)
    assert math.isnan(mean_return([batch(t)]))


def test_failed_and_retried_actors_are_billed_but_not_timed():
    prices = PriceTable.load()
    ok = ActorTimings(requested_at=100.0, started_at=100.0, startup_s=0.1, weight_load_s=0.1,
                      sampling_s=0.8, sampled_at=101.0, failed_attempts_billed_s=2.0, attempts=2)
    out = round_metrics([batch(ok)], learner_s=3.0, wall_s=9.0, prices=prices,
                        failed_billed_s=[5.0, 1.5], learner_device="cpu")
    assert out["sched/actors"] == 3.0 and out["rollout/batches"] == 1.0
    assert out["rollout/actor_failures"] == 2.0 and out["rollout/actor_retries"] == 1.0
    assert out["time/round_s"] == pytest.approx(3.0 + 1.0)  # failures are not durations
    assert out["cost/round_usd"] == pytest.approx(round_cost(3.0, [1.0, 2.0, 5.0, 1.5], prices, "cpu"))
    assert out["cost/actors_usd"] + out["cost/learner_usd"] + out["cost/startup_usd"] == out["cost/round_usd"]


def test_the_learner_is_billed_on_its_device_and_its_start_up_once():
    prices = PriceTable.load()
    t = ActorTimings(requested_at=0.0, started_at=0.0, startup_s=2.0, weight_load_s=0.0,
                     sampling_s=1.0, sampled_at=3.0, cold_start=True, boot_s=1.9)
    on_cpu = round_metrics([batch(t)], learner_s=10.0, wall_s=5.0, prices=prices,
                           learner_device="cpu", learner_startup_s=4.0, warm_idle_s=6.0)
    on_gpu = round_metrics([batch(t)], learner_s=10.0, wall_s=5.0, prices=prices,
                           learner_device="cuda")
    cpu_per_s, gpu_per_s, actor_per_s = 0.2332 / 3600, 3.2932 / 3600, 0.04495 / 3600
    assert on_cpu["cost/learner_usd"] == pytest.approx(10.0 * cpu_per_s)
    assert on_gpu["cost/learner_usd"] == pytest.approx(10.0 * gpu_per_s)
    assert on_cpu["cost/learner_on_cuda"] == 0.0
    # the cold actor's 2 s start-up (its boot included) and the learner's 4 s start-up
    assert on_cpu["cost/startup_usd"] == pytest.approx(2.0 * actor_per_s + 4.0 * cpu_per_s)
    assert on_gpu["cost/startup_usd"] == pytest.approx(2.0 * actor_per_s)
    # kept-warm idle seconds are actor seconds
    assert on_cpu["cost/actors_usd"] == pytest.approx((1.0 + 6.0) * actor_per_s)
    assert on_cpu["cost/warm_idle_usd"] == pytest.approx(6.0 * actor_per_s)
    for out in (on_cpu, on_gpu):
        assert out["cost/actors_usd"] + out["cost/learner_usd"] + out["cost/startup_usd"] == out["cost/round_usd"]
    assert prices.aci_startup_s == 90.0  # the cited ACI figure (prices.toml)
    assert on_cpu["cost/projected_aci_startup_usd"] == pytest.approx(90.0 * (actor_per_s + cpu_per_s))


def test_a_round_on_one_core_per_actor_is_p_k_plus_its_orchestration():
    """Two actors that had to take turns on one core here (the second queued behind the first):
    on a cluster with a core each the round is P_k plus what the round spent outside actors and
    learner, which is less than this machine's wall."""
    from models.run.metrics import one_core_per_actor_wall_s

    first = ActorTimings(requested_at=0.0, started_at=0.0, startup_s=0.0, weight_load_s=0.0,
                         sampling_s=1.0, sampled_at=1.0, sent_at=1.0, received_at=1.0)
    second = ActorTimings(requested_at=0.0, dispatched_at=0.0, started_at=1.0, startup_s=0.0,
                          weight_load_s=0.0, sampling_s=1.0, sampled_at=2.0, sent_at=2.0, received_at=2.0)
    # the round took 3.5 s here: 2 s of actors in turn, a 1 s learner, 0.5 s of orchestration
    assert one_core_per_actor_wall_s([batch(first), batch(second)], learner_s=1.0, wall_s=3.5) == pytest.approx(
        1.0 + 1.0 + 0.5)
    # never more than the wall measured here
    assert one_core_per_actor_wall_s([batch(first)], learner_s=1.0, wall_s=1.5) == pytest.approx(1.5)

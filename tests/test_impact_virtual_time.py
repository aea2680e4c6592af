"""IMPACT on the cloud clock: the virtual-time executor (models/impact/cloud_schedule.py,
tasks/impact/virtual_pool.py) against hand-computed schedules, and real actors' boot accounting.

Whether the executor's time and policy lags match a real run (1 actor and the learner, each on a
core of this machine) is a timing measurement, made by benchmarks/impact_cloud_clock.py (BENCHMARKS.md,
"IMPACT on the cloud clock"): as a test it failed in CI whenever other processes took a core (the
real run's lag rose by 0.4 with the actor slowed, the executor's did not), which says nothing
about the executor."""

from __future__ import annotations

import time

import pytest

from models.envs.batch import env_spaces
from models.impact.cloud_schedule import CloudSchedule
from models.impact.config import ImpactConfig
from models.impact.learner import ImpactLearner
from tasks.impact.local_pool import ImpactActorPool
from tasks.impact.virtual_pool import VirtualImpactActorPool


def _compute(schedule: CloudSchedule, durations: dict[int, list[float]], until_next_arrival: bool = False
             ) -> list[tuple[int, float, int, float]]:
    """Compute every due fragment: (actor, start, version it sampled with, arrival)."""
    done = []
    while (i := schedule.due_actor(until_next_arrival)) is not None:
        published = schedule.start(i)
        start = schedule.next_start[i]
        arrival = schedule.finish(i, durations[i].pop(0), f"{i}@{start:g}v{published.version}")
        done.append((i, start, published.version, arrival))
    return done


def test_fragments_take_the_weights_published_by_their_start_and_arrive_after_their_duration():
    s: CloudSchedule[str, str] = CloudSchedule(actors=2, boot_s=1.0)
    durations = {0: [0.5, 0.5, 0.5], 1: [0.7, 0.4, 0.4]}
    assert s.due_actor() is None and s.due_actor(until_next_arrival=True) is None  # nothing published yet
    s.publish(0, "w0")
    assert s.due_actor() is None  # both still booting on the learner's clock (0 < 1.0)
    # the learner needs data: it waits for the earliest arrival, computing what could precede it
    assert _compute(s, durations, until_next_arrival=True) == [(0, 1.0, 0, 1.5), (1, 1.0, 0, 1.7)]
    s.wait_for_next_arrival()
    assert s.learner_s == 1.5 and s.arrived() == ["0@1v0"]
    s.learner_spent(0.3)  # a learner step: 1.5 -> 1.8, then its weights
    s.publish(1, "w1")
    # actor 0 restarted at 1.5 and actor 1 at 1.7, both before v1 (1.8): both sample with v0
    assert _compute(s, durations) == [(0, 1.5, 0, 2.0), (1, 1.7, 0, 2.1)]
    assert s.arrived() == ["1@1v0"]  # 1.7 <= 1.8; the others are still in flight
    s.learner_spent(0.3)  # 2.1
    assert _compute(s, durations) == [(0, 2.0, 1, 2.5), (1, 2.1, 1, 2.5)]  # after 1.8: v1
    assert s.arrived() == ["0@1.5v0", "1@1.7v0"]
    assert s.next_arrival_s() == 2.5


def test_an_idle_learner_jumps_to_the_next_arrival_and_never_before_a_fragment_that_could_precede_it():
    s: CloudSchedule[str, str] = CloudSchedule(actors=3, boot_s=0.0)
    s.publish(0, "w0")
    durations = {0: [5.0, 1.0], 1: [1.0, 1.0, 1.0], 2: [3.0]}
    # actor 0 arrives at 5; actor 1 (1, 2, 3, ...) and actor 2 (3) could arrive before: computed first
    done = _compute(s, durations, until_next_arrival=True)
    assert [(a, start, arrival) for a, start, _, arrival in done] == [(0, 0.0, 5.0), (1, 0.0, 1.0), (2, 0.0, 3.0)]
    s.wait_for_next_arrival()
    assert s.learner_s == 1.0 and s.arrived() == ["1@0v0"]


def test_weights_no_actor_can_start_with_are_pruned():
    s: CloudSchedule[int, str] = CloudSchedule(actors=1, boot_s=0.0)
    for v in range(5):
        s.publish(v, v)
        s.learner_spent(1.0)  # v published at 0, 1, 2, 3, 4
    assert s.start(0).version == 0  # the actor starts at 0: v0
    s.finish(0, 3.5, "x")  # next start 3.5: only v3 and newer can be read
    assert [p.version for p in s._published] == [3, 4]
    assert s.start(0).version == 3


def test_a_schedule_needs_an_actor_and_a_finite_boot():
    with pytest.raises(ValueError):
        CloudSchedule(actors=0, boot_s=1.0)
    with pytest.raises(ValueError):
        CloudSchedule(actors=1, boot_s=float("nan"))


# -- against a real run ----------------------------------------------------------------------

_CFG = ImpactConfig(actors=1, fragment=256, envs_per_actor=1, batch_fragments=4, buffer_fragments=16, max_reuse=2)
def test_a_real_actors_first_fragment_carries_its_whole_boot_as_the_executors_do():
    """Start-up runs from the process's spawn (interpreter, torch, envs), not from building the
    actor inside it: the serverless reference bill of both pools counts the same thing."""
    learner = ImpactLearner(env_spaces("CartPole-v1"), _CFG, seed=0, device="cpu")
    with ImpactActorPool("CartPole-v1", _CFG, len(learner.weights_vector()), 0) as pool:
        pool.publish(learner.weights_vector(), learner.version, learner.norm_state())
        first = []
        deadline = time.monotonic() + 60
        while not first and time.monotonic() < deadline:
            first = pool.collect(timeout_s=1.0)
    boot = first[0].batch.timings.startup_s
    assert boot >= 0.3, boot  # a spawned interpreter importing torch; building envs alone takes ~0.01 s


def test_closing_the_pool_while_it_computes_fragments_stops_it_cleanly():
    """A Ctrl-C closes the pool from the signal handler while the learner's thread is inside
    collect() computing fragments (32 actors take seconds): collect returns, nothing raises, and
    the learner's own check then stops the run (it used to fail with an IndexError)."""
    cfg = ImpactConfig(actors=4, fragment=64, envs_per_actor=1, batch_fragments=2, buffer_fragments=8, max_reuse=2)
    learner = ImpactLearner(env_spaces("CartPole-v1"), cfg, seed=0, device="cpu")
    pool = VirtualImpactActorPool("CartPole-v1", cfg, len(learner.weights_vector()), 0, boot_s=0.5)
    pool.publish(learner.weights_vector(), learner.version, learner.norm_state())
    sampled = []
    first = pool._actors[0].sample

    def sample_then_close(read_newest):
        sampled.append(1)
        pool.close()  # as interrupts.deferred(abandon=pool.close) does on Ctrl-C
        return first(read_newest)

    pool._actors[0].sample = sample_then_close
    assert pool.collect(timeout_s=1.0) == []
    assert sampled == [1]  # the fragment in progress ended; no other actor started after the close
    assert pool.collect(timeout_s=1.0) == []

"""IMPACT's actors on the cloud clock: `actors` always-on actors as on one core each, computed here
one fragment at a time (the virtual-time executor; models/impact/cloud_schedule.py keeps the times).

It has the local pool's interface, so the learner's loop (tasks/impact/learn_chunk.py) is the same.
Every fragment is sampled with the weights its actor would have held at its start on the cloud
clock and takes its measured one-core duration here; the learner's cloud time is the real time its
own process spends between calls into this pool (steps, Prefect task runs, MLflow writes), and a
learner that needs data waits, on the cloud clock, for the next arrival. So the policy lag and the
time to J are those of a cluster with a core per actor, whatever this machine has. One fresh
worker process is booted and timed first: its boot (interpreter, imports, envs) is every actor's.
"""

from __future__ import annotations

import time

import numpy as np

from models.impact.actor import ImpactActor, ReadNewest
from models.impact.buffer import ImpactFragment
from models.impact.cloud_schedule import CloudSchedule
from models.impact.config import ImpactConfig
from models.rl.normalization import NormStats
from tasks.impact.inbox import FragmentInbox, PoolCounters, norm_layout, packed_norm
from tasks.impact.local_pool import measure_actor_boot

_Weights = tuple[np.ndarray, np.ndarray]  # the weights vector and the packed normaliser statistics


class VirtualImpactActorPool(FragmentInbox):
    """`cfg.actors` actors on the cloud clock; `cloud_s()` is the run's cloud time so far."""

    def __init__(self, env_id: str, cfg: ImpactConfig, n_weights: int, seed: int = 0,
                 boot_s: float | None = None):
        self.env_id, self.cfg, self.seed = env_id, cfg, seed
        self.counters = PoolCounters()
        self._layout = norm_layout(env_id, cfg)
        self._n_weights = n_weights
        self.boot_s = measure_actor_boot(env_id, cfg, seed) if boot_s is None else boot_s
        self._actors = [ImpactActor(env_id, cfg, seed, i, 0) for i in range(cfg.actors)]
        self._booted = [False] * cfg.actors
        self._closed = False  # close() may come from a Ctrl-C while this thread computes fragments
        self.schedule: CloudSchedule[_Weights, ImpactFragment] = CloudSchedule(cfg.actors, self.boot_s)
        self.actor_compute_s = 0.0
        """The fragments' one-core durations (thread CPU seconds): what the cloud clock counts."""
        self.actor_wall_s = 0.0
        """Real seconds this process spent computing fragments (the simulation's own cost)."""
        self._returned_at = time.perf_counter()  # the learner's clock runs from here

    # -- the learner's clock --------------------------------------------------------------------
    def _learner_back(self) -> None:
        """The learner's time since it last left this pool is its own work: on its cloud clock."""
        self.schedule.learner_spent(time.perf_counter() - self._returned_at)

    def _learner_leaves(self) -> None:
        self._returned_at = time.perf_counter()

    def cloud_s(self) -> float:
        """The run's cloud time now (the learner's clock, its current work included)."""
        return self.schedule.learner_s + (time.perf_counter() - self._returned_at)

    # -- weights out, fragments in --------------------------------------------------------------
    def publish(self, vector: np.ndarray, version: int, norm: NormStats | None = None) -> None:
        self._learner_back()
        if vector.size != self._n_weights:
            raise ValueError(f"weights vector has {vector.size} values, the pool {self._n_weights}")
        self.schedule.publish(version, (np.array(vector, dtype=np.float32), packed_norm(self._layout, norm)))
        self._learner_leaves()

    def collect(self, timeout_s: float = 0.0) -> list[ImpactFragment]:
        """Fragments that reached the learner by its cloud clock; with a timeout and none there,
        the learner waits (on the cloud clock) for the next one."""
        self._learner_back()
        self._compute_due(until_next_arrival=False)
        out = [] if self._closed else self.schedule.arrived()  # closed by a Ctrl-C: the caller's check stops
        if not out and timeout_s > 0 and not self._closed:
            self._compute_due(until_next_arrival=True)
            if not self._closed:
                self.schedule.wait_for_next_arrival()
                out = self.schedule.arrived()
        self._learner_leaves()
        return out

    def _compute_due(self, until_next_arrival: bool) -> None:
        while not self._closed and (i := self.schedule.due_actor(until_next_arrival)) is not None:
            published = self.schedule.start(i)
            actor = self._actors[i]
            read_newest = _fixed_weights(published.version, *published.weights)
            t0, c0 = time.perf_counter(), time.thread_time()
            batch = actor.sample(read_newest)
            duration_s = time.thread_time() - c0
            self.actor_wall_s += time.perf_counter() - t0
            self.actor_compute_s += duration_s
            assert batch is not None  # weights were published before any actor is due
            if not self._booted[i]:  # the first fragment carries the actor's boot, as a worker's does
                batch.timings.startup_s = self.boot_s
                self._booted[i] = True
            self.schedule.finish(i, duration_s, ImpactFragment(batch, actor.held, i, 0))

    def close(self) -> None:
        """Stop computing fragments (from any thread: the fragment in progress ends first)."""
        self._closed = True

    def pids(self) -> list[int]:
        return []


def _fixed_weights(version: int, vector: np.ndarray, norm: np.ndarray) -> ReadNewest:
    """What an actor reads at its fragment's start on the cloud clock: that moment's newest weights."""
    def read_newest(held: int) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        return (version, None, None) if held == version else (version, vector, norm)
    return read_newest

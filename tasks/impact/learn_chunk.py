"""The IMPACT learner's loop for one chunk of learner steps (flows/impact.py: a Prefect task each)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.impact.learner import ImpactLearner, StatsAccumulator
from models.impact.progress import ImpactProgress
from tasks.impact.inbox import FragmentInbox


@dataclass
class ChunkClock:
    """Times of the whole training that a chunk's metrics read (the run's totals so far), on two
    clocks: this machine's wall and the cloud clock (actors and learner on a core each)."""

    started_at: float
    """Wall clock when the actors were spawned: the training's (and the cluster's) start."""
    learner_s: float = 0.0
    actor_busy_s: float = 0.0
    first_fragment_s: float | None = None
    """Cloud seconds until the first fragment reached the learner (actors' boot and first sampling)."""
    cloud: Callable[[], float] | None = None
    """The cloud time so far (the virtual-time pool's); None: actors run for real, the wall is it."""

    def wall_s(self) -> float:
        return time.time() - self.started_at

    def cloud_s(self) -> float:
        return self.cloud() if self.cloud is not None else self.wall_s()


def learn_chunk(learner: ImpactLearner, pool: FragmentInbox, progress: ImpactProgress,
                clock: ChunkClock, steps: int, wait_s: float = 0.5,
                check: Callable[[], None] | None = None) -> dict[str, float]:
    """Up to `steps` learner steps, stopping early when a stop rule holds; the chunk's figures.

    The learner takes every fragment that has arrived, steps once a full batch is in the buffer
    (otherwise waits for actors: reuse is bounded, so a learner faster than its actors idles),
    and publishes its new weights after every step. `check` runs before every step and may raise.
    """
    t_body = time.perf_counter()
    cfg = learner.cfg
    acc = StatsAccumulator()
    evicted_before = len(learner.buffer.evicted_uses)
    env_steps = episodes = fragments = 0
    returns: list[float] = []
    weight_load, sampling, busy = [], [], 0.0
    wait_total = 0.0
    done = 0
    while done < steps and progress.check(clock.cloud_s()) is None:
        if check is not None:
            check()  # may raise: a Ctrl-C stops the chunk here
        pool.check_health()
        need_wait = len(learner.buffer) < cfg.batch_fragments
        t_wait = time.perf_counter()
        arrived = pool.collect(timeout_s=wait_s if need_wait else 0.0)
        if need_wait:
            wait_total += time.perf_counter() - t_wait
        if arrived and clock.first_fragment_s is None:
            clock.first_fragment_s = clock.cloud_s()
        for fragment in arrived:
            learner.add(fragment)
            progress.record(fragment)
            b = fragment.batch
            env_steps += b.steps
            fragments += 1
            episodes += len(b.episode_returns)
            returns += b.episode_returns
            weight_load.append(b.timings.weight_load_s)
            sampling.append(b.timings.sampling_s)
            busy += b.timings.startup_s + b.timings.weight_load_s + b.timings.sampling_s
        if len(learner.buffer) < cfg.batch_fragments:
            continue
        acc.add(learner.step())
        pool.publish(learner.weights_vector(), learner.version, learner.norm_state())
        done += 1
    stats = acc.result()
    learner_s = stats.pop("time/learner_step_s", 0.0)
    clock.learner_s += learner_s
    clock.actor_busy_s += busy
    evicted = learner.buffer.evicted_uses[evicted_before:]
    out = {
        **stats,
        "rollout/ep_return_mean": progress.mean_return,
        "rollout/chunk_ep_return_mean": float(np.mean(returns)) if returns else math.nan,
        "rollout/episodes": float(episodes),
        "rollout/env_steps": float(env_steps),
        "rollout/env_steps_total": float(progress.env_steps),
        "rollout/fragments": float(fragments),
        "impact/learner_version": float(learner.version),
        "impact/buffer_reuse_mean": float(np.mean(evicted)) if evicted else math.nan,
        "impact/buffer_fragments": float(len(learner.buffer)),
        "impact/buffer_dropped_unused": float(learner.buffer.dropped_unused),
        "impact/actor_replacements": float(pool.counters.replacements),
        **({"impact/obs_norm_count": learner.obs_rms.count} if learner.obs_rms is not None else {}),
        "time/learner_s": learner_s,
        "time/learner_wait_s": wait_total,
        "time/actor_weight_load_s": float(np.mean(weight_load)) if weight_load else math.nan,
        "time/actor_sampling_s": float(np.mean(sampling)) if sampling else math.nan,
        "perf/actor_steps_per_s": env_steps / sum(sampling) if sampling and sum(sampling) > 0 else math.nan,
        "time/chunk_body_s": time.perf_counter() - t_body,
    }
    return out

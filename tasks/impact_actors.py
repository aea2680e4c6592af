"""IMPACT's actors: persistent worker processes on this machine that sample continuously.

Each worker (one core, one torch thread) loops until told to stop: take the newest weights the
learner has published (a shared-memory float32 vector and its version, read under a lock: no
pickle, and a busy worker never blocks the learner), sample a fragment from its own persistent
envs with models/rl/rollout.py `sample_fragment` (so returns and episode statistics are PPO's), and
send it back over its pipe tagged with the weights' version. It never waits for a round.

A receiver thread in the learner's process reads every worker's pipe into a queue, so actors
are not held up by a learner step either. A worker that dies (SIGKILL, OOM, an exception) is
replaced by a fresh process in its slot (generation + 1, newly seeded envs) and the run goes on.

`learn_chunk` is the learner's loop for one chunk of learner steps (flows/impact.py wraps each
chunk in a Prefect task).

Backends: local (`ImpactActorPool`) and dask (`DaskImpactActorPool`: each actor a long-running
Dask task, weights through a Dask Variable, fragments through a Dask Queue). The work-pool
backend is refused by design: its actors are one flow run per job, ephemeral and one-shot per
round, the opposite of IMPACT's always-on actors (models/impact/learner.py validates it).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import queue
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import numpy as np

from models.envs.batch import env_spaces
from models.impact.buffer import ImpactFragment
from models.impact.config import ImpactConfig
from models.impact.learner import ImpactLearner, StatsAccumulator
from models.impact.progress import ImpactProgress
from models.rl.normalization import NormLayout, NormStats
from models.rl.timings import ActorTimings
from models.run.wire import Codec
from tasks.errors import ActorError

_READY, _FRAGMENT, _ERROR = "ready", "fragment", "error"
# Dask: fragments cross the scheduler as models/run/wire.py bytes (no pickle); weights as raw float32.
FRAGMENT_CODEC = Codec(ImpactFragment)


def _norm_layout(env_id: str, cfg: ImpactConfig) -> NormLayout | None:
    # the env is looked up only when normalising: a bad env id is the actors' error to report
    return cfg.norm_layout(env_spaces(env_id).obs_shape) if cfg.normalizes else None


def _packed_norm(layout: NormLayout | None, norm: NormStats | None) -> np.ndarray:
    """The statistics a pool publishes, as its layout's float64 vector (empty: not normalising)."""
    if layout is None:
        return np.empty(0, dtype=np.float64)
    if norm is None:
        raise ValueError("this IMPACT config normalises: publish the learner's norm_state() with the weights")
    return layout.pack(norm)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0] & 0x7FFFFFFF)


def _worker_main(conn: Connection, env_id: str, cfg: ImpactConfig, seed: int, actor_index: int,
                 generation: int, weights, norm_values, version, lock, stop) -> None:
    """A worker's life: build envs and policy once, then sample fragments until stopped."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from models.envs.batch import EnvBatch, env_spaces
    from models.impact.learner import load_weights_vector
    from models.rl.policy import ActorCritic
    from models.rl.rollout import sample_fragment

    torch.set_num_threads(1)
    t_boot = time.time()
    try:
        spaces = env_spaces(env_id)
        policy = ActorCritic(spaces, cfg.hidden, init_weights=False)
        envs = EnvBatch(env_id, cfg.envs_per_actor, _seed(seed, actor_index, generation))
        shared = np.frombuffer(weights, dtype=np.float32)
        layout = cfg.norm_layout(spaces.obs_shape)
        shared_norm = np.frombuffer(norm_values, dtype=np.float64)
        held, count, norm = -1, 0, None
        startup_s = time.time() - t_boot
        conn.send((_READY, time.time()))
        while not stop.is_set():
            t0 = time.time()
            with lock:  # weights and statistics of one version, read together
                newest = version.value
                vector = shared.copy() if newest != held else None
                norm_vector = shared_norm.copy() if vector is not None and layout else None
            if newest < 0:  # nothing published yet
                time.sleep(0.005)
                continue
            if vector is not None:
                load_weights_vector(policy, vector)
                norm = layout.unpack(norm_vector[:layout.size]) if layout else None
                held = newest
            t1 = time.time()
            batch = sample_fragment(policy.sampler(_seed(seed, actor_index, generation, count)), envs,
                                    cfg.steps_per_env, norm)
            t2 = time.time()
            batch.actor_index = actor_index
            batch.timings = ActorTimings(requested_at=t0, started_at=t0, startup_s=startup_s,
                                         weight_load_s=t1 - t0, sampling_s=t2 - t1, sampled_at=t2,
                                         sent_at=time.time())
            startup_s = 0.0  # billed once, with the worker's first fragment
            conn.send((_FRAGMENT, batch, held, generation))
            count += 1
    except (BrokenPipeError, EOFError, OSError):  # the learner's process is gone
        return
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send((_ERROR, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise


@dataclass(eq=False)
class _Slot:
    index: int
    generation: int
    process: multiprocessing.process.BaseProcess
    conn: Connection
    spawned_at: float
    ready_at: float | None = None


@dataclass
class PoolCounters:
    """What the pool saw since it started (read by the learner's loop for metrics)."""

    replacements: int = 0
    errors: list[str] = field(default_factory=list)


class _FragmentInbox:
    """What both pools share: fragments arrive on a local queue; actor errors and deaths counted."""

    cfg: ImpactConfig
    counters: PoolCounters
    _queue: queue.Queue

    def collect(self, timeout_s: float = 0.0) -> list[ImpactFragment]:
        """Every fragment that has arrived; waits up to timeout_s for the first if none has."""
        out = []
        try:
            out.append(self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait())
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def check_health(self, max_replacements: int | None = None) -> None:
        """Raise ActorError if an actor's code raised (a bug: replacing it would only repeat it)
        or workers keep dying (more than max_replacements, default 10 per actor slot)."""
        if self.counters.errors:
            raise ActorError(f"an IMPACT actor failed: {self.counters.errors[0]}")
        limit = 10 * self.cfg.actors if max_replacements is None else max_replacements
        if self.counters.replacements > limit:
            raise ActorError(f"IMPACT actors died {self.counters.replacements} times (limit {limit})")


class ImpactActorPool(_FragmentInbox):
    """`actors` persistent sampling processes; `publish` weights, `collect` fragments."""

    def __init__(self, env_id: str, cfg: ImpactConfig, n_weights: int, seed: int = 0):
        self.env_id, self.cfg, self.seed = env_id, cfg, seed
        self._ctx = multiprocessing.get_context("spawn")  # safe beside Prefect's threads
        self._weights = self._ctx.RawArray("f", n_weights)
        # The learner's normaliser statistics, float64, beside the weights (read under the same lock)
        self._layout = _norm_layout(env_id, cfg)
        self._norm = self._ctx.RawArray("d", max(self._layout.size if self._layout else 0, 1))
        self._norm_view = np.frombuffer(self._norm, dtype=np.float64)
        self._version = self._ctx.RawValue("q", -1)
        self._wlock = self._ctx.Lock()
        self._stop = self._ctx.Event()
        self._view = np.frombuffer(self._weights, dtype=np.float32)
        self._queue: queue.Queue[ImpactFragment] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.counters = PoolCounters()
        self.started_at = time.time()
        self._slots = [self._spawn(i, 0) for i in range(cfg.actors)]
        self._receiver = threading.Thread(target=self._receive, name="impact-receiver", daemon=True)
        self._receiver.start()

    # -- weights out --------------------------------------------------------------------------
    def publish(self, vector: np.ndarray, version: int, norm: NormStats | None = None) -> None:
        """Make `vector` (and `norm`, the learner's normaliser statistics) the newest weights;
        every worker takes both before its next fragment."""
        packed = _packed_norm(self._layout, norm)
        with self._wlock:
            self._view[:] = vector
            self._norm_view[:packed.size] = packed
            self._version.value = version

    # -- fragments in -------------------------------------------------------------------------
    def _receive(self) -> None:
        while not self._closed:
            with self._lock:
                slots = list(self._slots)
            waitables = {s.conn: s for s in slots} | {s.process.sentinel: s for s in slots}
            try:
                ready = wait(list(waitables), timeout=0.2)
            except OSError:
                continue
            dead = set()
            for item in ready:
                slot = waitables[item]
                if slot in dead:
                    continue
                try:
                    if item is slot.conn or slot.conn.poll():
                        message = slot.conn.recv()
                    else:
                        raise EOFError
                except (EOFError, OSError):
                    dead.add(slot)
                    continue
                if message[0] == _FRAGMENT:
                    _, batch, held, generation = message
                    batch.timings.received_at = time.time()
                    self._queue.put(ImpactFragment(batch, held, slot.index, generation))
                elif message[0] == _READY:
                    slot.ready_at = message[1]
                elif message[0] == _ERROR:
                    self.counters.errors.append(f"actor {slot.index}: {message[1]}")
            for slot in dead:
                self._replace(slot)

    # -- workers ------------------------------------------------------------------------------
    def _spawn(self, index: int, generation: int) -> _Slot:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, name=f"impact-actor-{index}", daemon=True,
            args=(child, self.env_id, self.cfg, self.seed, index, generation, self._weights,
                  self._norm, self._version, self._wlock, self._stop))
        spawned_at = time.time()
        process.start()
        child.close()  # the parent keeps only its end: the worker's death then reads as EOF
        return _Slot(index, generation, process, parent, spawned_at)

    def _replace(self, slot: _Slot) -> None:
        """A dead worker's slot gets a fresh process; the others never stop sampling."""
        with contextlib.suppress(Exception):
            slot.process.kill()
        slot.process.join(timeout=5)
        with contextlib.suppress(OSError):
            slot.conn.close()
        with self._lock:
            if self._closed:
                return
            self.counters.replacements += 1
            self._slots[slot.index] = self._spawn(slot.index, slot.generation + 1)

    def pids(self) -> list[int]:
        with self._lock:
            return [s.process.pid for s in self._slots]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = list(self._slots)
        self._stop.set()
        self._receiver.join(timeout=5)
        deadline = time.monotonic() + 5
        for slot in slots:
            slot.process.join(timeout=max(deadline - time.monotonic(), 0.1))
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(timeout=5)
            with contextlib.suppress(OSError):
                slot.conn.close()

    def __enter__(self) -> ImpactActorPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dask_actor_loop(env_id: str, cfg: ImpactConfig, seed: int, actor_index: int, generation: int,
                     names: dict[str, str]) -> int:
    """One IMPACT actor as a long-running Dask task: the local worker's loop, with the newest
    weights (raw float32 bytes) read from a Dask Variable and fragments pushed onto a Dask Queue
    as models/run/wire.py bytes, both through the scheduler. Returns the fragments it sent."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from distributed import Queue, Variable, get_client

    from models.envs.batch import EnvBatch, env_spaces
    from models.impact.learner import load_weights_vector
    from models.rl.policy import ActorCritic
    from models.rl.rollout import sample_fragment

    torch.set_num_threads(1)
    client = get_client()
    weights, stop = Variable(names["weights"], client=client), Variable(names["stop"], client=client)
    out = Queue(names["fragments"], client=client)
    t_boot = time.time()
    spaces = env_spaces(env_id)
    policy = ActorCritic(spaces, cfg.hidden, init_weights=False)
    envs = EnvBatch(env_id, cfg.envs_per_actor, _seed(seed, actor_index, generation))
    layout = cfg.norm_layout(spaces.obs_shape)
    held, count, norm, startup_s = -1, 0, None, time.time() - t_boot
    while not stop.get():
        t0 = time.time()
        newest, blob, norm_blob = weights.get()  # one Variable: weights and statistics of one version
        if newest < 0:
            time.sleep(0.01)
            continue
        if newest != held:
            load_weights_vector(policy, np.frombuffer(blob, dtype=np.float32))
            norm = layout.unpack(np.frombuffer(norm_blob, dtype=np.float64)) if layout else None
            held = newest
        t1 = time.time()
        batch = sample_fragment(policy.sampler(_seed(seed, actor_index, generation, count)), envs,
                                cfg.steps_per_env, norm)
        t2 = time.time()
        batch.actor_index = actor_index
        batch.timings = ActorTimings(requested_at=t0, started_at=t0, startup_s=startup_s,
                                     weight_load_s=t1 - t0, sampling_s=t2 - t1, sampled_at=t2,
                                     sent_at=time.time(), worker_pid=os.getpid())
        startup_s = 0.0
        out.put(FRAGMENT_CODEC.encode(ImpactFragment(batch, held, actor_index, generation)))
        count += 1
    return count


class DaskImpactActorPool(_FragmentInbox):
    """IMPACT's actors as long-running tasks on a Dask cluster (one worker thread each), with the
    local pool's interface: `publish`, `collect`, `check_health`, `close`.

    The cluster comes from tasks/dask_backend.py DaskBackend (a LocalCluster with one worker per
    actor, or a running cluster at `address`). Weights go out through a Dask Variable, fragments
    come back through a Dask Queue, both via the scheduler. A task whose worker died (KilledWorker)
    is resubmitted as the slot's next generation; an actor whose own code raised fails the run.
    """

    def __init__(self, env_id: str, cfg: ImpactConfig, n_weights: int, seed: int = 0,
                 address: str | None = None):
        from distributed import Queue, Variable

        from tasks.dask_backend import DaskBackend

        self.env_id, self.cfg, self.seed = env_id, cfg, seed
        self._backend = DaskBackend(env_id, workers=cfg.actors, address=address)
        self.client = self._backend.client
        uid = uuid.uuid4().hex[:8]
        self._names = {"weights": f"impact-weights-{uid}", "stop": f"impact-stop-{uid}",
                       "fragments": f"impact-fragments-{uid}"}
        self._weights = Variable(self._names["weights"], client=self.client)
        self._layout = _norm_layout(env_id, cfg)
        self._weights.set((-1, b"", b""))
        self._stop = Variable(self._names["stop"], client=self.client)
        self._stop.set(False)
        self._fragments = Queue(self._names["fragments"], client=self.client)
        self._queue: queue.Queue[ImpactFragment] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.counters = PoolCounters()
        self.started_at = time.time()
        self._futures = [self._submit(i, 0) for i in range(cfg.actors)]
        self._receiver = threading.Thread(target=self._receive, name="impact-dask-receiver", daemon=True)
        self._receiver.start()

    def _submit(self, index: int, generation: int):
        return self.client.submit(_dask_actor_loop, self.env_id, self.cfg, self.seed, index, generation,
                                  self._names, key=f"impact-actor-{index}-g{generation}-{uuid.uuid4().hex[:6]}",
                                  pure=False)

    def publish(self, vector: np.ndarray, version: int, norm: NormStats | None = None) -> None:
        self._weights.set((version, np.asarray(vector, dtype=np.float32).tobytes(),
                           _packed_norm(self._layout, norm).tobytes()))

    def _receive(self) -> None:
        from distributed import TimeoutError as DaskTimeoutError
        from distributed.scheduler import KilledWorker

        while not self._closed:
            try:
                fragment = FRAGMENT_CODEC.decode(self._fragments.get(timeout=0.2), ImpactFragment)
                fragment.batch.timings.received_at = time.time()
                self._queue.put(fragment)
            except (DaskTimeoutError, TimeoutError):
                pass
            except Exception:  # the client is closing
                if self._closed:
                    return
            for index, future in enumerate(list(self._futures)):
                if self._closed or not future.done():
                    continue
                error = future.exception() if future.status == "error" else None
                if error is not None and not isinstance(error, KilledWorker):
                    self.counters.errors.append(f"actor {index}: {type(error).__name__}: {error}")
                with self._lock:
                    if self._closed:
                        return
                    self.counters.replacements += 1
                    generation = int(future.key.split("-g")[1].split("-")[0]) + 1
                    self._futures[index] = self._submit(index, generation)

    def pids(self) -> list[int]:
        return sorted(self.client.run(os.getpid).values())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(Exception):
            from distributed import wait as dask_wait

            self._stop.set(True)
            dask_wait(self._futures, timeout=10)
        self._receiver.join(timeout=5)
        self._backend.close()

    def __enter__(self) -> DaskImpactActorPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class ChunkClock:
    """Times of the whole training that a chunk's metrics read (the run's totals so far)."""

    started_at: float
    """Wall clock when the actors were spawned: the training's (and the cluster's) start."""
    learner_s: float = 0.0
    actor_busy_s: float = 0.0
    first_fragment_at: float | None = None
    """When the first fragment reached the learner (actors' boot and first sampling before it)."""


def learn_chunk(learner: ImpactLearner, pool: ImpactActorPool, progress: ImpactProgress,
                clock: ChunkClock, steps: int, wait_s: float = 0.5) -> dict[str, float]:
    """Up to `steps` learner steps, stopping early when a stop rule holds; the chunk's figures.

    The learner takes every fragment that has arrived, steps once a full batch is in the buffer
    (otherwise waits for actors: reuse is bounded, so a learner faster than its actors idles),
    and publishes its new weights after every step.
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
    while done < steps and progress.check(time.time() - clock.started_at) is None:
        pool.check_health()
        need_wait = len(learner.buffer) < cfg.batch_fragments
        t_wait = time.perf_counter()
        arrived = pool.collect(timeout_s=wait_s if need_wait else 0.0)
        if need_wait:
            wait_total += time.perf_counter() - t_wait
        if arrived and clock.first_fragment_at is None:
            clock.first_fragment_at = time.time()
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

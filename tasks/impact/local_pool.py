"""IMPACT's actors as persistent worker processes on this machine (one core, one torch thread each).

Each worker loops models/impact/actor.py `ImpactActor.sample` until told to stop: the newest
weights the learner has published (a shared-memory float32 vector and its version, read under a
lock: no pickle, and a busy worker never blocks the learner), sent back over its pipe tagged with
the weights' version. It never waits for a round. A receiver thread in the learner's process reads
every worker's pipe into a queue, so actors are not held up by a learner step either. A worker that
dies (SIGKILL, OOM, an exception) is replaced by a fresh process in its slot (generation + 1,
newly seeded envs) and the run goes on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

import numpy as np

from models.impact.actor import ImpactActor
from models.impact.buffer import ImpactFragment
from models.impact.config import ImpactConfig
from models.rl.normalization import NormStats
from tasks.impact.inbox import FragmentInbox, PoolCounters, norm_layout, packed_norm

_READY, _FRAGMENT, _ERROR = "ready", "fragment", "error"


def _worker_main(conn: Connection, env_id: str, cfg: ImpactConfig, seed: int, actor_index: int,
                 generation: int, weights, norm_values, version, lock, stop, spawned_at: float) -> None:
    """A worker's life: build its actor once, then sample fragments until stopped. Its start-up
    (its first fragment carries it) runs from its spawn: interpreter, imports, envs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the training's to act on
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        actor = ImpactActor(env_id, cfg, seed, actor_index, generation, booted_at=spawned_at)
        shared = np.frombuffer(weights, dtype=np.float32)
        shared_norm = np.frombuffer(norm_values, dtype=np.float64)

        def read_newest(held: int) -> tuple[int, np.ndarray | None, np.ndarray | None]:
            with lock:  # weights and statistics of one version, read together
                newest = version.value
                if newest < 0 or newest == held:
                    return newest, None, None
                return newest, shared.copy(), shared_norm.copy()

        conn.send((_READY, time.time()))
        while not stop.is_set():
            batch = actor.sample(read_newest)
            if batch is None:  # nothing published yet
                time.sleep(0.005)
                continue
            conn.send((_FRAGMENT, batch, actor.held, generation))
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


class ImpactActorPool(FragmentInbox):
    """`actors` persistent sampling processes; `publish` weights, `collect` fragments."""

    def __init__(self, env_id: str, cfg: ImpactConfig, n_weights: int, seed: int = 0):
        self.env_id, self.cfg, self.seed = env_id, cfg, seed
        self._ctx = multiprocessing.get_context("spawn")  # safe beside Prefect's threads
        self._weights = self._ctx.RawArray("f", n_weights)
        # The learner's normaliser statistics, float64, beside the weights (read under the same lock)
        self._layout = norm_layout(env_id, cfg)
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
        packed = packed_norm(self._layout, norm)
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
        spawned_at = time.time()
        process = self._ctx.Process(
            target=_worker_main, name=f"impact-actor-{index}", daemon=True,
            args=(child, self.env_id, self.cfg, self.seed, index, generation, self._weights,
                  self._norm, self._version, self._wlock, self._stop, spawned_at))
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


def measure_actor_boot(env_id: str, cfg: ImpactConfig, seed: int = 0, timeout_s: float = 120.0) -> float:
    """Seconds from spawning one fresh actor process to its actor being built (interpreter,
    imports, envs): what every always-on actor pays once. The process stops right after."""
    ctx = multiprocessing.get_context("spawn")
    layout = norm_layout(env_id, cfg)
    stop = ctx.Event()
    stop.set()  # build, say ready, leave
    parent, child = ctx.Pipe(duplex=True)
    # held here until the child has opened them (Process.start drops its own references)
    shared = (ctx.RawArray("f", 1), ctx.RawArray("d", max(layout.size if layout else 0, 1)),
              ctx.RawValue("q", -1), ctx.Lock())
    spawned_at = time.time()
    process = ctx.Process(target=_worker_main, name="impact-actor-boot", daemon=True,
                          args=(child, env_id, cfg, seed, 0, 0, *shared, stop, spawned_at))
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise RuntimeError(f"an IMPACT actor for {env_id} did not boot in {timeout_s:.0f} s")
        message = parent.recv()
        if message[0] != _READY:
            raise RuntimeError(f"an IMPACT actor for {env_id} failed to boot: {message[1]}")
        return message[1] - spawned_at
    except EOFError as exc:
        raise RuntimeError(f"an IMPACT actor for {env_id} died while booting") from exc
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
        parent.close()

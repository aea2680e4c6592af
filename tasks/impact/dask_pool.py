"""IMPACT's actors as long-running tasks on a Dask cluster, with the local pool's interface."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import uuid

import numpy as np

from models.impact.actor import ImpactActor
from models.impact.buffer import ImpactFragment
from models.impact.config import ImpactConfig
from models.rl.normalization import NormStats
from models.run.wire import Codec
from tasks.impact.inbox import FragmentInbox, PoolCounters, norm_layout, packed_norm

# fragments cross the scheduler as models/run/wire.py bytes (no pickle); weights as raw float32
FRAGMENT_CODEC = Codec(ImpactFragment)


def _dask_actor_loop(env_id: str, cfg: ImpactConfig, seed: int, actor_index: int, generation: int,
                     names: dict[str, str]) -> int:
    """One IMPACT actor as a long-running Dask task: the local worker's loop, with the newest
    weights (raw float32 bytes) read from a Dask Variable and fragments pushed onto a Dask Queue
    as models/run/wire.py bytes, both through the scheduler. Returns the fragments it sent."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from distributed import Queue, Variable, get_client

    client = get_client()
    weights, stop = Variable(names["weights"], client=client), Variable(names["stop"], client=client)
    out = Queue(names["fragments"], client=client)
    actor = ImpactActor(env_id, cfg, seed, actor_index, generation)

    def read_newest(held: int) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        newest, blob, norm_blob = weights.get()  # one Variable: weights and statistics of one version
        if newest < 0 or newest == held:
            return newest, None, None
        return newest, np.frombuffer(blob, dtype=np.float32), np.frombuffer(norm_blob, dtype=np.float64)

    while not stop.get():
        batch = actor.sample(read_newest)
        if batch is None:
            time.sleep(0.01)
            continue
        out.put(FRAGMENT_CODEC.encode(ImpactFragment(batch, actor.held, actor_index, generation)))
    return actor.fragments


class DaskImpactActorPool(FragmentInbox):
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
        self._layout = norm_layout(env_id, cfg)
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
                           packed_norm(self._layout, norm).tobytes()))

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

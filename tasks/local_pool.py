"""Warm actor processes on this machine: one core and one torch thread each.

Kept apart from Prefect on purpose: the worker processes import only models/ (and this module),
so none of them starts a Prefect client or a temporary API server of its own.

Why not concurrent.futures.ProcessPoolExecutor: when one of its workers dies (SIGKILL, OOM),
the executor marks itself broken and fails every pending and future job, and it has no way to
stop one running job. A timed-out or lost actor must cost only its own batch, so each worker
here is a process with its own pipe: the pool can kill exactly the worker that overran, start
a replacement, and leave the others sampling.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from models.rl.rollout import ActorJob, RolloutBatch
from tasks.errors import ActorError
from tasks.worker_processes import worker_context

_READY, _BATCH, _ERROR = "ready", "batch", "error"


def _worker_main(conn: Connection, warm_env_id: str | None, environ: dict[str, str]) -> None:
    """A worker's life: import, pre-warm, say ready, then serve jobs until told to stop.

    environ: the parent's environment when it started this worker (a fork server's own is
    the one it had when it started, which can be older)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the training's to act on
    os.environ.clear()
    os.environ.update(environ)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from models.rl.rollout import run_actor

    torch.set_num_threads(1)
    if warm_env_id:  # pre-warm: import the env's modules and build it once
        from models.envs.batch import env_spaces

        env_spaces(warm_env_id)
    conn.send((_READY, time.time()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            batch = run_actor(job)
        except Exception as exc:  # the actor failed, the process is fine: report and go on
            conn.send((_ERROR, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            continue
        batch.timings.sent_at = time.time()
        batch.timings.worker_pid = os.getpid()
        conn.send((_BATCH, batch))


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    spawned_at: float
    ready_at: float | None = None
    jobs: int = 0
    boot_billed: bool = False
    """Its boot is in a bill: banked for take_startup_s, or in a cold actor's start-up."""

    def poll_ready(self) -> bool:
        """Consume the READY message if it has arrived (non-blocking)."""
        if self.ready_at is None:
            with contextlib.suppress(EOFError, OSError):
                if self.conn.poll():
                    kind, payload = self.conn.recv()
                    if kind == _READY:
                        self.ready_at = payload
        return self.ready_at is not None


class LocalActorPool:
    """A pool of warm worker processes; `run` hands one actor's job to a free core and waits.

    workers: processes (one core each); default one per core.
    warm_env_id: build this env once in each worker at start-up.
    start_method: a multiprocessing start method instead of tasks/worker_processes.py's (e.g.
        "spawn", to measure what the fork server saves).
    prewarm: the first run() waits until the processes started with the pool are ready, so the
        first round's actors start warm (they boot meanwhile). Without it, the first actors
        wait for their worker's boot and count as cold.
    """

    def __init__(self, workers: int | None = None, warm_env_id: str | None = None,
                 prewarm: bool = True, ready_timeout_s: float = 180.0, max_running: int | None = None,
                 start_method: str | None = None):
        self.workers = workers or max(os.cpu_count() or 1, 1)
        # At most max_running jobs at once (None: one per worker). A server cluster keeps more
        # worker processes than this machine has cores: gated to the cores, each actor's
        # duration stays its one-core time instead of a time-sliced share of two cores.
        self._running = threading.BoundedSemaphore(max(1, min(max_running or self.workers, self.workers)))
        self.warm_env_id = warm_env_id
        # a preloaded fork server (safe beside Prefect's threads); start_method: another, to compare
        self._ctx = multiprocessing.get_context(start_method) if start_method else worker_context()
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: dict[_Worker, int] = {}  # worker -> actor index it is running
        self._closed = False
        self.ready_timeout_s = ready_timeout_s
        self._warming = prewarm  # first run() waits until the first workers are ready
        self._warm_lock = threading.Lock()
        self._unbilled_boot_s = 0.0  # boots outside any actor's billed time, for take_startup_s
        for _ in range(self.workers):
            self._idle.append(self._spawn())

    def wait_ready(self) -> None:
        """Block until every worker started with the pool is booted (once; run() calls it).

        Workers boot in their own processes from the moment the pool exists, so the caller
        can build its learner and open MLflow meanwhile.
        """
        with self._warm_lock:
            if not self._warming:
                return
            deadline = time.monotonic() + self.ready_timeout_s
            with self._lock:
                booting = list(self._idle)
            for worker in booting:
                left = deadline - time.monotonic()
                if wait([worker.conn, worker.process.sentinel], max(left, 0)):
                    with self._lock:  # a worker that died booting is replaced by _acquire
                        worker.poll_ready()
            self._warming = False

    def take_startup_s(self) -> float:
        """Boot seconds (spawn to ready) of worker processes that booted outside any actor's
        billed time, since the last call: those started with the pool, or replacing a dead one,
        that were ready before a job reached them. A cold actor's wait for its worker's boot is
        billed in that actor's start-up instead (models/rl/timings.py count_boot_as_startup)."""
        with self._lock:
            for worker in self._idle:
                if worker.poll_ready():
                    self._bank_boot(worker, worker.ready_at)
            taken, self._unbilled_boot_s = self._unbilled_boot_s, 0.0
        return taken

    def _bank_boot(self, worker: _Worker, until: float) -> None:
        """Caller holds the lock."""
        if not worker.boot_billed:
            worker.boot_billed = True
            self._unbilled_boot_s += max(until - worker.spawned_at, 0.0)

    # -- workers -------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=_worker_main, args=(child, self.warm_env_id, dict(os.environ)),
                                    name="minionsrl-actor", daemon=True)
        spawned_at = time.time()
        process.start()
        child.close()  # the parent keeps only its end: the worker's death then reads as EOF
        return _Worker(process, parent, spawned_at)

    @staticmethod
    def _kill(worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=10)
        with contextlib.suppress(OSError):
            worker.conn.close()

    def _retire(self, worker: _Worker) -> None:
        """Kill a worker that overran or died and put a fresh process in its place."""
        self._kill(worker)
        with self._lock:
            self._busy.pop(worker, None)
            if not self._closed:
                self._idle.append(self._spawn())
                self._lock.notify()

    def _acquire(self, actor_index: int) -> _Worker:
        """Take an idle worker, preferring one that is already booted; wait if all are busy."""
        with self._lock:
            while True:
                if self._closed:
                    raise ActorError("actor pool is closed")
                for worker in list(self._idle):
                    if not worker.process.is_alive():  # died while idle: replace it
                        self._idle.remove(worker)
                        self._kill(worker)
                        self._idle.append(self._spawn())
                if self._idle:
                    ready = [w for w in self._idle if w.poll_ready()]
                    worker = (ready or self._idle)[0]
                    self._idle.remove(worker)
                    self._busy[worker] = actor_index
                    return worker
                self._lock.wait()

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.pop(worker, None)
            if self._closed:
                self._kill(worker)
            else:
                self._idle.append(worker)
                self._lock.notify()

    # -- jobs ----------------------------------------------------------------------------
    def run(self, job: ActorJob, timeout_s: float | None = None) -> RolloutBatch:
        """Run one actor on a free worker; raise ActorError if it dies, errs or overruns.

        The timeout counts from the hand-off to a worker: waiting for a free core (when there
        are more actors than workers) is not the actor's fault. A worker that overruns is
        killed (SIGKILL) and replaced; the other workers keep sampling.
        """
        self.wait_ready()
        with self._running:  # waiting here is queueing for a core, as waiting for a worker is
            return self._run_on_a_worker(job, timeout_s)

    def _run_on_a_worker(self, job: ActorJob, timeout_s: float | None) -> RolloutBatch:
        worker = self._acquire(job.actor_index)
        handed_at = time.time()
        cold = worker.ready_at is None
        with self._lock:  # a cold worker's boot from here on is billed in the actor's start-up
            self._bank_boot(worker, handed_at if cold else worker.ready_at)
        try:
            worker.conn.send(job)
        except (OSError, ValueError) as exc:
            self._retire(worker)
            raise ActorError(f"actor worker {worker.process.pid} was gone before the job "
                               f"reached it ({exc})") from None
        deadline = None if timeout_s is None else handed_at + timeout_s
        while True:
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining <= 0:
                pid = worker.process.pid
                self._retire(worker)
                raise ActorError(f"actor r{job.round_index}-a{job.actor_index} ran past its "
                                   f"{timeout_s:.1f} s timeout; worker {pid} killed",
                                   billed_s=time.time() - handed_at, timed_out=True)
            ready = wait([worker.conn, worker.process.sentinel], remaining)
            if not ready:
                continue
            try:
                if worker.conn in ready or worker.conn.poll():
                    kind, payload = worker.conn.recv()
                else:
                    raise EOFError
            except (EOFError, OSError):
                pid = worker.process.pid
                worker.process.join(timeout=5)
                code = worker.process.exitcode
                self._retire(worker)
                raise ActorError(f"actor r{job.round_index}-a{job.actor_index}: worker {pid} "
                                   f"died (exit code {code})",
                                   billed_s=time.time() - handed_at) from None
            if kind == _READY:
                worker.ready_at = payload
                continue
            worker.jobs += 1
            self._release(worker)
            if kind == _ERROR:
                raise ActorError(f"actor r{job.round_index}-a{job.actor_index} failed: {payload}",
                                   billed_s=time.time() - handed_at)
            batch: RolloutBatch = payload
            batch.timings.cold_start = cold
            if cold:
                batch.timings.count_boot_as_startup(handed_at)
            return batch

    def busy(self) -> dict[int, int]:
        """actor index -> pid of the worker process running it (for operators and tests)."""
        with self._lock:
            return {index: w.process.pid for w, index in self._busy.items()}

    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in [*self._idle, *self._busy]]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, busy = list(self._idle), list(self._busy)
            self._idle.clear()
            self._lock.notify_all()
        for worker in idle:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
        for worker in idle:
            worker.process.join(timeout=5)
        for worker in idle + busy:  # busy ones are killed: close() means stop now
            self._kill(worker)

    def __enter__(self) -> LocalActorPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

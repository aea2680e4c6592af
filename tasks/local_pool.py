"""Warm actor processes on this machine: one core and one torch thread each.

Kept apart from Prefect on purpose: the worker processes import only models/, so none of them
starts a Prefect client or a temporary API server of its own.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor

from models.rollout import ActorJob, RolloutBatch, run_actor


def _init_worker(env_id: str | None) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    if env_id:  # pre-warm: import the env's modules and build it once
        from models.envs import env_spaces

        env_spaces(env_id)


def _run(job: ActorJob) -> RolloutBatch:
    batch = run_actor(job)
    batch.timings["sent_at"] = time.time()
    return batch


class LocalActorPool:
    """A pool of warm worker processes; `submit` hands one actor's job to a free core."""

    def __init__(self, workers: int | None = None, warm_env_id: str | None = None):
        self.workers = workers or max(os.cpu_count() or 1, 1)
        context = multiprocessing.get_context("spawn")  # safe beside Prefect's threads
        self._executor = ProcessPoolExecutor(self.workers, mp_context=context,
                                             initializer=_init_worker, initargs=(warm_env_id,))
        if warm_env_id:  # start the processes now, not inside the first round
            for f in [self._executor.submit(os.getpid) for _ in range(self.workers)]:
                f.result()

    def submit(self, job: ActorJob) -> Future[RolloutBatch]:
        return self._executor.submit(_run, job)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> LocalActorPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

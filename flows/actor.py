"""Actors as flow runs on a work pool: the `actor` flow (one job) and `actor-server` (warm).

The `work-pool` backend (tasks/workpool/) starts an `actor` flow run per actor through the
`actor/minionsrl-actor` deployment, so each actor's infrastructure (a process, an ACI container
group) is started for it and gone when it returns. With warm actors, long-lived `actor-server`
flow runs stay up and run each job they are handed, inline or (as_subflows) as an `actor`
subflow, without paying the process/container start.

What goes through the storage block, and how it is read without running code, is
tasks/workpool/protocol.py, which the backend imports too.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import traceback

from prefect import flow, get_run_logger
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from flows import prefect_patches
from models.rl.rollout import run_actor
from tasks.storage import BlockStore
from tasks.workpool import protocol
from tasks.workpool.protocol import (
    DEADLINE_GRACE_S,  # past its deadline by this much, an actor exits
    JobEnvelope,
    ProcessMarker,
    ResultEnvelope,
    RunKeys,
)

_stores: dict[str, BlockStore] = {}
_weights: dict[str, bytes] = {}  # last weights this process read: a warm server reuses them


def _store(slug: str) -> BlockStore:
    if slug not in _stores:
        _stores[slug] = BlockStore.load(slug)
    return _stores[slug]


def _flow_run_id() -> str | None:
    from prefect.runtime import flow_run

    run_id = flow_run.id
    return str(run_id) if run_id else None


def _marker() -> ProcessMarker:
    return ProcessMarker(pid=os.getpid(), host=socket.gethostname(), flow_run_id=_flow_run_id(),
                         at=time.time())


def _watchdog(deadline_at: float | None) -> threading.Timer | None:
    """Backstop to the backend's cancellation: past its deadline an actor ends its process, so
    that a lost cancellation never leaves a billed container running."""
    if deadline_at is None:
        return None
    timer = threading.Timer(max(deadline_at + DEADLINE_GRACE_S - time.time(), 0.0), os._exit, (3,))
    timer.daemon = True
    timer.start()
    return timer


def run_job(store: BlockStore, prefix: str, job_id: str, body_at: float, cold: bool) -> None:
    """Read the job and its weights, sample, write the batch (or the error) back."""
    keys = RunKeys(prefix)
    protocol.put(store, keys.started(job_id), _marker())
    timer = None
    try:
        envelope = protocol.get(store, keys.job(job_id), JobEnvelope)
        if envelope is None:
            raise RuntimeError(f"job {job_id} not found under {prefix} in {store.slug}")
        timer = _watchdog(envelope.deadline_at)
        read_at = time.time()
        digest = envelope.weights_digest
        weights = _weights.get(digest)
        if weights is None:
            weights = store.get(keys.weights(digest))
            if weights is None:
                raise RuntimeError(f"weights {digest} not found under {prefix}")
            _weights.clear()
            _weights[digest] = weights
        fetched_at = time.time()
        job = dataclasses.replace(envelope.job, weights=weights)
        batch = run_actor(job)
        t = batch.timings
        t.cold_start = cold
        t.body_at = body_at
        t.job_read_s = read_at - body_at
        t.weight_transfer_s = fetched_at - read_at
        t.sent_at = time.time()
        protocol.put(store, keys.result(job_id), ResultEnvelope(batch=batch))
    except Exception as exc:
        protocol.put(store, keys.result(job_id), ResultEnvelope(
            error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise
    finally:
        if timer is not None:
            timer.cancel()


@flow(name="actor", flow_run_name="actor-{job_id}", persist_result=False,
      validate_parameters=False)
def actor(storage_block: str, prefix: str, job_id: str, server_id: str | None = None) -> None:
    """One actor: read the job and weights from storage, sample a fragment, write the batch back.

    Args:
        storage_block: slug of the storage block shared with the backend.
        prefix: the training run's folder in that block.
        job_id: the job to run.
        server_id: the warm server running this actor as a subflow; None for a cold flow run.
    """
    run_job(_store(storage_block), prefix, job_id, time.time(), cold=server_id is None)


@flow(name="actor-server", flow_run_name="actor-server-{server_id}", persist_result=False,
      validate_parameters=False)
def actor_server(storage_block: str, prefix: str, server_id: str, warm_env_id: str | None = None,
                 idle_timeout_s: float = 600.0, poll_s: float = 0.005, max_poll_s: float = 0.05,
                 as_subflows: bool = False) -> int:
    """A warm actor: stays up and runs each job it is handed, until told to stop or idle too long.

    Args:
        storage_block: slug of the storage block shared with the backend.
        prefix: the training run's folder in that block.
        server_id: this server's inbox name.
        warm_env_id: build this env once at start-up, before saying ready.
        idle_timeout_s: exit after this long without a job (nothing billed forever if the
            training run that owns the server is gone).
        poll_s: inbox poll interval right after a job; it backs off to max_poll_s when idle
            (raise both for blob stores, where each poll is a request).
        max_poll_s: the longest inbox poll interval, reached when idle.
        as_subflows: run each job as an `actor` subflow (one flow run per actor in the UI);
            off by default: inline saves the subflow's API writes (seconds on SQLite).
    Returns:
        the number of jobs served.
    """
    prefect_patches.install()  # its actor subflows end without the heartbeat wait
    logger = get_run_logger()
    store = _store(storage_block)
    if warm_env_id:
        from models.envs.batch import env_spaces

        env_spaces(warm_env_id)
    keys = RunKeys(prefix)
    protocol.put(store, keys.ready(server_id), _marker())
    logger.info("actor server %s ready (pid %d)", server_id, os.getpid())
    served, seq, delay, idle_since = 0, 0, poll_s, time.monotonic()
    # Subflows skip heartbeats: each would cost up to 1 s at exit.
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        while True:
            data = store.get(keys.inbox(server_id, seq))
            if data is None:
                if time.monotonic() - idle_since > idle_timeout_s:
                    logger.info("actor server %s idle for %.0f s: exiting", server_id, idle_timeout_s)
                    break
                time.sleep(delay)
                delay = min(delay * 1.5, max_poll_s)
                continue
            store.delete(keys.inbox(server_id, seq))
            seq += 1
            job_id = data.decode()
            if not job_id:
                break
            body_at = time.time()
            try:
                if as_subflows:
                    actor(storage_block, prefix, job_id, server_id=server_id)
                else:
                    run_job(store, prefix, job_id, body_at, cold=False)
            except Exception as exc:  # written to results/ already; the server stays up
                logger.warning("actor %s failed: %s", job_id, exc)
            served += 1
            delay, idle_since = poll_s, time.monotonic()
    store.delete(keys.ready(server_id))
    return served

"""The local backend with real worker processes: warm/cold start-up, timeouts, killed workers."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # spawned workers copy sys.path: they can import tests.slow_env
    sys.path.insert(0, str(ROOT))

from models.envs.batch import env_spaces  # noqa: E402
from models.rl.policy import ActorCritic, weights_to_bytes  # noqa: E402
from models.rl.rollout import ActorJob  # noqa: E402
from models.run.config import LocalBackendSpec  # noqa: E402
from tasks.backends import ActorError, LocalBackend, make_backend  # noqa: E402
from tests.slow_env import HANG, SLOW, SLOW_TO_MAKE  # noqa: E402

MARGIN_S = 1.5  # how late past its timeout (or its death) an ActorError may come


def make_job(env_id: str = "CartPole-v1", actor: int = 0, steps: int = 64, round_index: int = 0):
    weights = weights_to_bytes(ActorCritic(env_spaces("CartPole-v1"), (64, 64)))
    return ActorJob(env_id=env_id, round_index=round_index, actor_index=actor, seed=actor,
                    steps_per_env=steps, envs_per_actor=1, hidden=(64, 64), weights=weights,
                    requested_at=time.time())


@pytest.fixture(scope="module")
def backend():
    b = LocalBackend(workers=2, warm_env_id="CartPole-v1")
    yield b
    b.close()


def wait_busy(pool, actor: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = pool.busy().get(actor)
        if pid:
            return pid
        time.sleep(0.02)
    raise AssertionError(f"actor {actor} never started")


def test_warm_actors_return_batches_with_timings(backend):
    with ThreadPoolExecutor(2) as ex:
        batches = list(ex.map(lambda i: backend.run(make_job(actor=i), timeout_s=60), range(2)))
    for i, batch in enumerate(batches):
        t = batch.timings
        assert batch.actor_index == i and batch.steps == 64
        assert t.cold_start is False
        assert t.dispatched_at <= t.started_at <= t.sampled_at <= t.received_at
        assert t.startup_s < 1.0  # warm: the process and the env's modules were ready


def test_timeout_kills_the_actor_and_replaces_its_worker(backend):
    before = set(backend.pool.pids())
    started = time.monotonic()
    with pytest.raises(ActorError) as info:
        backend.run(make_job(HANG), timeout_s=2.0)
    took = time.monotonic() - started
    assert info.value.timed_out
    assert 2.0 <= took < 2.0 + MARGIN_S, took
    assert 2.0 <= info.value.billed_s < 2.0 + MARGIN_S
    after = set(backend.pool.pids())
    killed = before - after
    assert len(killed) == 1 and len(after) == 2
    pid = killed.pop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # The pool still serves two actors at once; the replacement boots on demand (cold).
    with ThreadPoolExecutor(2) as ex:
        batches = list(ex.map(lambda i: backend.run(make_job(actor=i), timeout_s=120), range(2)))
    assert sorted(b.timings.cold_start for b in batches) in ([False, True], [False, False])


def test_worker_killed_mid_rollout_fails_only_its_actor(backend):
    outcome: dict[str, object] = {}

    def slow():
        try:
            outcome["slow"] = backend.run(make_job(SLOW, actor=0, steps=400), timeout_s=120)
        except ActorError as exc:
            outcome["slow"] = exc
            outcome["failed_at"] = time.monotonic()

    thread = threading.Thread(target=slow)
    thread.start()
    pid = wait_busy(backend.pool, actor=0)
    time.sleep(0.5)  # mid-rollout
    other = backend.run(make_job(actor=1), timeout_s=60)  # the other worker keeps sampling
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    assert isinstance(outcome["slow"], ActorError), outcome
    assert not outcome["slow"].timed_out
    assert "died" in str(outcome["slow"])
    assert outcome["failed_at"] - killed_at < MARGIN_S
    assert other.steps == 64
    assert pid not in backend.pool.pids() and len(backend.pool.pids()) == 2
    assert backend.run(make_job(actor=2), timeout_s=120).steps == 64


def test_an_actor_that_raises_keeps_its_worker(backend):
    pids = set(backend.pool.pids())
    with pytest.raises(ActorError, match="failed"):
        backend.run(make_job("NoSuchEnv-v0"), timeout_s=60)
    assert set(backend.pool.pids()) == pids


def test_cold_start_is_recorded_without_prewarming():
    # the worker pre-warms an env that takes 1 s to build: the first actor surely waits for it
    job = make_job()
    b = make_backend(LocalBackendSpec(workers=1), SLOW_TO_MAKE, prewarm=False)
    try:
        first = b.run(job, timeout_s=120)
        second = b.run(make_job(actor=1), timeout_s=60)
    finally:
        b.close()
    assert first.timings.cold_start is True and second.timings.cold_start is False
    # The cold actor's start-up includes its process's boot; the warm one has none.
    assert first.timings.boot_s > 0.5
    assert first.timings.startup_s >= first.timings.boot_s
    assert second.timings.boot_s is None


def test_actor_process_modules_do_not_load_prefect():
    """What local and Dask worker processes import never pulls in Prefect (no client, no API)."""
    import subprocess

    code = ("import sys\nimport tasks.local_pool, tasks.dask_backend, tasks.errors\n"
            "tasks.local_pool.LocalActorPool  # noqa\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0].startswith('prefect'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_pool_boots_are_reported_once_for_billing_and_match_the_processes_boot():
    b = LocalBackend(workers=2, warm_env_id="CartPole-v1")
    try:
        b.await_prewarm()
        boots = b.take_startup_s()
        # two real processes booted (forked, env built): each took some time
        assert boots > 0
        workers = b.pool._idle
        assert all(w.boot_billed for w in workers)
        assert boots == pytest.approx(sum(w.ready_at - w.spawned_at for w in workers))
        assert b.take_startup_s() == 0.0  # reported once
        batch = b.run(make_job(), timeout_s=60)
        assert batch.timings.cold_start is False and b.take_startup_s() == 0.0
    finally:
        b.close()


def test_max_running_gates_a_pool_larger_than_the_cores():
    """A server cluster's pool keeps more processes than this machine has cores: at most
    max_running actors sample at once, and the wait for a core is queueing, not the actor's time."""
    from models.rl.timings import ActorPhases

    b = LocalBackend(workers=3, warm_env_id="CartPole-v1", max_running=1)
    try:
        with ThreadPoolExecutor(3) as threads:
            batches = list(threads.map(lambda i: b.run(make_job(actor=i, steps=2048)), range(3)))
    finally:
        b.close()
    spans = sorted((t.started_at, t.sent_at) for t in (x.timings for x in batches))
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))  # one at a time
    assert len({x.timings.worker_pid for x in batches}) == 3  # every process of the pool took a job
    queued = sorted(ActorPhases.of(x.timings).queue_s for x in batches)
    assert queued[-1] >= min(x.timings.sampling_s for x in batches)  # the last waited for a core

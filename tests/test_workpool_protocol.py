"""tasks/workpool/protocol.py: the storage keys, the envelopes on the wire, and a planted pickle
that nothing in the backend or the actor runs."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

from models.rl.normalization import Moments, NormStats
from models.rl.rollout import ActorJob, RolloutBatch
from models.rl.timings import ActorTimings
from tasks.errors import ActorError
from tasks.storage import BlockStore
from tasks.workpool import protocol
from tasks.workpool.protocol import (
    JobEnvelope,
    ProcessMarker,
    ResultEnvelope,
    RunKeys,
    StorageFormatError,
)

PREFIX = "minionsrl/abc123"


@pytest.fixture
def store(tmp_path):
    from prefect.filesystems import LocalFileSystem  # not saved: no API needed

    return BlockStore(LocalFileSystem(basepath=str(tmp_path / "block")), "local-file-system/test")


TIMINGS = ActorTimings(requested_at=0.5, started_at=1.0, startup_s=0.1, weight_load_s=0.0, sampling_s=0.5,
                       sampled_at=1.6, cold_start=False)


def job() -> ActorJob:
    return ActorJob(env_id="CartPole-v1", round_index=2, actor_index=3, seed=4, steps_per_env=8,
                    envs_per_actor=1, hidden=(8,), weights=b"", requested_at=1.0,
                    norm=NormStats(obs=Moments(3.0, np.zeros(4), np.ones(4)), reward=None, gamma=0.99))


def batch() -> RolloutBatch:
    z = np.zeros((2, 1), np.float32)
    return RolloutBatch(obs=np.zeros((2, 1, 4), np.float32), actions=np.zeros((2, 1), np.int64),
                        logp=z, rewards=z, terminated=np.zeros((2, 1), bool),
                        truncated=np.zeros((2, 1), bool), trunc_index=np.empty((0, 2), np.int64),
                        trunc_obs=np.empty((0, 4), np.float32), last_obs=np.zeros((1, 4)),
                        episode_returns=[9.0], episode_lengths=[9], actor_index=3,
                        timings=TIMINGS)


def test_keys_are_built_in_one_place():
    keys = RunKeys(PREFIX)
    assert keys.weights("d1") == f"{PREFIX}/weights/d1"
    assert keys.of_job("r0-a1-x") == (f"{PREFIX}/jobs/r0-a1-x", f"{PREFIX}/started/r0-a1-x",
                                      f"{PREFIX}/results/r0-a1-x")
    assert keys.started("j").rsplit("/", 1)[0] == keys.started_dir()
    assert keys.ready("s1") == f"{PREFIX}/servers/s1/ready"
    assert keys.inbox("s1", 7) == f"{PREFIX}/servers/s1/inbox/7"
    assert protocol.new_job_id(2, 3).startswith("r2-a3-")
    assert protocol.new_run_prefix().startswith("minionsrl/")


def test_envelopes_round_trip_through_the_block(store):
    keys = RunKeys(PREFIX)
    sent = JobEnvelope(job=job(), weights_digest="d1", deadline_at=None)
    protocol.put(store, keys.job("j"), sent)
    got = protocol.get(store, keys.job("j"), JobEnvelope)
    assert got.job.norm.obs.mean.dtype == np.float64 and got.job.hidden == (8,)
    assert got.weights_digest == "d1" and got.deadline_at is None
    protocol.put(store, keys.result("j"), ResultEnvelope(batch=batch()))
    back = protocol.get(store, keys.result("j"), ResultEnvelope)
    assert back.error is None and back.batch.timings == TIMINGS
    assert back.batch.actions.dtype == np.int64 and back.batch.last_obs.dtype == np.float64
    protocol.put(store, keys.ready("s"), ProcessMarker(pid=1, host="h", flow_run_id=None, at=2.0))
    assert protocol.get(store, keys.ready("s"), ProcessMarker).pid == 1
    assert protocol.get(store, keys.result("nothing-yet"), ResultEnvelope) is None


def test_another_protocol_version_is_refused(store):
    key = RunKeys(PREFIX).result("j")
    protocol.put(store, key, ResultEnvelope(error="x", version=protocol.PROTOCOL_VERSION + 1))
    with pytest.raises(StorageFormatError, match=f"{key}: ResultEnvelope version"):
        protocol.get(store, key, ResultEnvelope)


def test_a_job_envelope_where_a_result_is_expected_is_refused(store):
    key = RunKeys(PREFIX).result("j")
    protocol.put(store, key, JobEnvelope(job=job(), weights_digest="d", deadline_at=None))
    with pytest.raises(StorageFormatError, match="expected a ResultEnvelope, got a JobEnvelope"):
        protocol.get(store, key, ResultEnvelope)


# -- a planted pickle -------------------------------------------------------------------------
class Exploit:
    """Unpickling this creates `path`: proof that code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def plant(store: BlockStore, key: str, marker) -> None:
    store.put(key, pickle.dumps(Exploit(marker)))


def test_the_planted_pickle_is_live(tmp_path):
    """Control: pickle.loads on the same bytes does run code."""
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(Exploit(marker)))
    assert marker.exists()


def test_a_pickle_planted_as_a_job_envelope_runs_nothing_in_the_actor(store, tmp_path):
    from flows.actor import run_job

    keys, marker = RunKeys(PREFIX), tmp_path / "pwned"
    plant(store, keys.job("r0-a0-evil"), marker)
    with pytest.raises(StorageFormatError, match=f"{keys.job('r0-a0-evil')} in local-file-system/test"
                                                 " is not a JobEnvelope"):
        run_job(store, PREFIX, "r0-a0-evil", time.time(), cold=True)
    assert not marker.exists()
    # ... and the backend hears why, with the key
    result = protocol.get(store, keys.result("r0-a0-evil"), ResultEnvelope)
    assert result.batch is None and keys.job("r0-a0-evil") in result.error


def test_a_pickle_planted_as_a_batch_runs_nothing_in_the_backend(store, tmp_path):
    from tasks.workpool.backend import WorkPoolBackend

    keys, marker = RunKeys(PREFIX), tmp_path / "pwned"
    plant(store, keys.result("r0-a0-evil"), marker)
    cancelled = []
    backend = object.__new__(WorkPoolBackend)  # only what _await touches: no Prefect API
    backend.store, backend.keys, backend._closed = store, keys, threading.Event()
    backend.monitor = SimpleNamespace(final_state=lambda _run: None)
    backend.launcher = SimpleNamespace(cancel=lambda run, why: cancelled.append(why))
    with pytest.raises(ActorError, match=f"{keys.result('r0-a0-evil')} in local-file-system/test "
                                         "is not a ResultEnvelope") as info:
        backend._await(job(), "r0-a0-evil", uuid.uuid4(), None, time.time(), None, None)
    assert "not a MRLW wire blob" in str(info.value)
    assert not marker.exists()
    assert cancelled == ["actor r2-a3 sent back an unreadable result"]

"""models/run/wire.py: exact round trips of the project's dataclasses, and blobs it refuses."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import numpy as np
import pytest

from models.envs.batch import env_spaces
from models.rl.normalization import NormStats, RunningMeanStd
from models.rl.policy import ActorCritic, weights_to_bytes
from models.rl.rollout import ActorJob, RolloutBatch, run_actor
from models.rl.timings import ActorTimings
from models.run.wire import MAGIC, Codec, WireError

CODEC = Codec(ActorJob, RolloutBatch)


def assert_same(a, b, path="value"):
    """Equal in value and in kind: every array with the same dtype and shape."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), path
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def round_trip(obj):
    out = CODEC.decode(CODEC.encode(obj), type(obj))
    assert_same(obj, out, type(obj).__name__)
    return out


def job_for(env_id: str, hidden=(16, 16), norm=None, steps=32) -> ActorJob:
    weights = weights_to_bytes(ActorCritic(env_spaces(env_id), hidden))
    return ActorJob(env_id=env_id, round_index=3, actor_index=1, seed=7, steps_per_env=steps,
                    envs_per_actor=2, hidden=hidden, weights=weights, requested_at=1.5, norm=norm)


def test_discrete_cartpole_job_and_batch_round_trip():
    job = round_trip(job_for("CartPole-v1"))
    assert job.hidden == (16, 16) and job.norm is None
    batch = run_actor(job)
    assert batch.actions.dtype == np.int64 and batch.terminated.dtype == bool
    out = round_trip(batch)
    assert out.timings == batch.timings and out.steps == 64


def test_gaussian_hopper_job_with_norm_stats_and_batch_round_trip():
    obs_rms, ret_rms = RunningMeanStd((11,)), RunningMeanStd(())
    obs_rms.update(np.random.default_rng(0).normal(size=(50, 11)))
    norm = NormStats(obs=obs_rms.moments(), reward=ret_rms.moments(), gamma=0.99)
    job = round_trip(job_for("Hopper-v5", norm=norm))
    assert job.norm.obs.mean.dtype == np.float64 and job.norm.reward.var.shape == ()
    assert job.norm.obs.count == 50 and job.norm.gamma == 0.99
    batch = run_actor(job)
    assert batch.actions.dtype == np.float32
    assert batch.norm_deltas.obs is not None and batch.norm_deltas.reward is not None
    out = round_trip(batch)
    np.testing.assert_array_equal(out.norm_deltas.obs.var, batch.norm_deltas.obs.var)
    assert out.timings == batch.timings


def test_atari_uint8_frames_round_trip():
    rng = np.random.default_rng(0)
    t, n = 8, 2
    batch = RolloutBatch(
        obs=rng.integers(0, 256, size=(t, n, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, 6, size=(t, n)), logp=rng.normal(size=(t, n)).astype(np.float32),
        rewards=np.sign(rng.normal(size=(t, n))).astype(np.float32),
        terminated=np.zeros((t, n), bool), truncated=np.zeros((t, n), bool),
        trunc_index=np.empty((0, 2), np.int64), trunc_obs=np.empty((0, 4, 84, 84), np.uint8),
        last_obs=rng.integers(0, 256, size=(n, 4, 84, 84), dtype=np.uint8),
        episode_returns=[], episode_lengths=[], actor_index=5,
        timings=ActorTimings(requested_at=0.0, started_at=1.0, startup_s=float("inf"), weight_load_s=0.0,
                             sampling_s=0.25, sampled_at=float("nan"), cold_start=True, attempts=2))
    # NaN != NaN: compare that one by hand
    out = CODEC.decode(CODEC.encode(batch), RolloutBatch)
    assert np.isnan(out.timings.sampled_at) and out.timings.startup_s == float("inf")
    out.timings.sampled_at = batch.timings.sampled_at = 0.0
    assert_same(batch, out)
    out.obs[0, 0, 0, 0, 0] = 1  # decoded arrays are the reader's own, writeable


# -- the dataclasses the project is moving to: nested and frozen, decoded by type hints -----
@dataclass(frozen=True)
class Stats:
    count: float
    mean: np.ndarray
    var: np.ndarray


@dataclass(frozen=True)
class Norm:
    obs: Stats | None
    reward: Stats | None
    gamma: float = 0.99


@dataclass(frozen=True)
class Timings:
    started_at: float
    sampling_s: float = 0.0


@dataclass(frozen=True)
class FutureBatch:
    obs: np.ndarray
    timings: Timings
    norm: Norm | None = None
    per_key: dict[str, Stats] = field(default_factory=dict)
    history: tuple[Timings, ...] = ()
    seed: np.int64 = np.int64(0)


def test_nested_frozen_dataclasses_need_no_registration():
    codec = Codec(FutureBatch)  # Stats, Norm, Timings are reached through FutureBatch's hints
    stats = Stats(2.0, np.arange(3, dtype=np.float64), np.ones(3))
    batch = FutureBatch(obs=np.zeros((2, 3), np.float32), timings=Timings(1.0, 0.5),
                        norm=Norm(obs=stats, reward=None), per_key={"obs": stats},
                        history=(Timings(0.0), Timings(2.0, 1.0)), seed=np.int64(9))
    out = codec.decode(codec.encode(batch), FutureBatch)
    assert_same(batch, out)
    assert isinstance(out.norm.obs, Stats) and isinstance(out.history, tuple)


# -- refused --------------------------------------------------------------------------------
class Boom:
    def __reduce__(self):
        return (print, ("ran",))


def test_a_pickle_is_refused_unread():
    with pytest.raises(WireError, match="not a MRLW wire blob"):
        CODEC.decode(pickle.dumps(Boom()), ActorJob)


def test_types_off_the_allow_list_are_refused_both_ways():
    stats = Stats(1.0, np.zeros(1), np.ones(1))
    with pytest.raises(WireError, match="allow-list"):
        CODEC.encode(stats)
    blob = Codec(Stats).encode(stats)
    with pytest.raises(WireError, match="'Stats' is not on this codec's allow-list"):
        CODEC.decode(blob, ActorJob)
    with pytest.raises(WireError, match="expected a ActorJob, got a RolloutBatch"):
        CODEC.decode(round_trip_blob_of_batch(), ActorJob)


def round_trip_blob_of_batch() -> bytes:
    z = np.zeros((1, 1), np.float32)
    return CODEC.encode(RolloutBatch(obs=z, actions=z, logp=z, rewards=z, terminated=z,
                                     truncated=z, trunc_index=z, trunc_obs=z, last_obs=z,
                                     episode_returns=[1.0], episode_lengths=[1]))


def npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=array.dtype.hasobject)
    return buf.getvalue()


def forged(header: bytes, *payloads: bytes) -> bytes:
    import struct

    parts = [MAGIC, struct.pack("<Q", len(header)), header]
    for p in payloads:
        parts += [struct.pack("<Q", len(p)), p]
    return b"".join(parts)


@pytest.mark.parametrize(("fields", "match"), [
    ('{"obs":{"$array":0},"timings":{"$dataclass":"Timings","fields":{"started_at":"x"}}}',
     r"FutureBatch.timings.started_at: expected a float"),
    ('{"obs":{"$array":0},"timings":{"$dataclass":"Timings","fields":{"started_at":1}},"evil":1}',
     "has no field"),
    ('{"timings":{"$dataclass":"Timings","fields":{"started_at":1}}}', "missing obs"),
    ('{"obs":{"$array":7},"timings":{"$dataclass":"Timings","fields":{"started_at":1}}}',
     "expected a array reference"),
    ('{"obs":{"$array":0},"timings":{"$dataclass":"Stats","fields":{}}}', "expected a Timings"),
])
def test_blobs_that_break_the_schema_name_the_field(fields, match):
    header = b'{"format":1,"type":"FutureBatch","fields":' + fields.encode() + b"}"
    with pytest.raises(WireError, match=match):
        Codec(FutureBatch).decode(forged(header, npy(np.zeros(2))), FutureBatch)


def test_object_arrays_and_pickled_array_payloads_are_refused():
    codec = Codec(FutureBatch)
    with pytest.raises(WireError, match="object arrays"):
        codec.encode(FutureBatch(obs=np.array([Boom()], dtype=object), timings=Timings(0.0)))
    header = (b'{"format":1,"type":"FutureBatch","fields":{"obs":{"$array":0},'
              b'"timings":{"$dataclass":"Timings","fields":{"started_at":1}}}}')
    with pytest.raises(WireError, match="bad array"):
        codec.decode(forged(header, npy(np.array([Boom()], dtype=object))), FutureBatch)


def test_truncated_blob():
    blob = CODEC.encode(job_for("CartPole-v1"))
    with pytest.raises(WireError, match="truncated"):
        CODEC.decode(blob[:-3], ActorJob)

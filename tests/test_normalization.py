import numpy as np
import pytest
import torch

from models.rl.normalization import (
    Moments,
    ObservationNormalizer,
    RewardScaler,
    RunningMeanStd,
    merge_base_and_deltas,
)

TOL = 1e-10


def stats_of(chunks, shape):
    rms = RunningMeanStd(shape)
    for chunk in chunks:
        rms.update(chunk)
    return rms


def assert_matches_data(rms, data):
    assert rms.count == pytest.approx(data.shape[0], abs=TOL)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("sizes", [[50, 50, 50], [1, 300, 7, 64], [1], [2, 1, 1, 97]])
def test_merged_chunks_equal_concatenated_data(sizes):
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.5, size=(n, 5)) * np.arange(1, 6) for n in sizes]
    parts = [stats_of([c], (5,)) for c in chunks]
    assert_matches_data(RunningMeanStd.merged(parts), np.concatenate(chunks))


def test_sequential_updates_equal_concatenated_data():
    rng = np.random.default_rng(1)
    chunks = [rng.normal(-4.0, 0.3, size=(n, 3)) for n in (1, 17, 1, 250)]
    assert_matches_data(stats_of(chunks, (3,)), np.concatenate(chunks))


@pytest.mark.parametrize("shape", [(), (11,)])
def test_one_sample_updates_are_the_numpy_reductions_bit_for_bit(shape):
    """An actor with one env adds one sample a step; that path skips numpy's mean and var
    (of one sample: itself and 0) and must give the same statistics to the last bit."""
    rng = np.random.default_rng(3)
    fast, reference = RunningMeanStd(shape), RunningMeanStd(shape)
    base = rng.normal(1.0, 3.0, size=(5, *shape))
    fast.update(base)  # a shipped base, then single samples
    reference.update(base)
    for _ in range(300):
        x = rng.normal(2.0, 7.0, size=(1, *shape)) ** 3
        fast.update(x)
        reference._merge_moments(1.0, x.reshape((-1, *shape)).mean(axis=0), x.reshape((-1, *shape)).var(axis=0))
    assert fast.count == reference.count == 305
    assert np.array_equal(fast.mean, reference.mean) and np.array_equal(fast.var, reference.var)


def test_scalar_shape_and_empty_parts():
    rng = np.random.default_rng(2)
    data = rng.exponential(5.0, size=123)
    merged = RunningMeanStd.merged([RunningMeanStd(), stats_of([data[:1]], ()), stats_of([data[1:]], ()),
                                    RunningMeanStd()])
    assert_matches_data(merged, data)
    empty = RunningMeanStd(())
    empty.update(np.zeros((0,)))
    assert empty.count == 0


def test_merge_rejects_other_shapes():
    with pytest.raises(ValueError):
        RunningMeanStd((3,)).merge(RunningMeanStd((4,)))


def test_base_plus_actor_deltas_equals_all_data():
    rng = np.random.default_rng(3)
    base_data = rng.normal(1.0, 2.0, size=(500, 4))
    base = stats_of([base_data], (4,))
    shipped = base.moments()

    actor_data, deltas = [], []
    for actor, n_steps in enumerate([3, 40, 1, 17]):
        normalizer = ObservationNormalizer((4,), base=shipped)
        for _ in range(n_steps):
            batch = rng.normal(5.0 + actor, 1.0 + actor, size=(8, 4))
            normalizer(batch)
            actor_data.append(batch)
        # the live stats are base + delta
        np.testing.assert_allclose(normalizer.stats.mean,
                                   merge_base_and_deltas(shipped, [normalizer.delta]).mean, atol=TOL)
        deltas.append(normalizer.delta.moments())

    merged = merge_base_and_deltas(shipped, deltas)
    assert_matches_data(merged, np.concatenate([base_data, *actor_data]))
    # the shipped base is untouched
    np.testing.assert_array_equal(shipped.mean, base.mean)


def test_reward_scaler_stats_merge_like_observations():
    rng = np.random.default_rng(4)
    gamma = 0.9
    all_returns = [rng.normal(size=50)]
    base = RunningMeanStd(())
    base.update(all_returns[0])

    deltas = []
    for _ in range(3):
        scaler = RewardScaler(num_envs=2, gamma=gamma, base=base.moments())
        returns = np.zeros(2)
        for t in range(30):
            rewards = rng.normal(size=2)
            dones = np.array([t % 7 == 6, t % 11 == 10])
            scaled = scaler(rewards, dones)
            returns = returns * gamma + rewards
            all_returns.append(returns.copy())
            np.testing.assert_allclose(scaled, np.clip(rewards / np.sqrt(scaler.stats.var + 1e-8), -10, 10),
                                       rtol=1e-6)
            assert scaled.dtype == np.float32
            returns[dones] = 0.0
        deltas.append(scaler.delta)
    assert_matches_data(merge_base_and_deltas(base, deltas), np.concatenate(all_returns))


def test_normalize_clips_and_is_float32():
    rms = RunningMeanStd((2,))
    rms.update(np.array([[0.0, 0.0], [2.0, 2.0]]))  # mean 1, var 1
    out = rms.normalize(np.array([[1.0, 1e6], [-1e6, 3.0]]), clip=5.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.0, 5.0], [-5.0, 2.0]], atol=1e-6)
    assert RunningMeanStd((2,)).normalize(np.array([20.0, -3.0])).tolist() == [10.0, -3.0]


def test_moments_round_trip_through_a_weights_only_checkpoint(tmp_path):
    rng = np.random.default_rng(5)
    rms = stats_of([rng.normal(size=(10, 3, 2))], (3, 2))
    moments = rms.moments()
    moments.mean[0, 0] = 123.0  # a snapshot is a copy
    assert rms.mean[0, 0] != 123.0
    torch.save(rms.moments().to_state(), tmp_path / "m.pt")
    back = RunningMeanStd.from_moments(Moments.from_state(torch.load(tmp_path / "m.pt", weights_only=True)))
    assert back.shape == (3, 2) and back.count == rms.count
    np.testing.assert_array_equal(back.mean, rms.mean)
    np.testing.assert_array_equal(back.var, rms.var)


def test_one_env_reward_scaling_in_python_floats_has_the_array_paths_bits():
    """RewardScaler(num_envs=1) runs in Python floats (issue 37): its scaled rewards, returns and
    statistics equal, bit for bit, the array arithmetic of the n-env path applied to one env."""
    rng = np.random.default_rng(11)
    base = RunningMeanStd(())
    base.update(rng.normal(size=40))
    scaler = RewardScaler(num_envs=1, gamma=0.99, base=base.moments())
    stats, delta, returns = base.copy(), RunningMeanStd(()), np.zeros(1)
    for t in range(2000):
        reward = np.array([rng.normal() * 10.0 ** rng.integers(-3, 4)], dtype=np.float32)  # clipped at times
        done = np.array([t % 97 == 96])
        scaled = scaler(reward, done)
        returns = returns * 0.99 + np.asarray(reward, dtype=np.float64)  # the n-env path, n = 1
        stats.update(returns)
        delta.update(returns)
        expected = np.minimum(np.maximum(reward / np.sqrt(stats.var + 1e-8), -10.0), 10.0).astype(np.float32)
        returns[done] = 0.0
        assert scaled.dtype == np.float32 and scaled.tobytes() == expected.tobytes()
        assert scaler.returns.tobytes() == returns.tobytes()
    for got, want in ((scaler.stats, stats), (scaler.delta, delta)):
        moments, expected_moments = got.moments(), want.moments()
        assert moments.count == expected_moments.count
        assert moments.mean.tobytes() == expected_moments.mean.tobytes()
        assert moments.var.tobytes() == expected_moments.var.tobytes()

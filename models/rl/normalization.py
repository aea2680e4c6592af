"""Running observation and reward statistics that many actors update and one learner merges.

The life cycle in one round, for observations and rewards alike:

1. The learner ships its statistics with the weights: a `NormStats` of `Moments` (a few small
   numpy arrays).
2. Each actor builds an `ObservationNormalizer` / `RewardScaler` from that base. While sampling,
   it normalises with the live statistics (base plus everything it has seen so far, as
   gymnasium's NormalizeObservation and SB3's VecNormalize do) and separately accumulates a
   *delta*: the statistics of only the data it saw in this fragment. It stores the normalised
   observations and scaled rewards in its batch, so the learner re-scores exactly what the
   policy saw, and returns ``delta.moments()`` with the batch (`NormDeltas`).
3. The learner calls ``merge_base_and_deltas(base, deltas)``: base merged once with every
   actor's delta. That equals the statistics of all data ever seen, exactly (Chan et al.'s
   parallel formula), whatever the number of actors. Merging the actors' full statistics
   instead would count the base N times.

Variances are population variances (ddof=0), as numpy's ``var`` and SB3 compute them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

EPSILON = 1e-8


@dataclass(frozen=True)
class Moments:
    """A frozen snapshot of running statistics: sample count, mean and population variance."""

    count: float
    mean: np.ndarray
    var: np.ndarray

    def to_state(self) -> dict[str, float | torch.Tensor]:
        """Plain checkpoint form: a float and two float64 tensors (loads with weights_only)."""
        return {"count": float(self.count), "mean": torch.from_numpy(np.array(self.mean, dtype=np.float64)),
                "var": torch.from_numpy(np.array(self.var, dtype=np.float64))}

    @classmethod
    def from_state(cls, state: dict) -> Moments:
        def array(x) -> np.ndarray:
            return np.array(x.numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)

        return cls(float(state["count"]), array(state["mean"]), array(state["var"]))


@dataclass(frozen=True)
class NormStats:
    """The learner's normaliser statistics, shipped to every actor with the weights."""

    obs: Moments | None
    reward: Moments | None
    gamma: float


@dataclass(frozen=True)
class NormDeltas:
    """The statistics of one fragment's own data, returned by an actor for the learner to merge."""

    obs: Moments | None = None
    reward: Moments | None = None


class RunningMeanStd:
    """Count, mean and variance of a stream of arrays of a fixed shape, float64.

    An empty instance has count 0, mean 0 and variance 1, so normalising with it changes only
    the clip. Updating or merging is exact: the result equals the moments of all the data.
    """

    def __init__(self, shape: tuple[int, ...] = ()):
        self.shape = tuple(shape)
        self.count = 0.0
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)

    def update(self, batch: np.ndarray) -> None:
        """Add a batch of samples, shape (..., *shape); leading axes are all sample axes."""
        x = np.asarray(batch, dtype=np.float64).reshape((-1, *self.shape))
        if x.shape[0] == 0:
            return
        if x.shape[0] == 1 and self.count > 0:  # one env per actor, every step
            # _merge_moments(1, x, 0) without its zero terms (adding 0.0 and multiplying by 1.0
            # are exact) and without numpy's mean and var of one sample: the same bits, 3x faster
            total = self.count + 1.0
            delta = x[0] - self.mean
            self.mean = self.mean + delta * (1.0 / total)
            self.var = (self.var * self.count + delta**2 * (self.count / total)) / total
            self.count = total
            return
        self._merge_moments(float(x.shape[0]), x.mean(axis=0), x.var(axis=0))

    def update_one(self, x: float) -> None:
        """update() with one sample of a shape-() statistic, in Python floats: numpy does this
        arithmetic on float64 scalars (IEEE doubles and libm's pow, as Python's floats), so the
        bits are update()'s, without its array calls (an actor's reward scaler, every step)."""
        if self.count == 0:
            self.count, self.mean, self.var = 1.0, np.float64(x), np.float64(0.0)
            return
        count = self.count
        total = count + 1.0
        delta = x - float(self.mean)
        self.mean = np.float64(float(self.mean) + delta * (1.0 / total))
        self.var = np.float64((float(self.var) * count + delta**2 * (count / total)) / total)
        self.count = total

    def merge(self, other: RunningMeanStd) -> RunningMeanStd:
        """Merge another instance's statistics into this one, in place; returns self."""
        if other.shape != self.shape:
            raise ValueError(f"cannot merge statistics of shape {other.shape} into {self.shape}")
        self._merge_moments(other.count, other.mean, other.var)
        return self

    @classmethod
    def merged(cls, parts: Iterable[RunningMeanStd]) -> RunningMeanStd:
        """A new instance holding the statistics of all parts' data together."""
        parts = list(parts)
        if not parts:
            raise ValueError("merged() needs at least one RunningMeanStd")
        out = cls(parts[0].shape)
        for part in parts:
            out.merge(part)
        return out

    def _merge_moments(self, count: float, mean: np.ndarray, var: np.ndarray) -> None:
        if count == 0:
            return
        if self.count == 0:
            self.count = float(count)
            self.mean = np.array(mean, dtype=np.float64)
            self.var = np.array(var, dtype=np.float64)
            return
        total = self.count + count
        delta = mean - self.mean
        m2 = self.var * self.count + var * count + delta**2 * (self.count * count / total)
        self.mean = self.mean + delta * (count / total)
        self.var = m2 / total
        self.count = total

    def normalize(self, x: np.ndarray, clip: float = 10.0, epsilon: float = EPSILON) -> np.ndarray:
        """(x - mean) / sqrt(var + epsilon), clipped to [-clip, clip], as float32."""
        z = (np.asarray(x, dtype=np.float64) - self.mean) / np.sqrt(self.var + epsilon)
        return np.minimum(np.maximum(z, -clip), clip).astype(np.float32)  # np.clip, less Python

    def copy(self) -> RunningMeanStd:
        return RunningMeanStd.from_moments(self.moments())

    def moments(self) -> Moments:
        """A frozen copy of the statistics."""
        return Moments(float(self.count), np.array(self.mean, dtype=np.float64),
                       np.array(self.var, dtype=np.float64))

    @classmethod
    def from_moments(cls, moments: Moments) -> RunningMeanStd:
        mean = np.array(moments.mean, dtype=np.float64)
        out = cls(mean.shape)
        out.count = float(moments.count)
        out.mean = mean
        out.var = np.array(moments.var, dtype=np.float64)
        return out

    def __repr__(self) -> str:
        return f"RunningMeanStd(shape={self.shape}, count={self.count:g})"


def merge_base_and_deltas(base: RunningMeanStd | Moments,
                          deltas: Iterable[RunningMeanStd | Moments]) -> RunningMeanStd:
    """The learner's merge: the shipped base merged once with each actor's delta (new object).

    The result is the statistics of the base's data followed by every actor's fragment data;
    the order of deltas does not matter.
    """
    def _as_rms(s: RunningMeanStd | Moments) -> RunningMeanStd:
        return s if isinstance(s, RunningMeanStd) else RunningMeanStd.from_moments(s)

    return RunningMeanStd.merged([_as_rms(base), *(_as_rms(d) for d in deltas)])


def _start_from(base: RunningMeanStd | Moments | None, shape: tuple[int, ...]) -> RunningMeanStd:
    if base is None:
        return RunningMeanStd(shape)
    rms = base.copy() if isinstance(base, RunningMeanStd) else RunningMeanStd.from_moments(base)
    if rms.shape != tuple(shape):
        raise ValueError(f"shipped statistics have shape {rms.shape}, expected {tuple(shape)}")
    return rms


class ObservationNormalizer:
    """Actor side: normalise observations with live statistics and record this fragment's delta.

    ``stats`` starts as a copy of the shipped base and is updated with every batch (so it is
    base merged with delta); ``delta`` holds only this fragment's data and is what the actor
    returns (``normalizer.delta.moments()``). Normalise the final observation of a truncated
    episode (for its bootstrap value) with ``update=False``: it is not a new sample.
    """

    def __init__(self, obs_shape: tuple[int, ...], base: RunningMeanStd | Moments | None = None,
                 clip: float = 10.0, epsilon: float = EPSILON):
        self.stats = _start_from(base, obs_shape)
        self.delta = RunningMeanStd(tuple(obs_shape))
        self.clip = clip
        self.epsilon = epsilon

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        """Normalised float32 observations; with update, the raw batch is first added to the stats."""
        if update:
            self.stats.update(obs)
            self.delta.update(obs)
        return self.stats.normalize(obs, self.clip, self.epsilon)


class RewardScaler:
    """Reward scaling as in SB3's VecNormalize (and gymnasium's NormalizeReward).

    Per env a discounted return G <- gamma * G + r is kept; its running variance is tracked;
    rewards are divided by sqrt(var + epsilon) (no mean subtraction) and clipped. G restarts
    at 0 after a step that ended the episode (terminated or truncated). The return statistics
    (``stats`` live, ``delta`` this fragment's) are merged across actors exactly like the
    observation statistics; the per-env returns G are the actor's own and are not shipped.
    """

    def __init__(self, num_envs: int, gamma: float = 0.99, base: RunningMeanStd | Moments | None = None,
                 clip: float = 10.0, epsilon: float = EPSILON, returns: np.ndarray | None = None):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        # G of episodes continued from an earlier fragment (models/envs/snapshot.py), else 0
        self.returns = (np.zeros(num_envs, dtype=np.float64) if returns is None
                        else np.array(returns, dtype=np.float64).reshape(num_envs))
        self.stats = _start_from(base, ())
        self.delta = RunningMeanStd(())

    def __call__(self, rewards: np.ndarray, dones: np.ndarray, update: bool = True) -> np.ndarray:
        """Scale one step's rewards (shape (num_envs,)); dones = terminated | truncated of this step."""
        if update and self.returns.shape == (1,):  # one env per actor: the same bits in Python floats
            return self._scale_one(float(rewards[0]), bool(dones[0]))
        rewards = np.asarray(rewards, dtype=np.float64)
        self.returns = self.returns * self.gamma + rewards
        if update:
            self.stats.update(self.returns)
            self.delta.update(self.returns)
        scaled = np.minimum(np.maximum(rewards / np.sqrt(self.stats.var + self.epsilon), -self.clip), self.clip)
        self.returns[np.asarray(dones, dtype=bool)] = 0.0
        return scaled.astype(np.float32)

    def _scale_one(self, reward: float, done: bool) -> np.ndarray:
        g = float(self.returns[0]) * self.gamma + reward
        self.stats.update_one(g)
        self.delta.update_one(g)
        scaled = min(max(reward / math.sqrt(float(self.stats.var) + self.epsilon), -self.clip), self.clip)
        self.returns[0] = 0.0 if done else g
        return np.array([scaled], dtype=np.float32)


def shipped_stats(obs: RunningMeanStd | None, reward: RunningMeanStd | None, gamma: float) -> NormStats | None:
    """A learner's statistics as actors receive them with the weights (None: no normalising)."""
    if obs is None and reward is None:
        return None
    return NormStats(obs=obs.moments() if obs else None, reward=reward.moments() if reward else None,
                     gamma=gamma)


def merged_with_deltas(base: RunningMeanStd | None,
                       deltas: Iterable[Moments | None]) -> RunningMeanStd | None:
    """`merge_base_and_deltas` for an optional normaliser (None stays None: not normalising)."""
    return None if base is None else merge_base_and_deltas(base, deltas)


@dataclass(frozen=True)
class NormLayout:
    """NormStats as one flat float64 vector of a fixed size, for shared memory or raw bytes.

    Layout: [obs count, obs mean (d), obs var (d)] if obs, then [reward count, mean, var] if
    reward. float64 keeps the merge exact (float32 would round counts and moments).
    """

    obs_shape: tuple[int, ...] | None
    """Shape of the observation statistics; None: observations are not normalised."""
    reward: bool
    """Rewards are scaled."""
    gamma: float

    @property
    def _obs_size(self) -> int:
        return 0 if self.obs_shape is None else 1 + 2 * int(np.prod(self.obs_shape))

    @property
    def size(self) -> int:
        return self._obs_size + (3 if self.reward else 0)

    def pack(self, stats: NormStats) -> np.ndarray:
        parts = []
        for moments, wanted in ((stats.obs, self.obs_shape is not None), (stats.reward, self.reward)):
            if (moments is not None) != wanted:
                raise ValueError("NormStats do not match the layout (obs or reward statistics missing or extra)")
            if moments is not None:
                parts += [[moments.count], np.ravel(moments.mean), np.ravel(moments.var)]
        out = np.concatenate(parts).astype(np.float64) if parts else np.empty(0, dtype=np.float64)
        if out.size != self.size:
            raise ValueError(f"NormStats pack to {out.size} values, the layout has {self.size}")
        return out

    def unpack(self, vector: np.ndarray) -> NormStats:
        v = np.asarray(vector, dtype=np.float64)
        if v.size != self.size:
            raise ValueError(f"norm vector has {v.size} values, the layout {self.size}")
        obs = reward = None
        if self.obs_shape is not None:
            d = int(np.prod(self.obs_shape))
            obs = Moments(float(v[0]), v[1:1 + d].reshape(self.obs_shape).copy(),
                          v[1 + d:1 + 2 * d].reshape(self.obs_shape).copy())
        if self.reward:
            o = self._obs_size
            reward = Moments(float(v[o]), np.array(v[o + 1]), np.array(v[o + 2]))
        return NormStats(obs=obs, reward=reward, gamma=self.gamma)

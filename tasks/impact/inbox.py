"""What both IMPACT actor pools share: fragments arrive on a local queue; actor errors and deaths
are counted, and too many (or any error in an actor's own code) fail the run."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field

import numpy as np

from models.envs.batch import env_spaces
from models.impact.buffer import ImpactFragment
from models.impact.config import ImpactConfig
from models.rl.normalization import NormLayout, NormStats
from tasks.errors import ActorError


def norm_layout(env_id: str, cfg: ImpactConfig) -> NormLayout | None:
    # the env is looked up only when normalising: a bad env id is the actors' error to report
    return cfg.norm_layout(env_spaces(env_id).obs_shape) if cfg.normalizes else None


def packed_norm(layout: NormLayout | None, norm: NormStats | None) -> np.ndarray:
    """The statistics a pool publishes, as its layout's float64 vector (empty: not normalising)."""
    if layout is None:
        return np.empty(0, dtype=np.float64)
    if norm is None:
        raise ValueError("this IMPACT config normalises: publish the learner's norm_state() with the weights")
    return layout.pack(norm)


@dataclass
class PoolCounters:
    """What the pool saw since it started (read by the learner's loop for metrics)."""

    replacements: int = 0
    errors: list[str] = field(default_factory=list)


class FragmentInbox:
    """What both pools share: fragments arrive on a local queue; actor errors and deaths counted."""

    cfg: ImpactConfig
    counters: PoolCounters
    _queue: queue.Queue

    def collect(self, timeout_s: float = 0.0) -> list[ImpactFragment]:
        """Every fragment that has arrived; waits up to timeout_s for the first if none has."""
        out = []
        try:
            out.append(self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait())
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def publish(self, vector: np.ndarray, version: int, norm: NormStats | None = None) -> None:
        """Make `vector` (and `norm`, the learner's normaliser statistics) the newest weights;
        every actor takes both before its next fragment."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> FragmentInbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_health(self, max_replacements: int | None = None) -> None:
        """Raise ActorError if an actor's code raised (a bug: replacing it would only repeat it)
        or workers keep dying (more than max_replacements, default 10 per actor slot)."""
        if self.counters.errors:
            raise ActorError(f"an IMPACT actor failed: {self.counters.errors[0]}")
        limit = 10 * self.cfg.actors if max_replacements is None else max_replacements
        if self.counters.replacements > limit:
            raise ActorError(f"IMPACT actors died {self.counters.replacements} times (limit {limit})")

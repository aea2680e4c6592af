"""IMPACT's circular buffer of fragments, each tagged with the version of the weights that sampled it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from models.rl.rollout import RolloutBatch


@dataclass(frozen=True)
class ImpactFragment:
    """One actor's fragment with the version of the weights that sampled it."""

    batch: RolloutBatch
    behaviour_version: int
    actor_index: int
    actor_generation: int = 0
    """0 for the first process of actor slot i, +1 for every replacement."""


class FragmentBuffer:
    """IMPACT's circular buffer: at most `capacity` fragments, each used at most `max_reuse` times.

    `sample` draws distinct fragments uniformly; a fragment is evicted once used `max_reuse`
    times. `add` on a full buffer overwrites the oldest fragment (counted in `dropped_unused`
    when it was never used). `evicted_uses` records how often each evicted fragment was used.
    """

    def __init__(self, capacity: int, max_reuse: int, rng: np.random.Generator):
        self.capacity, self.max_reuse, self.rng = capacity, max_reuse, rng
        self._entries: deque[list] = deque()  # [fragment, uses]
        self.evicted_uses: list[int] = []
        self.dropped_unused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, fragment: ImpactFragment) -> None:
        if len(self._entries) >= self.capacity:
            _, uses = self._entries.popleft()
            self.evicted_uses.append(uses)
            self.dropped_unused += uses == 0
        self._entries.append([fragment, 0])

    def sample(self, k: int) -> list[ImpactFragment]:
        k = min(k, len(self._entries))
        picked = sorted(self.rng.choice(len(self._entries), size=k, replace=False).tolist())
        out = []
        for i in picked:
            entry = self._entries[i]
            entry[1] += 1
            out.append(entry[0])
        for i in reversed(picked):  # evict the spent ones (highest index first keeps indices valid)
            if self._entries[i][1] >= self.max_reuse:
                self.evicted_uses.append(self._entries[i][1])
                del self._entries[i]
        return out

    def uses(self) -> list[int]:
        """Uses so far of the fragments still in the buffer, oldest first."""
        return [uses for _, uses in self._entries]

"""The cloud clock of an IMPACT run whose actors each have a core of their own: a discrete-event
schedule that lets one machine compute, one fragment at a time, what N always-on actors and a
learner would do side by side (tasks/impact/virtual_pool.py runs it).

Each actor i is free from `next_start[i]` on: a fragment it starts at cloud time s is sampled with
the newest weights the learner had published by s, takes its measured one-core duration d, and
reaches the learner at s + d, when the actor starts its next one. The learner's time advances by
what it measurably spends (steps, orchestration) and, when it must wait for data, jumps to the next
arrival. Causality holds because a fragment is computed only once the learner's clock has passed its
start (so the weights it reads are known), and the learner only takes fragments whose arrival is
behind its clock, every one of which started before it and so has been computed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Generic, TypeVar

W = TypeVar("W")
F = TypeVar("F")


@dataclass(frozen=True)
class Published(Generic[W]):
    at_s: float
    version: int
    weights: W


@dataclass
class CloudSchedule(Generic[W, F]):
    """Cloud times of `actors` actors that boot in `boot_s` each (in parallel) and of one learner."""

    actors: int
    boot_s: float
    learner_s: float = 0.0
    """The learner's cloud clock: the run's cloud time so far."""
    next_start: list[float] = field(default_factory=list)
    _published: list[Published[W]] = field(default_factory=list)
    _in_flight: list[tuple[float, int, F]] = field(default_factory=list)
    _order: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if self.actors < 1 or not (math.isfinite(self.boot_s) and self.boot_s >= 0):
            raise ValueError(f"a cloud schedule needs >= 1 actor and a boot time >= 0, got {self.actors}, {self.boot_s}")
        self.next_start = [self.boot_s] * self.actors

    # -- the learner ------------------------------------------------------------------------
    def learner_spent(self, seconds: float) -> None:
        """The learner worked (or orchestrated) `seconds` on its own core."""
        self.learner_s += max(seconds, 0.0)

    def publish(self, version: int, weights: W) -> None:
        """Weights published now on the learner's clock; actors starting from now on take them."""
        self._published.append(Published(self.learner_s, version, weights))

    def arrived(self) -> list[F]:
        """Fragments that reached the learner by its clock, in arrival order (they must all have
        been computed: call `due_actor` until it is None first)."""
        out = []
        while self._in_flight and self._in_flight[0][0] <= self.learner_s:
            out.append(heapq.heappop(self._in_flight)[2])
        return out

    def next_arrival_s(self) -> float:
        """When the earliest fragment in flight arrives (inf: none in flight)."""
        return self._in_flight[0][0] if self._in_flight else math.inf

    def wait_for_next_arrival(self) -> None:
        """The learner idles until the next arrival (call after `due_actor(until_next_arrival=True)`
        is None, so no fragment yet to compute could arrive before it)."""
        self.learner_s = max(self.learner_s, self.next_arrival_s())

    # -- the actors -------------------------------------------------------------------------
    def due_actor(self, until_next_arrival: bool = False) -> int | None:
        """The actor whose next fragment must be computed now, earliest start first: one starting
        by the learner's clock, or (until_next_arrival, while the learner waits and publishes
        nothing) one starting before the earliest fragment in flight arrives. None: none is due.
        Nothing is due before the first publish (actors poll until there are weights)."""
        if not self._published:
            return None
        i = min(range(self.actors), key=self.next_start.__getitem__)
        start = self.next_start[i]
        horizon = self.next_arrival_s() if until_next_arrival else self.learner_s
        if start <= self.learner_s or (until_next_arrival and start < horizon):
            return i
        return None

    def start(self, actor: int) -> Published[W]:
        """Actor `actor` starts its next fragment: the newest weights published by its start.
        An actor that booted before the first publish starts at it."""
        start = max(self.next_start[actor], self._published[0].at_s)
        self.next_start[actor] = start
        newest = self._published[0]
        for p in self._published:  # in publish order; at most one actor's lag long after pruning
            if p.at_s > start:
                break
            newest = p
        return newest

    def finish(self, actor: int, duration_s: float, fragment: F) -> float:
        """The fragment actor `actor` started took `duration_s` on its core: it arrives then, and
        the actor starts its next at once. Returns its arrival time."""
        arrival = self.next_start[actor] + max(duration_s, 0.0)
        heapq.heappush(self._in_flight, (arrival, next(self._order), fragment))
        self.next_start[actor] = arrival
        self._prune()
        return arrival

    def _prune(self) -> None:
        """Drop weights no actor can start with any more (the newest before the earliest start stays)."""
        earliest = min(self.next_start)
        keep = 0
        for k, p in enumerate(self._published):
            if p.at_s <= earliest:
                keep = k
        del self._published[:keep]

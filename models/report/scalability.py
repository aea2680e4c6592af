"""The scalability figure's numbers (issue 35, point 4): a round's latency on the cloud clock split
into its parts, per actor count, from a run's per-round MLflow metrics. Pure: no Prefect, no MLflow.

The parts add up to the round's cloud time: the mean actor's phases (dispatch, start-up, weight
load, sampling, upload), the wait for the slowest actor beyond the mean one (P_k is the learner
plus the slowest actor), the learner, and the orchestration (the round's API calls, scheduling,
checkpoint and MLflow writes: cloud time minus P_k).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.json_types import JSONObject

ACTOR_PARTS = ("dispatch_s", "startup_s", "weight_load_s", "sampling_s", "upload_s")
PARTS = (*ACTOR_PARTS, "slowest_actor_wait_s", "learner_s", "orchestration_s")
METRICS = tuple(f"time/actor_{p}" for p in ACTOR_PARTS) + ("time/round_s", "time/learner_s", "time/round_cloud_s",
                                                          "time/round_cycle_wall_s")
"""The per-round MLflow metrics a split needs (models/run/metrics.py names)."""


@dataclass(frozen=True)
class LatencyRow:
    """One actor count's mean round, its parts in seconds (PARTS), over the rounds measured."""

    actors: int
    rounds: int
    parts: tuple[float, ...]
    cloud_s: float
    wall_s: float

    def part(self, name: str) -> float:
        return self.parts[PARTS.index(name)]

    def as_dict(self) -> JSONObject:
        return {"actors": self.actors, "rounds": self.rounds, **dict(zip(PARTS, self.parts, strict=True)),
                "round_cloud_s": self.cloud_s, "round_wall_s": self.wall_s}


def latency_row(actors: int, history: Mapping[str, Sequence[float]], skip: int = 1) -> LatencyRow:
    """The mean of rounds skip.. of one run (the first pays the learner's and the pool's start-up)."""
    missing = [m for m in METRICS if m not in history]
    if missing:
        raise ValueError(f"the run has no per-round {missing}")
    rounds = min(len(history[m]) for m in METRICS)
    if rounds <= skip:
        raise ValueError(f"{rounds} rounds: a split needs more than the {skip} skipped")

    def mean(metric: str) -> float:
        values = list(history[metric])[skip:rounds]
        return math.fsum(values) / len(values)

    actor = [mean(f"time/actor_{p}") for p in ACTOR_PARTS]
    round_s, learner, cloud = mean("time/round_s"), mean("time/learner_s"), mean("time/round_cloud_s")
    slowest_wait = max(round_s - learner - math.fsum(actor), 0.0)
    orchestration = max(cloud - round_s, 0.0)
    return LatencyRow(actors, rounds - skip, (*actor, slowest_wait, learner, orchestration), cloud,
                      mean("time/round_cycle_wall_s"))

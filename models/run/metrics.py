"""Per-round time, cost and return figures from actors' own timings (models/rl/timings.py).

Two round times are kept apart and labelled:
- time/round_s (P_k): learner time plus the slowest actor's own duration, i.e. the round as it
  would run with one core per actor;
- time/round_wall_s: what the clock on this machine saw, including any wait for a free core.

Cost is billed by models/billing/cost.py bill_round: cost/round_usd = cost/actors_usd + cost/learner_usd
+ cost/startup_usd exactly; cost/projected_aci_startup_usd is a projection, never billed.
"""

from __future__ import annotations

import math

import numpy as np

from models.billing.cost import PriceTable, RoundBill, bill_round, round_time
from models.rl.rollout import RolloutBatch
from models.rl.timings import OPTIONAL_FIGURES, PHASE_NAMES, ActorPhases


def busy_span(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def mean_return(batches: list[RolloutBatch]) -> float:
    """R_k: mean return of the episodes that actors completed this round (NaN if none did)."""
    returns = [r for b in batches for r in b.episode_returns]
    return float(np.mean(returns)) if returns else math.nan


def actor_billed_s(batches: list[RolloutBatch], failed_billed_s: list[float] | None = None) -> list[float]:
    """Billed seconds of each actor of a round: its duration P^a plus its failed attempts, then
    one entry per actor that failed every attempt."""
    return ([ActorPhases.of(b.timings).duration_s + b.timings.failed_attempts_billed_s for b in batches]
            + list(failed_billed_s or []))


def one_core_per_actor_wall_s(batches: list[RolloutBatch], learner_s: float, wall_s: float) -> float:
    """A round's wall time as it would be with one core per actor (a server cluster's own cores):
    P_k plus the round's orchestration (its wall here outside the actors' busy span and the
    learner), never more than the wall measured here, where actors may wait for a core."""
    timings = [b.timings for b in batches]
    busy = busy_span([(t.started_at, t.sampled_at if t.sent_at is None else t.sent_at) for t in timings])
    p_k = round_time(learner_s, [ActorPhases.of(t).duration_s for t in timings])
    return min(wall_s, p_k + max(wall_s - busy - learner_s, 0.0))


def round_metrics(batches: list[RolloutBatch], learner_s: float, wall_s: float,
                  prices: PriceTable, failed_billed_s: list[float] | None = None, *,
                  learner_device: str, learner_startup_s: float = 0.0,
                  warm_idle_s: float = 0.0, pool_startup_s: float = 0.0,
                  bill: RoundBill | None = None) -> dict[str, float]:
    """Time, cost and sampling figures of one round, with MLflow-style grouped keys.

    failed_billed_s: billed seconds of actors that failed every attempt; retried attempts of
    actors that finished are in their batch's timings. Both are cost, neither is a duration.
    learner_device: what the learner ran on ('cuda' or 'cpu'), and so what it is billed as.
    learner_startup_s: the learner's measured start-up, in the one round that pays it.
    warm_idle_s: idle seconds of kept-warm actors waiting for this round (0 until a backend
    reports them).
    pool_startup_s: the backend's actor start-up outside any actor (pre-warmed worker boots).
    bill: the round's bill when it is not the serverless one (a server cluster's:
    models/billing/cost.py bill_cluster_round).
    """
    failed_billed_s = failed_billed_s or []
    timings = [b.timings for b in batches]
    retried_s = [t.failed_attempts_billed_s for t in timings]
    phases = [ActorPhases.of(t) for t in timings]
    durations = [p.duration_s for p in phases]
    actor_busy = busy_span([(t.started_at, t.sampled_at if t.sent_at is None else t.sent_at)
                            for t in timings])
    steps = sum(b.steps for b in batches)
    episodes = [r for b in batches for r in b.episode_returns]
    out = {
        "rollout/ep_return_mean": mean_return(batches),
        "rollout/episodes": float(len(episodes)),
        "rollout/ep_length_mean": (float(np.mean([n for b in batches for n in b.episode_lengths]))
                                   if episodes else math.nan),
        "rollout/env_steps": float(steps),
        "sched/actors": float(len(batches) + len(failed_billed_s)),
        "rollout/batches": float(len(batches)),
        "time/actor_mean_s": float(np.mean(durations)),
        "time/actor_max_s": float(np.max(durations)),
        "time/round_s": round_time(learner_s, durations),
        "time/round_wall_s": wall_s,
        "time/orchestration_s": max(wall_s - actor_busy - learner_s, 0.0),
        "time/actor_busy_s": actor_busy,
        "rollout/actor_failures": float(len(failed_billed_s)),
        "rollout/actor_retries": float(sum(t.attempts - 1 for t in timings)),
    }
    for key in PHASE_NAMES:
        out[f"time/actor_{key}"] = float(np.mean([getattr(p, key) for p in phases]))
    for key in OPTIONAL_FIGURES:
        values = [float(getattr(t, key)) for t in timings if getattr(t, key) is not None]
        if values:  # reported by some backends only (cold_start: fraction of actors started cold)
            out[f"time/actor_{key}"] = float(np.mean(values))
    if bill is None:
        bill = bill_round(learner_s, learner_device, durations + retried_s + failed_billed_s,
                          [p.startup_s for p in phases], prices, learner_startup_s=learner_startup_s,
                          warm_idle_s=warm_idle_s, pool_startup_s=pool_startup_s,
                          containers_started=len(batches) + len(failed_billed_s)
                          + sum(t.attempts - 1 for t in timings))
    out.update({
        "cost/round_usd": bill.round_usd,
        "cost/actors_usd": bill.actors_usd,
        "cost/learner_usd": bill.learner_usd,
        "cost/startup_usd": bill.startup_usd,
        "cost/warm_idle_usd": bill.warm_idle_usd,
        "cost/projected_aci_startup_usd": bill.projected_aci_startup_usd,
        "cost/learner_on_cuda": float(bill.learner_device == "cuda"),
        "time/learner_startup_s": learner_startup_s,
        "time/pool_startup_s": pool_startup_s,
    })
    sampling = sum(p.sampling_s for p in phases)
    out["perf/actor_steps_per_s"] = steps / sampling if sampling > 0 else math.nan
    return out

"""The budget rule's upper bound on a round's cost: B is never overspent by a round the bound admits.

A round of I actors is started only when its bound fits in what is left of B (round 0 included):

    bound(I) = M * ( actor_s(I) * price_actor + r * units(max(n, n_min)) * price_learner )
               + learner_startup_s * price_learner          (the round that pays the learner's start)

- actor_s(I): seconds billed to I actors. Each is bounded by `a`, the most seconds one actor has
  been billed in any round so far (start-up, weights, sampling, upload and failed attempts
  included). Actors beyond the most any round has had may start cold, so each of those is
  bounded by max(a, the prior cold start-up of the backend + fragment x the prior seconds per env
  step) from the price table's [budget_prior]. Before any round, a = that prior.
- units(n) = (update_epochs + 2) * ceil(n / minibatch_size) for a batch of n = I x fragment
  samples: the gradient steps of the update plus two forward passes over the batch (values for
  GAE, KL after the update). r is the largest of the learner's measured seconds per unit so far
  and a calibration: one minibatch step timed on the learner's own device before round 0.
  Measured rates are applied to at least the smallest batch measured, since below it a fixed
  per-update overhead dominates.
- M = BOUND_MARGIN covers round-to-round variation of measured durations.

The learner's start-up and the boots of the backend's pre-warmed workers are measured before
round 0 and are exact, so they get no margin.
Kept-warm idle seconds (a work pool's warm servers, models/billing/cost.py warm_idle_cost) enter the
bound as the most a round has billed so far, times M; round 0 has no such measure, so with
warm actors its bound does not cover the servers' idle time before it.

A server-cluster round (cluster_round_bound) is billed for its wall time at the cluster's price,
so its bound is M x a bound of that wall time: the most wall seconds a round has been billed so
far, and before any round ceil(I / cores here) waves of prior actors, the learner's bound and
the prior orchestration of a round; plus the cluster's start-up in the round that pays it.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from models.billing.cost import PriceTable

if TYPE_CHECKING:
    import torch

BOUND_MARGIN = 2.0
"""Rounds on this shared 2-core machine vary up to ~2x between rounds under load; quiet-to-loaded
differences (up to 5x, BENCHMARKS.md issue 3) are absorbed by the running maxima."""
FORWARD_PASSES = 2
"""Forward passes over the whole batch besides the gradient steps (models/rl/ppo.py Learner.update:
values in prepare, KL and value fit after the update)."""


@dataclass(frozen=True)
class RunShape:
    """What the bound needs to know about a run; fixed for the run."""

    fragment: int
    update_epochs: int
    minibatch_size: int
    backend: str
    learner_device: str
    learner_s_per_unit_calibrated: float
    """Seconds of one minibatch step on the learner's device, timed before round 0."""
    host_cores: int = 1
    """Cores of this machine: a local pool's actors beyond them wait for a core (cluster wall prior)."""

    def units(self, samples: int) -> int:
        """Minibatch-step equivalents of an update on `samples` samples."""
        return (self.update_epochs + FORWARD_PASSES) * max(math.ceil(samples / self.minibatch_size), 1)

    def prior_actor_s(self, prices: PriceTable) -> float:
        """A cold actor before anything was measured: prior start-up + fragment x prior step."""
        prior = prices.prior
        return prior.actor_startup_s(self.backend) + self.fragment * prior.actor_step_s


@dataclass
class Measured:
    """The running maxima the bound uses, updated after every round (kept in checkpoints)."""

    actor_s: float = 0.0
    """Most seconds one actor was billed in a round (failed attempts included)."""
    learner_s_per_unit: float = 0.0
    min_batch: int = 0
    """Smallest batch (samples) the learner has updated on; 0: none yet."""
    max_actors: int = 0
    """Most actors a round has had."""
    warm_idle_s: float = 0.0
    """Most idle seconds of kept-warm actors billed in a round."""
    rounds: int = 0
    wall_s: float = 0.0
    """Most wall seconds a server-cluster round was billed."""

    def observe(self, actor_billed_s: list[float], learner_s: float, samples: int, shape: RunShape,
                warm_idle_s: float = 0.0, wall_s: float = 0.0) -> None:
        self.warm_idle_s = max(self.warm_idle_s, warm_idle_s)
        self.wall_s = max(self.wall_s, wall_s)
        if actor_billed_s:
            self.actor_s = max(self.actor_s, max(actor_billed_s))
        self.learner_s_per_unit = max(self.learner_s_per_unit, learner_s / shape.units(samples))
        self.min_batch = samples if self.min_batch == 0 else min(self.min_batch, samples)
        self.max_actors = max(self.max_actors, len(actor_billed_s))
        self.rounds += 1


@dataclass(frozen=True)
class RoundBound:
    """An upper bound of one round's cost, in the bill's parts (models/billing/cost.py RoundBill)."""

    actors: int
    actors_usd: float
    learner_usd: float
    startup_usd: float
    """The learner's start-up and the backend's pre-warm boots, when this round pays them."""

    @property
    def total_usd(self) -> float:
        return self.actors_usd + self.learner_usd + self.startup_usd


def round_bound(actors: int, shape: RunShape, measured: Measured, prices: PriceTable,
                learner_startup_s: float = 0.0, pool_startup_s: float = 0.0,
                learner_resident: bool = False) -> RoundBound:
    """The bound of the module docstring for a round of `actors` actors; pool_startup_s: the
    backend's measured start-up (pre-warmed worker boots) this round pays, exact like the learner's.
    learner_resident: the learner is billed for the whole round (its slowest actor, its update and
    the round's orchestration, the prior's), not for its update alone."""
    prior_actor_s = shape.prior_actor_s(prices)
    if measured.rounds == 0:
        actor_s = actors * prior_actor_s
    else:
        known = min(actors, measured.max_actors)
        actor_s = known * measured.actor_s + (actors - known) * max(measured.actor_s, prior_actor_s)
    learner_s = _learner_s_bound(actors, shape, measured)
    if learner_resident:
        slowest = max(measured.actor_s, prior_actor_s) if measured.rounds else prior_actor_s
        learner_s += slowest + prices.prior.round_overhead_s
    learner_price = prices.learner_per_second(shape.learner_device)
    return RoundBound(actors=actors,
                      actors_usd=BOUND_MARGIN * (actor_s + measured.warm_idle_s) * prices.actor_per_second,
                      learner_usd=BOUND_MARGIN * learner_s * learner_price,
                      startup_usd=learner_startup_s * learner_price
                      + pool_startup_s * prices.actor_per_second)


def _learner_s_bound(actors: int, shape: RunShape, measured: Measured) -> float:
    """The learner's seconds for a batch of `actors` fragments, without the margin."""
    rate = max(measured.learner_s_per_unit, shape.learner_s_per_unit_calibrated)
    return rate * shape.units(max(actors * shape.fragment, measured.min_batch))


def cluster_round_bound(actors: int, shape: RunShape, measured: Measured, prices: PriceTable,
                        learner_device: str, startup_due: bool = False) -> RoundBound:
    """A server-cluster round's bound (module docstring), in the parts of its bill
    (models/billing/cost.py bill_cluster_round); startup_due: this round pays the cluster's start-up."""
    if measured.rounds == 0 or measured.wall_s <= 0:
        waves = math.ceil(actors / max(shape.host_cores, 1))
        wall_s = (waves * shape.prior_actor_s(prices) + _learner_s_bound(actors, shape, measured)
                  + prices.prior.round_overhead_s)
    else:
        wall_s = measured.wall_s
    return RoundBound(actors=actors,
                      actors_usd=BOUND_MARGIN * wall_s * prices.server_actors_per_s,
                      learner_usd=BOUND_MARGIN * wall_s * prices.server_learner_per_second(learner_device),
                      startup_usd=(prices.server_startup_s * prices.server_cluster_per_second(learner_device)
                                   if startup_due else 0.0))


def calibrate_learner(policy: torch.nn.Module, obs_shape: tuple[int, ...], obs_dtype, discrete: bool,
                      action_dim: int, minibatch_size: int, repeats: int = 3) -> float:
    """Seconds of one PPO minibatch step (forward, backward, Adam) on a copy of the policy, on
    its device: the median of `repeats`. Uses no random numbers and leaves the policy untouched,
    so a run's results do not depend on it."""
    import torch  # here: the budget's arithmetic loads without it

    model = copy.deepcopy(policy)
    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0)
    dtype = torch.uint8 if str(obs_dtype) == "uint8" else torch.float32
    obs = torch.zeros((minibatch_size, *obs_shape), dtype=dtype, device=device)
    actions = (torch.zeros(minibatch_size, dtype=torch.int64, device=device) if discrete
               else torch.zeros((minibatch_size, action_dim), dtype=torch.float32, device=device))
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        logp, entropy, values = model.evaluate(obs, actions)
        loss = -logp.mean() - entropy.mean() + values.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)

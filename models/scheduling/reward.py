"""The learned scheduler's reward: r_k = -beta * P_k, plus (max_k R_k - J) at the last decision
when the run missed its target J or ran out of budget. P_k can be read on the cloud clock
instead (P_k plus the round's measured orchestration: what a schedule of many actors pays in
dispatch and API calls; issue 35).

Beyond the paper, a round's cost C_k (USD) can enter too, priced in seconds:
r_k = -beta * (P_k + cost_weight * C_k). cost_weight 0 (the default) is the paper's reward; a
positive one says how many seconds of training time a dollar is worth, so that a schedule that
saves cost at some time can win.

Pure numpy. The flows (flows/scheduler_flows.py) compute an episode's rewards from the `train`
summary with `rewards_from_summary` and hand them to the agent (models/scheduling/agent.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from models.errors import ConfigError
from models.run.records import STOP_BUDGET, RunSummary

REWARD_CLOCKS = ("p_k", "cloud")
"""A round's time in the reward: the paper's P_k, or the cloud clock (P_k + orchestration)."""


def terminal_penalty(best_return: float, target_return: float) -> float:
    """max_k R_k - J. With no finished episode at all (best is NaN or -inf) the return is taken
    as 0, i.e. -|J|."""
    best = float(best_return)
    return best - target_return if math.isfinite(best) else -abs(target_return)


def episode_rewards(round_times: Sequence[float], decisions: int, *, target_reached: bool,
                    budget_spent: bool, best_return: float, target_return: float,
                    beta: float = 0.1, round_costs: Sequence[float] | None = None,
                    cost_weight: float = 0.0) -> np.ndarray:
    """Per-decision rewards of one scheduler episode.

    r_k = -beta * (P_k + cost_weight * C_k) for every round that ran (C_k from round_costs,
    needed when cost_weight > 0). A decision whose round was never started (the budget check
    refused it: then decisions == len(round_times) + 1) earns 0. The last decision also gets
    (max_k R_k - J) when J was not reached or the budget ran out.
    """
    if not 0 < beta < 1:
        raise ConfigError(f"beta must be in (0, 1), got {beta}")
    if not (cost_weight >= 0 and math.isfinite(cost_weight)):
        raise ConfigError(f"cost_weight must be finite and >= 0, got {cost_weight}")
    if decisions not in (len(round_times), len(round_times) + 1):
        raise ValueError(f"{decisions} decisions cannot match {len(round_times)} rounds")
    if cost_weight and (round_costs is None or len(round_costs) != len(round_times)):
        raise ValueError("a cost weight needs one cost per round")
    costs = round_costs if cost_weight else [0.0] * len(round_times)
    rewards = np.zeros(decisions, dtype=np.float64)
    for k, (p, c) in enumerate(zip(round_times, costs, strict=True)):
        rewards[k] = -beta * (float(p) + cost_weight * float(c))
    if decisions and (not target_reached or budget_spent):
        rewards[-1] += terminal_penalty(best_return, target_return)
    return rewards


def rewards_from_summary(summary: RunSummary, beta: float = 0.1, cost_weight: float = 0.0,
                         clock: str = "p_k") -> np.ndarray:
    """The rewards of one episode from a `train` summary whose scheduler was learned.

    Uses the summary's per-round history (the round's time: time/round_s = P_k, or with clock
    "cloud" time/round_cloud_s; cost/round_usd = C_k), stop reason, best return, and the
    scheduler trace (its decisions and the run's J).
    """
    trace = summary.scheduler_trace
    if trace is None:
        raise ValueError("the run's summary has no learned-scheduler trace")
    if clock not in REWARD_CLOCKS:
        raise ConfigError(f"reward clock must be one of {REWARD_CLOCKS}, got {clock!r}")
    times = [h.round_s if clock == "p_k" else h.cloud_s for h in summary.history]
    if not all(math.isfinite(t) for t in times):
        raise ValueError(f"the run's history lacks its rounds' {clock} times")
    return episode_rewards(times, len(trace.steps),
                           target_reached=summary.target_reached,
                           budget_spent=summary.stop_reason == STOP_BUDGET,
                           best_return=summary.best_return,
                           target_return=trace.target_return, beta=beta,
                           round_costs=[h.cost_usd for h in summary.history], cost_weight=cost_weight)

"""The warning a user gets when the Prefect server, not the training, sets the pace (issue 34).

A round takes 0.14-0.2 s of orchestration on the project's temporary API or a nearby Prefect
server (SQLite or PostgreSQL, BENCHMARKS.md "Which Prefect server"); a distant server adds its
round trips, an overloaded one its queue (a stock SQLite server took ~2 s a round until the
client retried its busy answers quickly: flows/prefect_patches/quick_retry.py). The client
cannot tell a server's state from outside, so the warning is measured: the first round after the warm-up whose
orchestration is both long and most of the round names the faster choices, once per run.
"""

from __future__ import annotations

import math

SLOW_ROUND_ORCHESTRATION_S = 0.4
"""Issue 34's bar for a round's orchestration (stock SQLite server, 8 actors)."""

CHECKED_ROUND = 1
"""Round 0 pays one-off costs (imports, the first subflow, the actor pool); round 1 is the first typical one."""


def round_orchestration_s(cycle_wall_s: float, actor_busy_s: float, learner_s: float) -> float:
    """A round's whole orchestration: its cycle (subflow and what surrounds it) less the actors' busy
    time and the learner's update."""
    return max(cycle_wall_s - actor_busy_s - learner_s, 0.0)


def slow_server_warning(round_index: int, orchestration_s: float, cycle_wall_s: float,
                        api_url: str | None) -> str | None:
    """The one-line warning for round CHECKED_ROUND when orchestration exceeds the bar and half the
    round; None otherwise (and for every other round, so that it is said once)."""
    if round_index != CHECKED_ROUND or not (math.isfinite(orchestration_s) and cycle_wall_s > 0):
        return None
    if orchestration_s < SLOW_ROUND_ORCHESTRATION_S or orchestration_s < 0.5 * cycle_wall_s:
        return None
    return (f"orchestration took {orchestration_s:.2f} s of round {round_index}'s {cycle_wall_s:.2f} s: the Prefect "
            f"server at {api_url or 'PREFECT_API_URL'} sets the pace (a distant server adds its round trips to "
            "each API call, a busy one its queue); faster: the project's temporary API (unset PREFECT_API_URL) "
            "or a nearby Prefect server on PostgreSQL (README, 'Which Prefect server')")

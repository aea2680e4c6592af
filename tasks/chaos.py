"""Fault injection for the crash-consistency tests: kill the training at a named point.

Set MINIONSRL_CHAOS_AT="<point>:<round>" (e.g. "saved:2") and the training dies at that point
of that round: with a ":kill" suffix by SIGKILL (as a real crash), otherwise by raising
SimulatedCrash (the same state on disk, and a test can go on in the same process). Unset,
`chaos_point` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal

CHAOS_ENV = "MINIONSRL_CHAOS_AT"

# The points, in the order a round passes them (flows/train.py, tasks/rounds.py).
POINTS = ("round_start", "actor_returned", "update_done", "round_work", "recorded", "saved", "logged")


class SimulatedCrash(RuntimeError):
    """The training process 'died' here (a chaos test asked for it)."""


def chaos_point(name: str, round_index: int) -> None:
    wanted = os.environ.get(CHAOS_ENV)
    if not wanted:
        return
    point, _, rest = wanted.partition(":")
    at_round, _, how = rest.partition(":")
    if point == name and at_round == str(round_index):
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(f"chaos: killed at {name} of round {round_index}")

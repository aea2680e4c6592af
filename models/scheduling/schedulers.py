"""Actor-count schedulers: the Scheduler protocol, the heuristic schedulers and make_scheduler.

A scheduler maps the 7-number RoundState (models/scheduling/features.py, re-exported here) to
I_k in [1, I_max]. The heuristics (fixed, max, adapt, increase, decrease, switch) live here; the learned
scheduler (models/scheduling/learned.py) implements the same protocol. Every scheduler plugs
into the one round loop (flows/session.py).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from models.errors import ConfigError
from models.json_types import StateDict
from models.scheduling.features import RoundState
from models.scheduling.learned_spec import is_learned_spec, parse_learned_spec

__all__ = ["Adapt", "Fixed", "Max", "Ramp", "RoundState", "Scheduler", "Switch", "clip_actors", "make_scheduler"]


class Scheduler(Protocol):
    name: str

    def choose(self, state: RoundState) -> int:
        """Actors for the coming round, in [1, i_max]."""

    def state_dict(self) -> StateDict:
        """What a checkpoint must hold to resume the scheduler exactly."""

    def load_state_dict(self, state: StateDict) -> None: ...


def clip_actors(n: float, i_max: int) -> int:
    return int(min(max(round(n), 1), i_max))


class _Stateless:
    name = "stateless"

    def state_dict(self) -> StateDict:
        return {}

    def load_state_dict(self, state: StateDict) -> None:
        pass


class Fixed(_Stateless):
    """Fixed(n): n actors every round."""

    def __init__(self, n: int, i_max: int):
        if not 1 <= n <= i_max:
            raise ConfigError(f"fixed:{n} needs 1 <= n <= i_max ({i_max})")
        self.n, self.name = n, f"fixed{n}"

    def choose(self, state: RoundState) -> int:
        return self.n


class Max(Fixed):
    """MinionsRL-Max: I_max actors every round."""

    def __init__(self, i_max: int):
        super().__init__(i_max, i_max)
        self.name = "max"


class Adapt:
    """MinionsRL-Adapt: I_k = clip(round(Jhat_k / J * I_max), 1, I_max).

    Jhat_k is the moving average of the last `window` rounds' mean returns; before any round
    has returned, Jhat is 0 and the clip gives one actor.
    """

    name = "adapt"

    def __init__(self, target_return: float, i_max: int, window: int = 5):
        if target_return <= 0:
            raise ConfigError("the adapt scheduler needs a positive target_return")
        self.target, self.i_max, self.window = target_return, i_max, window
        self.returns: deque[float] = deque(maxlen=window)

    def choose(self, state: RoundState) -> int:
        if state.round_index > 0 and math.isfinite(state.last_return):
            self.returns.append(state.last_return)
        j_hat = sum(self.returns) / len(self.returns) if self.returns else 0.0
        return clip_actors(j_hat / self.target * self.i_max, self.i_max)

    def state_dict(self) -> StateDict:
        return {"returns": list(self.returns)}

    def load_state_dict(self, state: StateDict) -> None:
        self.returns = deque(state["returns"], maxlen=self.window)


class Ramp(_Stateless):
    """Increase / Decrease: step the count by `step` every `every` rounds.

    Centred on n so that over `rounds` rounds the total actor budget equals Fixed(n)'s
    (the CartPole-v1 motivation experiment); past them it keeps stepping; counts are clipped to
    [1, i_max].
    """

    def __init__(self, n: int, i_max: int, rounds: int, direction: int, step: int = 2,
                 every: int = 10):
        if not 1 <= n <= i_max:
            raise ConfigError(f"ramp around n={n} needs 1 <= n <= i_max ({i_max})")
        blocks = max(math.ceil(rounds / every), 1)
        self.start = n - direction * step * (blocks - 1) / 2
        self.direction, self.step, self.every, self.i_max = direction, step, every, i_max
        self.name = f"{'increase' if direction > 0 else 'decrease'}{n}"
        low, high = self.start, self.start + direction * step * (blocks - 1)
        if min(low, high) < 1 or max(low, high) > i_max:
            raise ConfigError(
                f"{self.name} over {rounds} rounds (step {step} every {every}) would leave "
                f"[1, {i_max}]: use a smaller step or a larger n")

    def choose(self, state: RoundState) -> int:
        block = state.round_index // self.every
        return clip_actors(self.start + self.direction * self.step * block, self.i_max)


class Switch:
    """Switch(before, after, percent): `before` actors until a round's mean return reaches
    `percent`% of J, then `after` for the rest of the run. The simplest schedule that depends on
    training progress: issue 13 asks whether one beats the best constant count."""

    def __init__(self, before: int, after: int, percent: int, target_return: float, i_max: int):
        if not (1 <= before <= i_max and 1 <= after <= i_max):
            raise ConfigError(f"switch:{before}:{after}:{percent} needs both counts in [1, i_max ({i_max})]")
        if not 0 < percent <= 100:
            raise ConfigError(f"switch:{before}:{after}:{percent}: the percent of J must be in (0, 100]")
        if target_return <= 0:
            raise ConfigError("the switch scheduler needs a positive target_return")
        self.before, self.after, self.threshold = before, after, percent / 100 * target_return
        self.name = f"switch{before}to{after}at{percent}"
        self.switched = False

    def choose(self, state: RoundState) -> int:
        if state.round_index > 0 and math.isfinite(state.last_return) and state.last_return >= self.threshold:
            self.switched = True  # for good: one lucky round is enough, as with R_k and J
        return self.after if self.switched else self.before

    def state_dict(self) -> StateDict:
        return {"switched": self.switched}

    def load_state_dict(self, state: StateDict) -> None:
        self.switched = bool(state["switched"])


SCHEDULER_SPECS = ("fixed:N, max, adapt, increase:N[:step[:every[:rounds]]], decrease:N[:step[:every[:rounds]]], "
         "switch:before:after:percent_of_J or learned[:<path or MLflow URI>][:sample]")


def make_scheduler(spec: str, i_max: int, max_rounds: int, target_return: float,
                   budget_usd: float | None = None, seed: int = 0) -> Scheduler:
    """Parse 'fixed:N', 'max', 'adapt', 'increase:N[:step[:every[:rounds]]]', 'decrease:...' (a
    ramp with Fixed(N)'s budget over `rounds` rounds, default max_rounds), 'switch:before:after:percent' (of J).

    budget_usd and seed are for schedulers that need them (the learned scheduler).
    'learned[:<path>][:sample]' loads a trained scheduler (models/scheduling/learned.py); without a
    path, the packaged CartPole-v1 one. Its path keeps its case and colons. An MLflow URI
    ('learned:runs:/<id>/scheduler/scheduler.pt') is downloaded by the `train` flow from its own
    tracking store before the scheduler is built (flows/run_setup.py localise_scheduler_spec).
    """
    if is_learned_spec(spec):
        from models.scheduling.learned import make_learned_scheduler  # torch: only for a learned one

        return make_learned_scheduler(parse_learned_spec(spec), i_max, max_rounds, target_return,
                                      budget_usd, seed)
    name, *args = spec.strip().lower().split(":")
    try:
        numbers = [int(a) for a in args]
    except ValueError:
        raise ConfigError(f"scheduler {spec!r}: arguments must be integers") from None
    if name == "fixed" and len(numbers) == 1:
        return Fixed(numbers[0], i_max)
    if name == "max" and not numbers:
        return Max(i_max)
    if name == "adapt" and not numbers:
        return Adapt(target_return, i_max)
    if name in ("increase", "decrease") and 1 <= len(numbers) <= 4:
        direction = 1 if name == "increase" else -1
        if len(numbers) == 4 and numbers[3] < 1:
            raise ConfigError(f"scheduler {spec!r}: the ramp's rounds must be >= 1")
        rounds = numbers[3] if len(numbers) == 4 else max_rounds
        return Ramp(numbers[0], i_max, rounds, direction, *numbers[1:3])
    if name == "switch" and len(numbers) == 3:
        return Switch(*numbers, target_return=target_return, i_max=i_max)
    raise ConfigError(f"unknown scheduler {spec!r}; use {SCHEDULER_SPECS}")

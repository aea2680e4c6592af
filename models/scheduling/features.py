"""What a scheduler observes: the raw RoundState and the learned scheduler's 7 bounded features.

`RoundState` is what every scheduler sees each round (models/scheduling/schedulers.py, the heuristics;
models/scheduling/learned.py, the learned one). `StateNormaliser` turns it into the features the
scheduler agent's networks read (models/scheduling/agent.py). Pure numpy: no torch, no Prefect.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

import numpy as np

from models.json_types import StateDict


@dataclass(frozen=True)
class RoundState:
    """s_k: what a scheduler knows before choosing round k's actors, raw (unnormalised)."""

    round_index: int
    last_loss: float
    last_return: float
    policy_kl: float
    last_learner_s: float
    last_actor_s: float
    budget_left_usd: float

    def as_tuple(self) -> tuple[float, ...]:
        return tuple(float(x) for x in astuple(self))


FEATURES = ("round_frac", "loss", "return_progress", "policy_kl", "learner_time", "actor_time",
            "budget_frac")
"""The 7 features, in order; each is bounded whatever the raw number (NaN, +-inf, 1e300)."""


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _squash(x: float, squash) -> float:
    """squash(x) for finite x; 0 for NaN; +-1 for +-inf (the limits of every squash used here)."""
    x = float(x)
    if math.isnan(x):
        return 0.0
    if math.isinf(x):
        return math.copysign(1.0, x)
    return float(squash(x))


def symlog(x: float) -> float:
    """sign(x) * log(1 + |x|): keeps small values linear and large ones readable."""
    return math.copysign(math.log1p(abs(x)), x)


@dataclass(frozen=True)
class SchedulerDecision:
    """One decision of a learned scheduler: what it saw (normalised s_k) and what it chose."""

    round: int
    obs: tuple[float, ...]
    action: int
    """The categorical action a; the actor count is a + 1."""
    actors: int
    logp: float
    value: float


@dataclass(frozen=True)
class SchedulerTrace:
    """A learned scheduler's decisions over one run (a scheduler episode) and the run's J."""

    mode: str
    source: str | None
    i_max: int
    target_return: float
    max_rounds: int
    budget_usd: float | None
    features: tuple[str, ...]
    steps: tuple[SchedulerDecision, ...]


@dataclass(frozen=True)
class NormaliserConfig:
    """Constants of the normalisation; stored in every checkpoint so that it is never guessed."""

    loss_scale: float = 3.0
    """loss feature = tanh(symlog(L) / loss_scale): |L| = 20 gives 0.76."""
    kl_ref: float = 0.02
    """KL feature = tanh(KL / kl_ref): a typical PPO step moves the policy by about 0.01-0.02."""
    time_scale: float = 2.0
    """time features = tanh(ln(t / t_ref) / time_scale): 0 at the reference, +-0.46 at e^{+-1}."""
    progress_low: float = -1.0
    progress_high: float = 1.5
    """return progress is clipped to [progress_low, progress_high]."""


class StateNormaliser:
    """Raw RoundState -> 7 features in [-1, 1.5], the same meaning on every workload.

    Workload references (J, K, B) come from the run, not the checkpoint, so a scheduler trained
    on one task reads another task's state on the same scale (this is what transfer needs).
    Per-episode references (the first finite return and the first round's times) are kept
    here and reset with `reset()`; they are part of `state_dict()`.

    1. round_frac      k / K, clipped to [0, 1].
    2. loss            tanh(symlog(L_{k-1}) / loss_scale); NaN -> 0.
    3. return_progress (R_{k-1} - R_ref) / (J - R_ref), R_ref the first finite mean return of
                       this run: 0 at the start, 1 at the target, clipped to
                       [progress_low, progress_high]. A round with no finished episode (NaN)
                       keeps the last known progress; 0 before any. If R_ref >= J, 1.
    4. policy_kl       tanh(max(KL, 0) / kl_ref); NaN -> 0.
    5. learner_time    tanh(ln(P^l_{k-1} / P^l_ref) / time_scale), P^l_ref the first positive
                       learner time of this run: the learner's time relative to its first round
                       (scale-free across machines and workloads); 0 when unknown or <= 0.
    6. actor_time      the same for the mean actor time P^a_{k-1}.
    7. budget_frac     b_k / B clipped to [0, 1]; 1 when B is unset or infinite, or b_k is NaN.
    """

    def __init__(self, target_return: float, max_rounds: int, budget_usd: float | None,
                 config: NormaliserConfig | None = None):
        self.target_return = float(target_return)
        self.max_rounds = max(int(max_rounds), 1)
        self.budget_usd = budget_usd
        self.config = config or NormaliserConfig()
        self.reset()

    def reset(self) -> None:
        self.return_ref: float | None = None
        self.learner_ref: float | None = None
        self.actor_ref: float | None = None
        self.progress = 0.0

    def __call__(self, state: RoundState) -> np.ndarray:
        c = self.config
        k = _finite(state.round_index)
        round_frac = 0.0 if k is None else min(max(k / self.max_rounds, 0.0), 1.0)

        loss_f = _squash(state.last_loss, lambda x: math.tanh(symlog(x) / c.loss_scale))

        ret = _finite(state.last_return)
        if ret is not None:
            if self.return_ref is None:
                self.return_ref = ret
            gap = self.target_return - self.return_ref
            if gap > 0:
                progress = (ret - self.return_ref) / gap  # NaN only for inf/inf: read as 0
                self.progress = 0.0 if math.isnan(progress) else min(max(progress, c.progress_low),
                                                                      c.progress_high)
            else:
                self.progress = 1.0
        elif not math.isnan(state.last_return):  # +-inf: as far as the clip allows
            self.progress = c.progress_high if state.last_return > 0 else c.progress_low

        kl_f = _squash(max(state.policy_kl, 0.0), lambda x: math.tanh(x / c.kl_ref))

        learner_f, self.learner_ref = self._time(state.last_learner_s, self.learner_ref)
        actor_f, self.actor_ref = self._time(state.last_actor_s, self.actor_ref)

        budget = self.budget_usd
        if budget is None or not math.isfinite(budget) or budget <= 0 or math.isnan(state.budget_left_usd):
            budget_f = 1.0
        else:
            budget_f = min(max(state.budget_left_usd / budget, 0.0), 1.0)

        out = np.array([round_frac, loss_f, self.progress, kl_f, learner_f, actor_f, budget_f],
                       dtype=np.float32)
        return np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)

    def _time(self, t: float, ref: float | None) -> tuple[float, float | None]:
        if math.isnan(t) or t <= 0:
            return 0.0, ref
        if math.isinf(t):
            return 1.0, ref
        if ref is None:
            ref = t
        return math.tanh((math.log(t) - math.log(ref)) / self.config.time_scale), ref

    def state_dict(self) -> StateDict:
        return {"return_ref": self.return_ref, "learner_ref": self.learner_ref,
                "actor_ref": self.actor_ref, "progress": self.progress}

    def load_state_dict(self, state: StateDict) -> None:
        for key in ("return_ref", "learner_ref", "actor_ref", "progress"):
            setattr(self, key, state[key])

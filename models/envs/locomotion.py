"""What a MuJoCo body did in an episode: how far it moved forward, read from the env's info dicts.

A return alone cannot tell locomotion from standing still: Hopper-v5 pays 1 per healthy step,
so a policy that stands for 1000 steps scores about 1000 while moving nowhere. Every gymnasium
MuJoCo v5 locomotion env reports the torso's x position (in the info of reset() and of every
step) and the forward-reward term of each step; this module knows which keys those are.

Only the v5 ids are listed: the v4 envs give no position in the reset info, and Hopper-v4 and
Walker2d-v4 have no forward-reward key. Envs not listed (CartPole, Atari, ...) have no probe, and
their evaluations report no motion.

Forward reward is forward_reward_weight * x_velocity per step, so its sum times the step's dt
over the weight is the displacement (exactly for Hopper, Walker2d, HalfCheetah, whose position
and velocity are the same coordinate; Ant, Humanoid and Swimmer measure the velocity at another
point of the body, so the two figures differ a little).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LocomotionProbe:
    """The info keys that say how far an env's body moved forward."""

    position_key: str = "x_position"
    """The torso's x position (metres), in the info of reset() and of every step."""
    forward_reward_key: str = "reward_forward"
    """The step's forward-reward term (forward_reward_weight * x velocity)."""

    def start(self, reset_info: Mapping[str, Any]) -> MotionTracker:
        """Follow one episode that began with this reset info."""
        return MotionTracker(self, float(reset_info[self.position_key]))


# gymnasium 1.x, gymnasium/envs/mujoco/*_v5.py: every v5 locomotion env uses the same keys.
LOCOMOTION_PROBES: dict[str, LocomotionProbe] = {
    env_id: LocomotionProbe()
    for env_id in ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5", "Swimmer-v5")
}


def probe_for(env_id: str) -> LocomotionProbe | None:
    """The env's probe, or None when the env does not move a body forward (or is not listed)."""
    return LOCOMOTION_PROBES.get(env_id)


@dataclass(frozen=True)
class EpisodeMotion:
    """How far one episode's body moved forward."""

    forward_displacement: float
    """x position at the episode's end minus at its start (metres; negative: moved back)."""
    forward_reward_sum: float
    """The sum of the env's forward-reward term over the episode."""


class MotionTracker:
    """Accumulates one episode's motion from the info of each step."""

    def __init__(self, probe: LocomotionProbe, start_x: float):
        self.probe, self.start_x = probe, start_x
        self.x, self.forward_reward_sum = start_x, 0.0

    def step(self, info: Mapping[str, Any]) -> None:
        self.x = float(info[self.probe.position_key])
        self.forward_reward_sum += float(info[self.probe.forward_reward_key])

    def finish(self) -> EpisodeMotion:
        return EpisodeMotion(self.x - self.start_x, self.forward_reward_sum)


@dataclass(frozen=True)
class MotionSummary:
    """The motion of several episodes, as the figures a report puts next to their mean return."""

    forward_displacement_mean: float
    forward_displacement_min: float
    """The episode that moved least: positive means every episode moved forward."""
    forward_reward_sum_mean: float

    @classmethod
    def of(cls, motions: Sequence[EpisodeMotion]) -> MotionSummary:
        if not motions:
            return cls(math.nan, math.nan, math.nan)
        displacement = [m.forward_displacement for m in motions]
        return cls(sum(displacement) / len(displacement), min(displacement),
                   sum(m.forward_reward_sum for m in motions) / len(motions))

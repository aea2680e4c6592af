"""Test-only environments for the fault tests: CartPole that sleeps in step().

Actor processes (pool workers, flow runs on a work pool) make an env by id; an id of the form
"tests.slow_env:SlowCartPole-v0" makes gymnasium import this module there first, so the
registration below happens in whichever process samples. models/ stays untouched.
"""

from __future__ import annotations

import time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.registration import register, registry


class SleepyCartPole(CartPoleEnv):
    """CartPole whose every step takes at least step_sleep_s seconds."""

    def __init__(self, step_sleep_s: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action):
        time.sleep(self.step_sleep_s)
        return super().step(action)


SLOW = "tests.slow_env:SlowCartPole-v0"  # 20 ms a step: a 200-step fragment takes >= 4 s
HANG = "tests.slow_env:HangCartPole-v0"  # never finishes a step

for _name, _sleep in (("SlowCartPole-v0", 0.02), ("HangCartPole-v0", 3600.0)):
    if _name not in registry:
        register(_name, entry_point=SleepyCartPole, kwargs={"step_sleep_s": _sleep},
                 max_episode_steps=500)

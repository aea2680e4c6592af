"""Test-only environments for the fault tests: CartPole that sleeps in step(), and CartPole
that kills its own process or hangs mid-rollout in one actor only.

Actor processes (pool workers, flow runs on a work pool) make an env by id; an id of the form
"tests.slow_env:SlowCartPole-v0" makes gymnasium import this module there first, so the
registration below happens in whichever process samples. models/ stays untouched.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

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


class SlowToMakeCartPole(CartPoleEnv):
    """CartPole that takes a second to build: a worker pre-warmed with it boots for >= 1 s."""

    def __init__(self, **kwargs):
        time.sleep(1.0)
        super().__init__(**kwargs)


ECHO_FILE_ENV = "MINIONSRL_TEST_ECHO_FILE"


class EnvironEchoCartPole(CartPoleEnv):
    """CartPole that writes its process's environment (as JSON) to $MINIONSRL_TEST_ECHO_FILE
    when built: what an actor process saw of its parent's environment."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        Path(os.environ[ECHO_FILE_ENV]).write_text(json.dumps(dict(os.environ)))


SLOW = "tests.slow_env:SlowCartPole-v0"  # 20 ms a step: a 200-step fragment takes >= 4 s
ECHO = "tests.slow_env:EnvironEchoCartPole-v0"
SLOW_TO_MAKE = "tests.slow_env:SlowToMakeCartPole-v0"  # 1 s to build
HANG = "tests.slow_env:HangCartPole-v0"  # never finishes a step

for _name, _sleep in (("SlowCartPole-v0", 0.02), ("HangCartPole-v0", 3600.0)):
    if _name not in registry:
        register(_name, entry_point=SleepyCartPole, kwargs={"step_sleep_s": _sleep},
                 max_episode_steps=500)
if "EnvironEchoCartPole-v0" not in registry:
    register("EnvironEchoCartPole-v0", entry_point=EnvironEchoCartPole, max_episode_steps=500)
if "SlowToMakeCartPole-v0" not in registry:
    register("SlowToMakeCartPole-v0", entry_point=SlowToMakeCartPole, max_episode_steps=500)


FAULT_DIR_ENV = "MINIONSRL_TEST_FAULT_DIR"  # where a faulty env notes what it did, if set


class FaultyCartPole(CartPoleEnv):
    """CartPole that misbehaves in one actor only: the one whose env is reset with fault_seed.

    An actor's env is reset with the actor's seed (models/envs/batch.py EnvBatch: seed *
    envs_per_actor + env index), so with run seed 0 and one env per actor, actor i of round 0
    resets with seed i. After after_steps steps that env's process SIGKILLs itself (fault
    "kill") or sleeps for an hour inside step() (fault "hang"); every other actor is plain
    CartPole. The fault follows the seed, so a retry of the same job fails the same way.
    With $MINIONSRL_TEST_FAULT_DIR set, a JSON note {fault, seed, pid, at} is written there
    just before the fault, for the tests to time the round against.
    """

    def __init__(self, fault: str, fault_seed: int = 0, after_steps: int = 20, **kwargs):
        super().__init__(**kwargs)
        self.fault, self.fault_seed, self.after_steps = fault, fault_seed, after_steps
        self._seed: int | None = None
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:  # the first reset of an actor's env; later ones carry no seed
            self._seed, self._steps = seed, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._steps += 1
        if self._seed == self.fault_seed and self._steps > self.after_steps:
            self._note()
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600.0)
        return super().step(action)

    def _note(self) -> None:
        folder = os.environ.get(FAULT_DIR_ENV)
        if folder:
            note = {"fault": self.fault, "seed": self._seed, "pid": os.getpid(),
                    "steps": self._steps - 1, "at": time.time()}
            path = Path(folder) / f"{self.fault}-{self._seed}-{os.getpid()}.json"
            path.write_text(json.dumps(note))


KILL_ONE = "tests.slow_env:KillOneCartPole-v0"  # actor with seed 0 SIGKILLs itself at step 21
HANG_ONE = "tests.slow_env:HangOneCartPole-v0"  # actor with seed 0 hangs at step 21

for _name, _fault in (("KillOneCartPole-v0", "kill"), ("HangOneCartPole-v0", "hang")):
    if _name not in registry:
        register(_name, entry_point=FaultyCartPole, kwargs={"fault": _fault},
                 max_episode_steps=500)


class NaNRewardCartPole(CartPoleEnv):
    """CartPole whose rewards are NaN in every env reset with a seed >= nan_from_seed: with run
    seed 0 and i_max 32, the actors of round 0 are sane and those of later rounds are not."""

    def __init__(self, nan_from_seed: int = 32, **kwargs):
        super().__init__(**kwargs)
        self.nan_from_seed, self._nan = nan_from_seed, False

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._nan = seed >= self.nan_from_seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if self._nan else reward, terminated, truncated, info


NAN_AFTER_ROUND_0 = "tests.slow_env:NaNRewardCartPole-v0"
if "NaNRewardCartPole-v0" not in registry:
    register("NaNRewardCartPole-v0", entry_point=NaNRewardCartPole, max_episode_steps=500)

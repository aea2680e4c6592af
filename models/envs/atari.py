"""Atari environments in the classic DeepMind setting (NoFrameskip-v4 ids, ale-py + gymnasium).

`make_atari_env` builds, from the inside out:

    AtariEnv             frameskip=1, repeat_action_probability=0 (no sticky actions)
    AtariPreprocessing   gymnasium: up to 30 no-op starts, frame skip 4 with max-pooling over the
                         last 2 frames, 84x84 greyscale (INTER_AREA)
    RecordGameScore      here: sums the raw, unclipped reward over the whole game (all lives)
    EpisodicLife         here, training only: a lost life ends the training episode
    FireReset            here, games with FIRE: press FIRE (then action 2) after every reset
    TransformReward      gymnasium, training only: reward -> sign(reward) in {-1, 0, 1}
                         (DeepMind's sign; gymnasium's ClipReward(-1, 1) is the same for
                         Atari's integer rewards)
    FrameStackObservation gymnasium: the last 4 frames -> uint8 observations of shape (4, 84, 84)

This is the wrapper stack of OpenAI baselines / SB3's AtariWrapper / CleanRL's ppo_atari.py,
with gymnasium's own wrappers wherever gymnasium has one. gymnasium's AtariPreprocessing has a
``terminal_on_life_loss`` flag, but it performs a full game reset afterwards, which is not
DeepMind's episodic life, hence EpisodicLife here.

How a sampling loop tells a lost life from a finished game, and reads the true score
------------------------------------------------------------------------------------------
Treat every step with ``terminated or truncated`` as the end of a (training) episode and call
``env.reset()``, as for any gymnasium env (EnvBatch does). Then:

* ``"game_score" in info`` on that step  <=>  the real game ended (all lives lost, or ALE's
  108,000-frame limit, which arrives as truncated=True). ``info["game_score"]`` is the raw,
  unclipped score of the whole game and ``info["game_length"]`` its number of agent steps
  (each 4 frames; counting the steps taken inside resets after lost lives, not the no-op
  starts). Report these as the episode return and length; ``models.envs.atari.game_score_of(info)``
  returns the score or None.
* ``terminated`` without ``"game_score"``: only a life was lost (training envs only). Bootstrap
  with 0 as for any termination; the following ``reset()`` does not restart the game (it takes
  one no-op step, then FIRE and action 2 where the game has FIRE), and the game score keeps
  accumulating across lives. ``info["lives"]`` (from ALE) is on every step.

For evaluation envs (``training=False``) every termination is a real game end and carries
``game_score`` too, so the same rule holds. The rewards a training env returns are clipped;
never sum them as the score. (A game that ends inside FireReset's two reset steps is restarted
there and its score is not reported; with random or learned play this practically never
happens.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward


@functools.cache
def _register_ale() -> bool:
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


def is_atari(env_id: str) -> bool:
    """True for ids that gymnasium builds with ale-py (e.g. "QbertNoFrameskip-v4", "ALE/Pong-v5")."""
    if not _register_ale():
        return False
    spec = gym.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("ale_py")


class RecordGameScore(gym.Wrapper):
    """Sum the raw reward over a whole game; at its end put it in ``info["game_score"]``.

    Must sit below EpisodicLife and reward clipping, so that it sees raw rewards and resets only
    when the game really restarts. ``score`` / ``length`` are the running values of this game.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.score = 0.0
        self.length = 0

    def reset(self, **kwargs):
        self.score = 0.0
        self.length = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        self.length += 1
        if terminated or truncated:
            info = {**info, "game_score": self.score, "game_length": self.length}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life terminates the training episode; reset restarts the game only when it is over.

    As in baselines' EpisodicLifeEnv: a life loss counts only while lives remain (> 0), so the
    last life's end is the real terminal; after a life loss, reset takes one no-op step instead
    of restarting the game. ``reset(seed=...)`` always restarts the game.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            # No-op step from the lost-life state; like baselines, its end flags are ignored
            # (if it ended the game, the next step reports the end again).
            obs, _, _, _, info = self.env.step(0)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE then action 2 after reset, for games that wait for FIRE to start (baselines)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if meanings[1] != "FIRE" or len(meanings) < 3:
            raise ValueError(f"FireReset needs action 1 == FIRE and >= 3 actions, got {meanings}")

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        obs, info = None, {}
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def _sign(reward: float) -> float:
    return float(np.sign(reward))


def make_atari_env(env_id: str, training: bool = True, *, noop_max: int = 30, frame_skip: int = 4,
                   screen_size: int = 84, frame_stack: int = 4) -> gym.Env:
    """The DeepMind-preprocessed env; training adds episodic life and reward clipping to sign.

    Observations are uint8 arrays of shape (frame_stack, screen_size, screen_size). Seed with
    ``env.reset(seed=...)``. See the module docstring for detecting real game ends.
    """
    if not is_atari(env_id):
        raise ValueError(f"{env_id!r} is not an ale-py Atari id (is ale-py installed?)")
    # NoFrameskip-v4 already sets frameskip=1 and repeat_action_probability=0; passing them
    # makes "ALE/...-v5" ids (sticky actions, frameskip 4 by default) give the same setting.
    # AtariPreprocessing reads the screen from ALE itself and discards the inner env's
    # observation, so a greyscale one (a third of RGB's copy) gives identical frames, faster.
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0, obs_type="grayscale")
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
                             terminal_on_life_loss=False, grayscale_obs=True)
    env = RecordGameScore(env)
    if training:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    if training:
        env = TransformReward(env, _sign)
    return FrameStackObservation(env, frame_stack)


def game_score_of(info: Mapping[str, object]) -> float | None:
    """The real game's raw score if this step's info marks a finished game, else None."""
    score = info.get("game_score")
    return None if score is None else float(score)

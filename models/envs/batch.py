"""Environment presets (data) and a synchronous batch of environments for one actor."""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from models.envs.lean_mujoco import lean_step_for
from models.envs.snapshot import EnvSnapshot, restore_snapshot, supports_snapshots, take_snapshot
from models.errors import ConfigError


def check_env_id(env_id: str) -> None:
    """Fail fast, before any actor starts, on an id gymnasium does not know.

    An id of the form "module:EnvName" follows gymnasium's own convention (gym.make imports
    `module` first, which registers EnvName): the module is imported here the same way, and
    EnvName must then be registered.
    """
    _register_optional_envs()
    module, sep, name = env_id.partition(":")
    if sep:
        if not module or not name or ":" in name:
            raise ConfigError(f"env id {env_id!r}: expected 'module:EnvName'")
        try:
            importlib.import_module(module)
        except Exception as exc:  # an import error or a failing registration inside it
            raise ConfigError(f"env id {env_id!r}: cannot import module {module!r} "
                              f"({type(exc).__name__}: {exc})") from exc
        if name not in gym.registry:
            raise ConfigError(f"env id {env_id!r}: module {module!r} registers no env {name!r}")
        return
    if env_id not in gym.registry:
        close = [k for k in gym.registry if k.lower().startswith(env_id.split("-")[0].lower())]
        hint = f"; did you mean one of {sorted(close)[:5]}?" if close else ""
        raise ConfigError(f"unknown gymnasium env id {env_id!r}{hint}")
    check_env_builds(env_id)


@functools.cache
def check_env_builds(env_id: str) -> None:
    """Build the env once, here, before any server or actor starts: an env whose own dependencies
    are missing (LunarLander without Box2D) is one line naming what to install, not a traceback
    from every actor. Once per id and process (a build takes milliseconds, Atari's ~0.2 s)."""
    try:
        make_env(env_id).close()
    except gym.error.DependencyNotInstalled as exc:
        raise ConfigError(f"{env_id} needs a package that is not installed: {exc}") from None
    except ImportError as exc:
        raise ConfigError(f"{env_id} cannot be built: {type(exc).__name__}: {exc}") from None


@functools.cache
def _register_optional_envs() -> None:
    try:  # Atari ids exist only after ale_py registers them.
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass


def make_env(env_id: str, training: bool = True) -> gym.Env:
    """The env as actors use it: Atari ids get DeepMind preprocessing (models/envs/atari.py), with
    episodic life and reward clipping only when training."""
    _register_optional_envs()
    from models.envs.atari import is_atari, make_atari_env

    if is_atari(env_id):
        return make_atari_env(env_id, training=training)
    return gym.make(env_id)


@dataclass(frozen=True)
class EnvSpaces:
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    discrete: bool
    n_actions: int  # discrete: number of actions; continuous: action dimension
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None


def _inspect_env(env_id: str, question):
    """question(env) on a freshly built env, closed afterwards."""
    env = make_env(env_id)
    try:
        return question(env)
    finally:
        env.close()


def can_carry_episodes(env_id: str) -> bool:
    """Whether an actor can hand this env's episodes on to the next round's (MuJoCo envs)."""
    return _inspect_env(env_id, supports_snapshots)


def env_spaces(env_id: str) -> EnvSpaces:
    return _inspect_env(env_id, spaces_of)


def spaces_of(env: gym.Env) -> EnvSpaces:
    obs, act = env.observation_space, env.action_space
    if isinstance(act, gym.spaces.Discrete):
        return EnvSpaces(tuple(obs.shape), obs.dtype, True, int(act.n))
    if isinstance(act, gym.spaces.Box):
        return EnvSpaces(tuple(obs.shape), obs.dtype, False, int(np.prod(act.shape)),
                         act.low.astype(np.float32), act.high.astype(np.float32))
    raise ConfigError(f"unsupported action space {act}")


class _IdleEnvs:
    """Built envs that a warm process keeps between actor jobs, for one (env id, mode) at a time.

    An actor job always starts its envs with reset(seed=...), which re-seeds them and restarts
    the episode (Atari: reloads the game), so a reused env samples exactly what a new one would
    (tests/test_rollout.py). What reuse saves is the build: 0.17 s per Atari env on this machine,
    as much again as its reset; under 6 ms for classic-control and MuJoCo envs.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._key: tuple[str, bool] | None = None
        self._envs: list[gym.Env] = []

    def take(self, env_id: str, training: bool, n: int) -> list[gym.Env]:
        with self._lock:
            if self._key != (env_id, training):
                return []
            taken, self._envs = self._envs[:n], self._envs[n:]
            return taken

    def clear(self) -> None:
        with self._lock:
            stale, self._envs, self._key = self._envs, [], None
        for env in stale:
            env.close()

    def give_back(self, env_id: str, training: bool, envs: list[gym.Env]) -> None:
        with self._lock:
            stale = []
            if self._key != (env_id, training):
                stale, self._envs, self._key = self._envs, [], (env_id, training)
            self._envs.extend(envs)
        for env in stale:
            env.close()


_idle_envs = _IdleEnvs()


def close_idle_envs() -> None:
    """Close the envs this process keeps for reuse (EnvBatch(reuse=True))."""
    _idle_envs.clear()


class EnvBatch:
    """N environments stepped in lockstep in this process, reset on the step that ends an episode.

    A hand-rolled loop, not gymnasium's vector envs: their next-step autoreset inserts a dummy
    transition, and subprocess vector envs were measured far slower on one core.
    With reuse=True the envs come from (and close() returns them to) this process's idle envs,
    so a warm worker builds them once (see _IdleEnvs); they are seeded and reset either way.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, training: bool = True,
                 reuse: bool = False, resume: Sequence[EnvSnapshot] = (), lean: bool = False):
        self.env_id, self.training, self.reuse = env_id, training, reuse
        self.envs = _idle_envs.take(env_id, training, num_envs) if reuse else []
        self.envs += [make_env(env_id, training) for _ in range(num_envs - len(self.envs))]
        self.spaces = spaces_of(self.envs[0])
        # lean: MuJoCo v5 locomotion envs step bit-exactly without gymnasium's Python around the
        # simulation (models/envs/lean_mujoco.py); their step infos then stay empty
        self._steps = [(lean_step_for(env) if lean else None) or env.step for env in self.envs]
        from models.envs.atari import is_atari

        # Atari: a training episode ends at a lost life and its rewards are clipped; the
        # return that counts is the real game's score, reported when the game ends.
        self.game_scores = is_atari(env_id)
        self.num_envs = num_envs
        first = [env.reset(seed=seed + i) for i, env in enumerate(self.envs)]
        self.obs = np.stack([obs for obs, _ in first])
        # The info of each env's last step, and of the reset that began its current episode
        # (evaluation reads what the body did from them: models/envs/locomotion.py).
        self.reset_infos: list[dict] = [info for _, info in first]
        self.infos: list[dict] = [{} for _ in self.envs]
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.completed_returns: list[float] = []
        self.completed_lengths: list[int] = []
        self.resumed = bool(resume)
        self.resumed_reward_returns = np.array([s.reward_return for s in resume] if resume
                                               else np.zeros(num_envs), dtype=np.float64)
        if resume:  # continue the episodes a previous actor left (seeded above for their next resets)
            if len(resume) != num_envs:
                raise ValueError(f"{len(resume)} snapshots for {num_envs} envs")
            for i, (env, snapshot) in enumerate(zip(self.envs, resume, strict=True)):
                self.obs[i] = restore_snapshot(env, snapshot)
                self.episode_return[i] = snapshot.episode_return
                self.episode_length[i] = snapshot.episode_length

    def snapshots(self, reward_returns: Sequence[float] | None = None) -> tuple[EnvSnapshot, ...]:
        """Each env's episode in progress (MuJoCo envs only), for the next round's actor;
        reward_returns: the reward scaler's per-env discounted returns, carried along."""
        returns = [0.0] * self.num_envs if reward_returns is None else list(reward_returns)
        return tuple(take_snapshot(env, self.obs[i], self.episode_return[i], self.episode_length[i], returns[i])
                     for i, env in enumerate(self.envs))

    def step(self, actions: np.ndarray):
        """Step every env; returns (next_obs, rewards, terminated, truncated, final_obs_by_env).

        next_obs holds the first observation of the new episode where one ended; the ended
        episode's last observation is in final_obs_by_env (env index -> obs), needed to bootstrap
        truncated episodes.
        """
        n = self.num_envs
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        final_obs: dict[int, np.ndarray] = {}
        sp = self.spaces
        if not sp.discrete:  # the stored action stays unclipped; the env gets a valid one
            # np.clip's values (NaN stays NaN) in two ufunc calls instead of clip's dispatch
            actions = np.minimum(np.maximum(actions, sp.action_low), sp.action_high)
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, info = self._steps[i](actions[i])
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            if info is not None:
                self.infos[i] = info
            self.episode_return[i] += reward
            self.episode_length[i] += 1
            if term or trunc:
                final_obs[i] = obs
                if not self.game_scores:
                    self._complete(i, float(self.episode_return[i]), int(self.episode_length[i]))
                elif "game_score" in info:
                    self._complete(i, float(info["game_score"]), int(info["game_length"]))
                obs, self.reset_infos[i] = env.reset()
            self.obs[i] = obs
        return self.obs, rewards, terminated, truncated, final_obs

    def _complete(self, i: int, episode_return: float, length: int) -> None:
        self.completed_returns.append(episode_return)
        self.completed_lengths.append(length)
        self.episode_return[i] = 0.0
        self.episode_length[i] = 0

    def close(self, broken: bool = False) -> None:
        """Close the envs, or keep them for the next job (reuse, unless broken mid-step)."""
        if self.reuse and not broken:
            _idle_envs.give_back(self.env_id, self.training, self.envs)
        else:
            for env in self.envs:
                env.close()
        self.envs = []

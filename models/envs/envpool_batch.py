"""EnvPool as an actor's env backend (issue 37): the same batch interface as EnvBatch, stepped by
EnvPool's C++ pool in this process (one thread: an actor is one core).

EnvPool 1.2.5's MuJoCo tasks under the gymnasium v5 ids have gymnasium's v5 dynamics, rewards and
terminations (tests/test_envpool.py: from the same state, the same actions give the same
observations to 1e-9 for the first 20 steps on Hopper-v5 and HalfCheetah-v5, and the same
terminations); the two link different MuJoCo builds, so their float rounding differs and a
chaotic body (HalfCheetah) drifts apart after ~50 steps; Humanoid-v5's positions and velocities
agree to 1e-4, its derived observation parts (inertias, body velocities, actuator and contact
forces) by ~1e-2, and its info x_position is the torso's (gymnasium's: the centre of mass). What EnvPool
does not have: the state snapshots that carry an episode on to the next round's actor
(carry_episodes), and a reset seed per env per job (its envs are seeded once, when built, with
seed + i, so a pool is built per job).

Atari: the "<Game>NoFrameskip-v4" ids run as EnvPool's "<Game>-v5" with the settings of
models/envs/atari.py (no sticky actions, up to 30 no-op starts, frame skip 4 with max-pooling,
84x84 greyscale by area, 4 stacked frames, FIRE at reset, 27,000 agent steps = ALE's 108,000
frames; training: a lost life ends the training episode and rewards are clipped to their sign).
What differs: EnvPool presses FIRE once after a reset (ours FIRE then action 2), continues after
a lost life without our no-op step, draws its no-ops from its own generator, and its frames are
not ours pixel for pixel: from a reset without no-ops, FIRE aligned, the same 273 random actions
on Qbert lost lives at the same steps but gave 4 different rewards, and the game ended on
gymnasium's side only (measured 2026-12-05). So an EnvPool Atari run is a run of a close
relative of the gymnasium env, not the same env; tests/test_envpool.py checks the contract (a lost
life ends the training episode and the game goes on; the game score is the unclipped sum over
the whole game; an evaluation env ends only with the game).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from models.envs.atari import is_atari
from models.envs.batch import EnvSpaces, spaces_of
from models.envs.snapshot import EnvSnapshot
from models.errors import ConfigError

GYMNASIUM, ENVPOOL = "gymnasium", "envpool"
ENV_BACKENDS = (GYMNASIUM, ENVPOOL)
ENVPOOL_ENVS = frozenset({"Hopper-v5", "HalfCheetah-v5", "Humanoid-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5",
                          "InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Reacher-v5", "Pusher-v5",
                          "HumanoidStandup-v5"})
"""The gymnasium ids EnvPool has under the same name with the same dynamics (MuJoCo v5)."""
ATARI_SUFFIX = "NoFrameskip-v4"


def envpool_task(env_id: str) -> str | None:
    """EnvPool's id for a gymnasium id it can stand in for (MuJoCo v5 under the same id; Atari
    "<Game>NoFrameskip-v4" as "<Game>-v5" where EnvPool has the game), else None."""
    if env_id in ENVPOOL_ENVS:
        return env_id
    if env_id.endswith(ATARI_SUFFIX) and "/" not in env_id and _envpool() is not None:
        task = env_id[: -len(ATARI_SUFFIX)] + "-v5"
        return task if task in _envpool().list_all_envs() else None
    return None


def _make_kwargs(env_id: str, training: bool) -> dict:
    """models/envs/atari.py's setting, where EnvPool's defaults are not it already."""
    if not is_atari(env_id):
        return {}
    return {"episodic_life": training, "reward_clip": training, "repeat_action_probability": 0.0,
            "noop_max": 30, "frame_skip": 4, "img_height": 84, "img_width": 84, "stack_num": 4,
            "gray_scale": True, "use_fire_reset": True, "max_episode_steps": 27000}


@functools.cache
def _envpool():
    try:
        import envpool
    except ImportError:
        return None
    return envpool


def check_env_backend(env_id: str, backend: str, carry_episodes: bool = False) -> None:
    """Refuse, before anything runs, a backend that is not installed or lacks the env."""
    if backend not in ENV_BACKENDS:
        raise ConfigError(f"env_backend must be one of {ENV_BACKENDS}, got {backend!r}")
    if backend == GYMNASIUM:
        return
    if _envpool() is None:
        raise ConfigError("env_backend envpool needs the envpool package: pip install -e '.[envpool]'")
    if envpool_task(env_id) is None:
        raise ConfigError(f"env_backend envpool: {env_id} is not one of its envs with gymnasium's dynamics "
                          f"({sorted(ENVPOOL_ENVS)}, or an Atari <Game>{ATARI_SUFFIX} it has the ROM of); "
                          "use env_backend gymnasium")
    if carry_episodes:
        raise ConfigError("env_backend envpool cannot carry episodes to the next round (it has no state "
                          "snapshots): turn carry_episodes off or use env_backend gymnasium")


class EnvPoolBatch:
    """N envs of one EnvPool pool, reset on the step that ends an episode (EnvBatch's contract: no
    dummy transition from EnvPool's next-step autoreset: a finished env is reset at once, by
    stepping only the ended envs, which is that autoreset; for Atari it continues the game after
    a lost life, where EnvPool's reset() would restart it)."""

    def __init__(self, env_id: str, num_envs: int, seed: int, training: bool = True,
                 resume: Sequence[EnvSnapshot] = ()):
        check_env_backend(env_id, ENVPOOL, carry_episodes=bool(resume))
        self.env_id, self.training, self.num_envs = env_id, training, num_envs
        self.pool = _envpool().make(envpool_task(env_id), env_type="gymnasium", num_envs=num_envs, seed=seed,
                                    num_threads=1, **_make_kwargs(env_id, training))
        self.spaces: EnvSpaces = spaces_of(self.pool)
        # Atari: the return that counts is the real game's score, the unclipped sum over all lives
        self.game_scores = is_atari(env_id)
        self._idle_actions = np.zeros((num_envs, *self.pool.action_space.shape), self.pool.action_space.dtype)
        obs, info = self.pool.reset()
        self.obs = np.array(obs)
        self.reset_infos: list[dict] = [_env_info(info, i) for i in range(num_envs)]
        self._info: dict = {}
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.completed_returns: list[float] = []
        self.completed_lengths: list[int] = []
        self.resumed = False
        self.resumed_reward_returns = np.zeros(num_envs, dtype=np.float64)
        self.game_score = np.zeros(num_envs, dtype=np.float64)

    @property
    def infos(self) -> list[dict]:
        """Each env's info of the last step, as gymnasium's dict (EnvBatch.infos)."""
        return [_env_info(self._info, i) for i in range(self.num_envs)] if self._info else [{}] * self.num_envs

    def snapshots(self, reward_returns: Sequence[float] | None = None) -> tuple[EnvSnapshot, ...]:
        raise ConfigError("env_backend envpool cannot carry episodes (no state snapshots)")

    def step(self, actions: np.ndarray):
        """As EnvBatch.step: (next_obs, rewards, terminated, truncated, final_obs_by_env)."""
        sp = self.spaces
        if not sp.discrete:  # the stored action stays unclipped; the env gets a valid one
            actions = np.clip(actions, sp.action_low, sp.action_high)
        obs, rewards, terminated, truncated, info = self.pool.step(np.asarray(actions))
        obs = np.array(obs)
        rewards = np.asarray(rewards, dtype=np.float32)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        self._info = info  # per-env dicts only when asked (infos): building them every step costs
        self.episode_return += rewards
        self.episode_length += 1
        if self.game_scores:
            self.game_score += info["reward"]
        final_obs: dict[int, np.ndarray] = {}
        done = np.flatnonzero(terminated | truncated)
        for i in done:
            final_obs[int(i)] = obs[i].copy()
            if not self.game_scores:
                self._complete(i, float(self.episode_return[i]), int(self.episode_length[i]))
            elif truncated[i] or info["terminated"][i]:  # the game is over, not only a life
                self._complete(i, float(self.game_score[i]), int(info["elapsed_step"][i]))
                self.game_score[i] = 0.0
            self.episode_return[i], self.episode_length[i] = 0.0, 0
        if done.size:  # EnvPool's autoreset (the action is ignored), now instead of on the next step
            ids = done.astype(np.int32)
            new_obs, _, _, _, reset_info = self.pool.step(self._idle_actions[ids], ids)
            obs[done] = new_obs
            for j, i in enumerate(done):
                self.reset_infos[int(i)] = _env_info(reset_info, j)
        self.obs = obs
        return self.obs, rewards, terminated, truncated, final_obs

    def _complete(self, i: int, episode_return: float, length: int) -> None:
        self.completed_returns.append(episode_return)
        self.completed_lengths.append(length)

    def close(self, broken: bool = False) -> None:
        self.pool.close()


def _env_info(info: dict, row: int) -> dict:
    """One env's entries of EnvPool's batched info (x_position, x_velocity, ...), as gymnasium's dict."""
    return {k: (v[row].item() if np.ndim(v[row]) == 0 else v[row]) for k, v in info.items()
            if k not in ("env_id", "players") and hasattr(v, "__len__") and len(v) > row}

"""An episode in progress, carried from one round's actor to the next round's (MuJoCo envs).

Actors are launched fresh every round, so without this each fragment starts new episodes and
the episode running at the fragment's end is cut (bootstrapped, never continued). When episodes
are about as long as a fragment or longer, that biases the data towards early-episode states:
the later part of every cut episode is never sampled, and an episode longer than a fragment
never ends at all (no return is ever reported). Continuing it is what a long-lived vector env
(CleanRL, SB3) does.

A MuJoCo env's whole dynamic state is small: qpos, qvel, act, the simulation time and the
solver's warm start (restoring qacc_warmstart makes the continued trajectory equal the
uninterrupted one bit for bit on Hopper and HalfCheetah; tests/test_env_snapshot.py). With the
TimeLimit's step count, the last raw observation, the running episode return and length, and
the reward scaler's discounted return, an actor restores the episode where the last one left it.
Envs without a MuJoCo simulation are not supported (`supports_snapshots`).

Pure: numpy and gymnasium (torch only for the checkpoint form), no Prefect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EnvSnapshot:
    """One env's episode in progress at the end of a fragment."""

    qpos: np.ndarray
    qvel: np.ndarray
    act: np.ndarray
    qacc_warmstart: np.ndarray
    sim_time: float
    elapsed_steps: int
    """The TimeLimit's count of steps in this episode (truncation comes at the same step)."""
    obs: np.ndarray
    """The raw observation the next action answers."""
    episode_return: float
    episode_length: int
    reward_return: float = 0.0
    """The reward scaler's discounted return G of this env (models/rl/normalization.py)."""

    _ARRAYS: ClassVar[tuple[str, ...]] = ("qpos", "qvel", "act", "qacc_warmstart", "obs")

    def to_state(self) -> dict[str, float | int | torch.Tensor]:
        """Plain checkpoint form: float64 tensors and numbers (loads with weights_only)."""
        import torch

        state: dict = {k: torch.from_numpy(np.array(getattr(self, k), dtype=np.float64)) for k in self._ARRAYS}
        return state | {"sim_time": self.sim_time, "elapsed_steps": self.elapsed_steps,
                        "episode_return": self.episode_return, "episode_length": self.episode_length,
                        "reward_return": self.reward_return}

    @classmethod
    def from_state(cls, state: dict) -> EnvSnapshot:
        arrays = {k: np.array(state[k].numpy() if hasattr(state[k], "numpy") else state[k], dtype=np.float64)
                  for k in cls._ARRAYS}
        return cls(**arrays, sim_time=float(state["sim_time"]), elapsed_steps=int(state["elapsed_steps"]),
                   episode_return=float(state["episode_return"]), episode_length=int(state["episode_length"]),
                   reward_return=float(state["reward_return"]))


def _mujoco(env: gym.Env):
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    inner = env.unwrapped
    return inner if isinstance(inner, MujocoEnv) else None


def _time_limit(env: gym.Env) -> TimeLimit | None:
    wrapper = env
    while isinstance(wrapper, gym.Wrapper):
        if isinstance(wrapper, TimeLimit):
            return wrapper
        wrapper = wrapper.env
    return None


def supports_snapshots(env: gym.Env) -> bool:
    """A MuJoCo env (gymnasium's MujocoEnv): its state can be snapshotted and restored."""
    return _mujoco(env) is not None


def take_snapshot(env: gym.Env, obs: np.ndarray, episode_return: float, episode_length: int,
                  reward_return: float = 0.0) -> EnvSnapshot:
    """The env's episode as it stands, with `obs` the observation the next action answers."""
    sim = _mujoco(env)
    if sim is None:
        raise ValueError(f"{env.spec.id if env.spec else env}: only MuJoCo envs can be snapshotted")
    limit = _time_limit(env)
    data = sim.data
    return EnvSnapshot(qpos=data.qpos.copy(), qvel=data.qvel.copy(), act=data.act.copy(),
                       qacc_warmstart=data.qacc_warmstart.copy(), sim_time=float(data.time),
                       elapsed_steps=int(limit._elapsed_steps) if limit is not None else 0,
                       obs=np.array(obs, copy=True), episode_return=float(episode_return),
                       episode_length=int(episode_length), reward_return=float(reward_return))


def restore_snapshot(env: gym.Env, snapshot: EnvSnapshot) -> np.ndarray:
    """Put a (reset) env into the snapshot's state; returns the observation to act on."""
    sim = _mujoco(env)
    if sim is None:
        raise ValueError(f"{env.spec.id if env.spec else env}: only MuJoCo envs can be restored")
    data = sim.data
    if snapshot.qpos.shape != data.qpos.shape or snapshot.qvel.shape != data.qvel.shape:
        raise ValueError(f"snapshot of qpos {snapshot.qpos.shape} / qvel {snapshot.qvel.shape} does not "
                         f"fit this env's {data.qpos.shape} / {data.qvel.shape}")
    sim.set_state(snapshot.qpos, snapshot.qvel)  # runs mj_forward
    data.act[:] = snapshot.act
    data.qacc_warmstart[:] = snapshot.qacc_warmstart
    data.time = snapshot.sim_time
    limit = _time_limit(env)
    if limit is not None:
        limit._elapsed_steps = snapshot.elapsed_steps
    return np.array(snapshot.obs, copy=True)

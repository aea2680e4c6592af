"""gymnasium's MuJoCo v5 locomotion step, bit for bit, in fewer Python operations (issue 37).

An actor's Hopper-v5 step spends 72 us in MuJoCo and ~35 us in gymnasium's Python around it: the
health check computed twice (for the reward and for the termination), the state vector, three
wrappers, an info dict nobody in the training loop reads. A lean step computes the same
observation, reward, termination and truncation with the same floating-point operations in the
same order (so the same bits: tests/test_lean_mujoco.py steps both side by side), reading every
parameter from the env itself (a custom `healthy_z_range` still applies), and returns no info.

Only the exact gymnasium classes below, unrendered, behind gymnasium's standard wrappers
(TimeLimit, OrderEnforcing, PassiveEnvChecker) are stepped lean; anything else (a subclass, an
extra wrapper, another env) steps through gymnasium as before. Resets always go through
gymnasium (its seeded noise), and the TimeLimit wrapper's step count is kept as it would be.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv, mass_center
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

LeanStep = Callable[[np.ndarray], tuple[np.ndarray, float, bool, bool, None]]
"""action -> (observation, reward, terminated, truncated, None): gymnasium's step, no info."""

_STANDARD_WRAPPERS = (TimeLimit, OrderEnforcing, PassiveEnvChecker)


def lean_step_for(env: gym.Env) -> LeanStep | None:
    """A lean step for this env, or None where it must step through gymnasium."""
    limit, wrapper = None, env
    while isinstance(wrapper, gym.Wrapper):
        if type(wrapper) not in _STANDARD_WRAPPERS:
            return None
        if type(wrapper) is TimeLimit:
            if limit is not None:
                return None
            limit = wrapper
        wrapper = wrapper.env
    if limit is None or wrapper.render_mode is not None:
        return None
    make = _LEAN_STEPS.get(type(wrapper))
    return None if make is None else make(wrapper, limit)


def _simulate(env: gym.Env, action: np.ndarray) -> None:
    """MujocoEnv.do_simulation: its action check, then _step_mujoco_simulation."""
    if action.shape != (env.model.nu,):
        raise ValueError(f"Action dimension mismatch. Expected {(env.model.nu,)}, found {action.shape}")
    env.data.ctrl[:] = action
    mujoco.mj_step(env.model, env.data, nstep=env.frame_skip)
    mujoco.mj_rnePostConstraint(env.model, env.data)


def _time_limit(limit: TimeLimit) -> bool:
    """TimeLimit.step's count and verdict (these envs never truncate by themselves)."""
    limit._elapsed_steps += 1
    return limit._elapsed_steps >= limit._max_episode_steps


def _clip10(x: np.ndarray) -> np.ndarray:
    # np.clip(x, -10, 10)'s values (NaN stays NaN) in two ufunc calls instead of clip's dispatch
    return np.minimum(np.maximum(x, -10), 10)


def _forward_step(env: gym.Env, action: np.ndarray, first: int, clip_velocity: bool
                  ) -> tuple[np.ndarray, np.float64, np.float32]:
    """The part Hopper's and HalfCheetah's steps share: simulate, then (observation, forward
    reward, control cost) as their v5 code computes them (the observation's velocities clipped
    at 10 for Hopper)."""
    qpos, qvel = env.data.qpos, env.data.qvel
    x_before = qpos[0]
    _simulate(env, action)
    x_velocity = (qpos[0] - x_before) / env.dt
    observation = np.concatenate((qpos[first:], _clip10(qvel) if clip_velocity else qvel)).ravel()
    return (observation, env._forward_reward_weight * x_velocity,
            env._ctrl_cost_weight * np.sum(np.square(action)))


def _first_observed(env: gym.Env) -> int:
    return 1 if env._exclude_current_positions_from_observation else 0


def _hopper(env: HopperEnv, limit: TimeLimit) -> LeanStep:
    """hopper_v5.HopperEnv.step with is_healthy computed once."""
    data = env.data
    min_state, max_state = env._healthy_state_range
    min_z, max_z = env._healthy_z_range
    min_angle, max_angle = env._healthy_angle_range
    first = _first_observed(env)

    def step(action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, None]:
        observation, forward_reward, ctrl_cost = _forward_step(env, action, first, clip_velocity=True)
        # is_healthy on Python floats (exact copies): state_vector()[2:] is qpos[2:] then qvel, and
        # a NaN fails every comparison here as in numpy's
        position = data.qpos.tolist()
        healthy = (min_z < position[1] < max_z and min_angle < position[2] < max_angle
                   and all(min_state < x < max_state for x in position[2:])
                   and all(min_state < x < max_state for x in data.qvel.tolist()))
        rewards = forward_reward + healthy * env._healthy_reward
        terminated = (not healthy) and env._terminate_when_unhealthy
        return observation, rewards - ctrl_cost, terminated, _time_limit(limit), None

    return step


def _half_cheetah(env: HalfCheetahEnv, limit: TimeLimit) -> LeanStep:
    """half_cheetah_v5.HalfCheetahEnv.step."""
    first = _first_observed(env)

    def step(action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, None]:
        observation, forward_reward, ctrl_cost = _forward_step(env, action, first, clip_velocity=False)
        return observation, forward_reward - ctrl_cost, False, _time_limit(limit), None

    return step


def _humanoid(env: HumanoidEnv, limit: TimeLimit) -> LeanStep:
    """humanoid_v5.HumanoidEnv.step with is_healthy computed once and no info (its tendon copies
    and norm); the observation is the env's own _get_obs."""
    model, data = env.model, env.data
    min_z, max_z = env._healthy_z_range
    min_cost, max_cost = env._contact_cost_range

    def step(action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, None]:
        xy_before = mass_center(model, data)
        _simulate(env, action)
        x_velocity, _ = (mass_center(model, data) - xy_before) / env.dt
        observation = env._get_obs()
        healthy = min_z < data.qpos[2] < max_z
        forward_reward = env._forward_reward_weight * x_velocity
        rewards = forward_reward + healthy * env._healthy_reward
        ctrl_cost = env._ctrl_cost_weight * np.sum(np.square(data.ctrl))
        contact_cost = env._contact_cost_weight * np.sum(np.square(data.cfrc_ext))
        contact_cost = min(max(contact_cost, min_cost), max_cost)  # np.clip's value on a scalar
        terminated = (not healthy) and env._terminate_when_unhealthy
        return observation, rewards - (ctrl_cost + contact_cost), terminated, _time_limit(limit), None

    return step


_LEAN_STEPS: dict[type, Callable[[gym.Env, TimeLimit], LeanStep]] = {
    HopperEnv: _hopper, HalfCheetahEnv: _half_cheetah, HumanoidEnv: _humanoid}

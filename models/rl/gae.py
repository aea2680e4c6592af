"""Generalised advantage estimation over [T, N] fragments with terminated/truncated handled apart."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    gae_lambda: float,
    *,
    dtype: type = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns, all arrays shaped [T, N], as `dtype` (computed in float64).

    next_values[t] is V of the observation that followed step t in the same episode: the next
    stored observation, the final observation of a truncated episode, or the fragment's last
    observation at t = T-1. A terminated step bootstraps 0; an episode end of either kind cuts
    the lambda-trace so that no advantage leaks across episodes or actors' fragments.

    The policy learner (models/rl/ppo.py) passes many actors' fragments; the scheduler agent
    (models/scheduling/agent.py) passes one complete episode as a single column that terminates
    at its last step (`episode_gae`).
    """
    terminated = terminated.astype(np.float64)
    episode_end = np.logical_or(terminated, truncated).astype(np.float64)
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    advantages = np.zeros_like(deltas, dtype=np.float64)
    running = np.zeros(deltas.shape[1:], dtype=np.float64)
    for t in reversed(range(deltas.shape[0])):
        running = deltas[t] + gamma * gae_lambda * (1.0 - episode_end[t]) * running
        advantages[t] = running
    returns = advantages + values
    return advantages.astype(dtype), returns.astype(dtype)


def next_values_for(values: np.ndarray, last_values: np.ndarray,
                    trunc_index: np.ndarray, trunc_values: np.ndarray) -> np.ndarray:
    """Build next_values [T, N] from V(obs) [T, N], V(last obs) [N] and V(truncated finals)."""
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    next_values[-1] = last_values
    if len(trunc_index):
        next_values[trunc_index[:, 0], trunc_index[:, 1]] = trunc_values
    return next_values


def episode_gae(rewards: np.ndarray, values: np.ndarray, gamma: float,
                gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (float64, shape [T]) of one complete episode: one column whose
    last step terminates, so the value after it is 0."""
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1, 1)
    values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    next_values = np.zeros_like(values)
    next_values[:-1] = values[1:]
    terminated = np.zeros(values.shape, dtype=bool)
    terminated[-1:] = True
    advantages, returns = compute_gae(rewards, values, next_values, terminated,
                                      np.zeros(values.shape, dtype=bool), gamma, gae_lambda,
                                      dtype=np.float64)
    return advantages[:, 0], returns[:, 0]

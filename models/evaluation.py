"""Deterministic evaluation of a policy on whole episodes (true game scores for Atari)."""

from __future__ import annotations

import numpy as np

from models.envs import EnvBatch
from models.normalization import RunningMeanStd
from models.policy import ActorCritic


def evaluate_policy(policy: ActorCritic, env_id: str, episodes: int, seed: int,
                    obs_rms: RunningMeanStd | None = None,
                    max_steps: int = 1_000_000) -> dict[str, float]:
    """Mean and std return of `episodes` consecutive episodes with the policy's mode actions.

    Evaluation envs: no episodic life, no reward clipping; the learner's frozen observation
    statistics. Episodes run one after another in one env, so none is favoured for being short.
    """
    envs = EnvBatch(env_id, 1, seed, training=False)
    obs = envs.obs
    try:
        for _ in range(max_steps):
            if len(envs.completed_returns) >= episodes:
                break
            x = obs_rms.normalize(obs) if obs_rms is not None else obs
            obs, _, _, _, _ = envs.step(policy.mode(x))
    finally:
        envs.close()
    returns = np.asarray(envs.completed_returns[:episodes], dtype=np.float64)
    if returns.size == 0:
        return {"eval/return_mean": float("nan"), "eval/return_std": float("nan"), "eval/episodes": 0.0}
    return {"eval/return_mean": float(returns.mean()), "eval/return_std": float(returns.std()),
            "eval/episodes": float(returns.size)}

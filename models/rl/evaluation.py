"""Deterministic evaluation of a policy on whole episodes (true game scores for Atari), and, for
MuJoCo locomotion envs, what the body did in each episode (models/envs/locomotion.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.envs.batch import EnvBatch
from models.envs.locomotion import EpisodeMotion, MotionSummary, probe_for
from models.rl.normalization import RunningMeanStd
from models.rl.policy import ActorCritic


@dataclass(frozen=True)
class Evaluation:
    """The episodes of one evaluation, in the order they ended."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    motions: tuple[EpisodeMotion, ...] | None
    """Per episode, how far the body moved forward; None for envs without a locomotion probe."""
    wall_s: float = math.nan
    """Seconds the evaluation took (not part of any round's time)."""

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def return_mean(self) -> float:
        return float(np.mean(self.returns)) if self.returns else math.nan

    @property
    def length_mean(self) -> float:
        return float(np.mean(self.lengths)) if self.lengths else math.nan

    @property
    def return_std(self) -> float:
        return float(np.std(self.returns)) if self.returns else math.nan

    @property
    def motion(self) -> MotionSummary | None:
        return None if self.motions is None else MotionSummary.of(self.motions)

    def metrics(self, prefix: str = "eval/") -> dict[str, float]:
        """The figures as MLflow metrics (and time/eval_s); the motion ones only for locomotion envs."""
        out = {"return_mean": self.return_mean, "return_std": self.return_std,
               "length_mean": self.length_mean,
               "episodes": float(self.episodes)}
        motion = self.motion
        if motion is not None:
            out |= {"forward_displacement_mean": motion.forward_displacement_mean,
                    "forward_displacement_min": motion.forward_displacement_min,
                    "forward_reward_sum_mean": motion.forward_reward_sum_mean}
        return {**{prefix + k: v for k, v in out.items()}, "time/eval_s": self.wall_s}

    def as_row(self) -> dict:
        """Per-episode figures for a JSON report."""
        row: dict = {"eval_returns": list(self.returns), "eval_lengths": list(self.lengths)}
        if self.motions is not None:
            row["eval_forward_displacement"] = [m.forward_displacement for m in self.motions]
            row["eval_forward_reward_sum"] = [m.forward_reward_sum for m in self.motions]
        return row


def run_episodes(act: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int, seed: int,
                 max_steps: int = 1_000_000) -> Evaluation:
    """Play `episodes` consecutive episodes in one evaluation env with `act` (a batch of one
    raw observation -> a batch of one action), so that any policy, ours or a peer's, is measured
    the same way.

    Evaluation envs: no episodic life, no reward clipping. Episodes run one after another in one
    env, so none is favoured for being short; an episode unfinished after max_steps is dropped.
    """
    started = time.perf_counter()
    envs = EnvBatch(env_id, 1, seed, training=False)
    probe = probe_for(env_id)
    motions: list[EpisodeMotion] | None = None if probe is None else []
    tracker = None if probe is None else probe.start(envs.reset_infos[0])
    obs = envs.obs
    try:
        for _ in range(max_steps):
            if len(envs.completed_returns) >= episodes:
                break
            obs, _, terminated, truncated, _ = envs.step(act(obs))
            if tracker is not None:
                tracker.step(envs.infos[0])
                if terminated[0] or truncated[0]:
                    motions.append(tracker.finish())
                    tracker = probe.start(envs.reset_infos[0])
    finally:
        envs.close()
    return Evaluation(tuple(envs.completed_returns[:episodes]), tuple(envs.completed_lengths[:episodes]),
                      None if motions is None else tuple(motions[:episodes]), time.perf_counter() - started)


def evaluation_reaches(metrics: dict[str, float], target_return: float) -> str | None:
    """Why an evaluation (its eval/ metrics) reaches J, or None: its mean return is at least J and,
    where displacement is measured (MuJoCo locomotion), every episode moved forward (a policy that
    stands still cannot count). PPO's rounds and IMPACT's chunks judge J on evaluations by it."""
    ret = metrics.get("eval/return_mean", math.nan)
    forward = metrics.get("eval/forward_displacement_min")
    if math.isnan(ret) or ret < target_return or (forward is not None and not forward > 0):
        return None
    moved = f", every episode forward (min {forward:.2f} m)" if forward is not None else ""
    return f"returned {ret:.4g} >= J={target_return:g}{moved}"


def evaluate_policy(policy: ActorCritic, env_id: str, episodes: int, seed: int,
                    obs_rms: RunningMeanStd | None = None,
                    max_steps: int = 1_000_000) -> Evaluation:
    """`episodes` whole episodes with the policy's mode actions and the learner's frozen
    observation statistics."""
    def act(obs: np.ndarray) -> np.ndarray:
        return policy.mode(obs_rms.normalize(obs) if obs_rms is not None else obs)

    return run_episodes(act, env_id, episodes, seed, max_steps)

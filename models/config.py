"""Typed configuration for PPO and a training run, validated before anything is spent."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A parameter is out of range; the message says which one and what to change."""


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of the learner (CleanRL / SB3 names)."""

    learning_rate: float = 2.5e-4
    """Adam step size."""
    anneal_lr: bool = False
    """Decay the step size linearly to 0 over max_rounds."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    update_epochs: int = 4
    """Passes over the round's batch."""
    minibatch_size: int = 512
    """Samples per gradient step."""
    clip_coef: float = 0.2
    """PPO surrogate clip range."""
    clip_vloss: bool = False
    """Clip the value loss around the old values."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float | None = None
    """Stop the epochs early once approx KL exceeds this."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and value MLPs (ignored by the Atari CNN)."""
    init_log_std: float = 0.0
    """Initial value of the Gaussian policy's state-independent log-std (continuous actions;
    SB3's log_std_init). 0 is CleanRL's; a lower start explores less noisily (RL-Zoo: -2 on Hopper)."""
    normalize_obs: bool = False
    """Normalise observations with running statistics merged across actors (MuJoCo)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return, merged across actors."""

    def validate(self) -> None:
        _check(self.learning_rate > 0, "ppo.learning_rate must be > 0")
        _check(0 < self.gamma <= 1, "ppo.gamma must be in (0, 1]")
        _check(0 <= self.gae_lambda <= 1, "ppo.gae_lambda must be in [0, 1]")
        _check(self.update_epochs >= 1, "ppo.update_epochs must be >= 1")
        _check(self.minibatch_size >= 1, "ppo.minibatch_size must be >= 1")
        _check(self.clip_coef > 0, "ppo.clip_coef must be > 0")
        _check(self.max_grad_norm > 0, "ppo.max_grad_norm must be > 0")
        _check(self.target_kl is None or self.target_kl > 0, "ppo.target_kl must be > 0 or null")
        _check(math.isfinite(self.init_log_std) and -10 <= self.init_log_std <= 2,
               "ppo.init_log_std must be a number in [-10, 2]")
        _check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden),
               "ppo.hidden must list positive layer widths")

    def replace(self, overrides: dict[str, Any] | None) -> PPOConfig:
        """Copy with overrides; unknown keys are an error naming the valid ones."""
        if not overrides:
            return self
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        _check(not unknown, f"unknown PPO parameter(s) {unknown}; valid: {sorted(known)}")
        values = dict(overrides)
        if "hidden" in values:
            values["hidden"] = tuple(values["hidden"])
        return dataclasses.replace(self, **values)


@dataclass(frozen=True)
class RunConfig:
    """One training run: workload, stopping rule, scheduling and sampling shape."""

    env_id: str
    scheduler: str
    target_return: float
    budget_usd: float
    max_rounds: int
    i_max: int
    fragment: int
    envs_per_actor: int
    seed: int
    backend: str
    ppo: PPOConfig = field(default_factory=PPOConfig)
    actor_memory_gb: float = 1.0
    learner_device: str = "auto"
    actor_timeout_s: float | None = None
    actor_retries: int = 1
    quorum: float = 0.75

    def validate(self) -> None:
        _check(math.isfinite(self.target_return), "target_return must be a finite number")
        _check(self.budget_usd > 0 and math.isfinite(self.budget_usd),
               "budget_usd must be a positive number of dollars")
        _check(1 <= self.max_rounds <= 1_000_000, "max_rounds must be in [1, 1000000]")
        _check(1 <= self.i_max <= 1024, "i_max must be in [1, 1024]")
        _check(self.fragment >= 1, "fragment (env steps per actor per round) must be >= 1")
        _check(self.envs_per_actor >= 1, "envs_per_actor must be >= 1")
        _check(self.fragment % self.envs_per_actor == 0,
               f"fragment ({self.fragment}) must be a multiple of envs_per_actor "
               f"({self.envs_per_actor})")
        _check(self.seed >= 0, "seed must be >= 0")
        _check(self.actor_memory_gb > 0, "actor_memory_gb must be > 0")
        _check(self.learner_device in ("auto", "cpu", "cuda"),
               "learner_device must be 'auto', 'cpu' or 'cuda'")
        _check(self.actor_timeout_s is None or self.actor_timeout_s > 0,
               "actor_timeout_s must be > 0 seconds or null")
        _check(0 <= self.actor_retries <= 10, "actor_retries must be in [0, 10]")
        _check(0 < self.quorum <= 1, "quorum must be a fraction in (0, 1]")
        self.ppo.validate()

    @property
    def steps_per_env(self) -> int:
        return self.fragment // self.envs_per_actor


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def config_from_dict(raw: dict[str, Any]) -> RunConfig:
    """A RunConfig back from dataclasses.asdict (e.g. out of a checkpoint)."""
    values = dict(raw)
    ppo = dict(values.pop("ppo"))
    ppo["hidden"] = tuple(ppo["hidden"])
    return RunConfig(ppo=PPOConfig(**ppo), **values)

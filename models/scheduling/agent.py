"""The scheduler agent: a PPO agent that chooses the actor count I_k of every round.

Policy and value nets (2 x 64 tanh MLPs from models/rl/networks.py) read the 7 features of
models/scheduling/features.py; the policy is a categorical over I in [1, I_max]. One episode is
one complete training run of the workload; `update` runs PPO over a batch of episodes with the
project's one GAE (models/rl/gae.py `episode_gae`) and one PPO loss (models/rl/ppo.py `ppo_loss`).
The value net learns standardised targets, so a penalty of -475 (CartPole) and a time cost of
-0.3 train the same net without retuning.

Pure torch/numpy: no Prefect, no MLflow, no environment. `LearnedScheduler`
(models/scheduling/learned.py) acts with an agent inside a run and records the trace that
`Episode.from_trace` turns back into training data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.errors import ConfigError
from models.json_types import StateDict
from models.rl.action_heads import CategoricalHead
from models.rl.gae import episode_gae
from models.rl.networks import mlp
from models.rl.normalization import Moments, RunningMeanStd
from models.rl.ppo import LossCoefficients, ppo_loss
from models.run.validation import with_overrides
from models.scheduling.features import FEATURES, SchedulerTrace
from models.scheduling.reward import REWARD_CLOCKS


@dataclass(frozen=True)
class AgentConfig:
    """Hyperparameters of the scheduler's PPO."""

    learning_rate: float = 1e-3
    """Adam step size."""
    beta: float = 0.1
    """Weight of the round in the reward r_k = -beta * (P_k + cost_weight * C_k); in (0, 1)."""
    cost_weight: float = 0.0
    """Seconds of training time one USD of a round's cost C_k is worth in the reward; 0, the
    default, is the paper's time-only reward (models/scheduling/reward.py)."""
    reward_clock: str = "p_k"
    """The round time in the reward: "p_k", the paper's P_k (learner + slowest actor), or
    "cloud", the cloud clock (P_k plus the round's measured orchestration)."""
    gamma: float = 0.99
    """Discount over rounds."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO surrogate clip range."""
    update_epochs: int = 10
    """Passes over a batch of episodes per update."""
    minibatch_size: int = 256
    """Decisions per gradient step (a batch smaller than this is one minibatch)."""
    ent_coef: float = 0.01
    """Entropy bonus: keeps the categorical from collapsing before it has seen enough episodes."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of both nets (two tanh layers of 64)."""

    def validate(self) -> None:
        checks = [
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (0 < self.beta < 1, "beta must be in (0, 1)"),
            (self.cost_weight >= 0 and math.isfinite(self.cost_weight), "cost_weight must be finite and >= 0"),
            (self.reward_clock in REWARD_CLOCKS, f"reward_clock must be one of {REWARD_CLOCKS}"),
            (0 < self.gamma <= 1, "gamma must be in (0, 1]"),
            (0 <= self.gae_lambda <= 1, "gae_lambda must be in [0, 1]"),
            (self.clip_coef > 0, "clip_coef must be > 0"),
            (self.update_epochs >= 1, "update_epochs must be >= 1"),
            (self.minibatch_size >= 1, "minibatch_size must be >= 1"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "hidden must be positive widths"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"scheduler agent: {message}")

    def replace(self, overrides: Mapping[str, object] | None) -> AgentConfig:
        """Copy with overrides (validated); unknown keys and wrong types name the key."""
        return with_overrides(self, overrides, "agent", "scheduler agent")

    def loss_coefficients(self) -> LossCoefficients:
        """The PPO loss's settings. Advantages are standardised over the whole batch of episodes
        in `SchedulerAgent.update`, not per minibatch; the value loss is not clipped."""
        return LossCoefficients(clip_coef=self.clip_coef, vf_coef=self.vf_coef, ent_coef=self.ent_coef,
                                norm_adv=False, clip_vloss=False)


@dataclass
class Episode:
    """One scheduler episode: what the scheduler saw and did, and what it earned."""

    obs: np.ndarray  # (T, 7) float32
    actions: np.ndarray  # (T,) int, action a means I = a + 1
    logps: np.ndarray  # (T,) behaviour log-probabilities
    values: np.ndarray  # (T,) value estimates in reward units
    rewards: np.ndarray  # (T,)

    @classmethod
    def from_trace(cls, trace: SchedulerTrace, rewards: Sequence[float]) -> Episode:
        """From `LearnedScheduler.trace()` (models/scheduling/learned.py) and the episode's rewards."""
        steps = trace.steps
        if len(steps) != len(rewards):
            raise ValueError(f"trace has {len(steps)} decisions, rewards {len(rewards)}")
        return cls(obs=np.asarray([s.obs for s in steps], dtype=np.float32).reshape(len(steps), -1),
                   actions=np.asarray([s.action for s in steps], dtype=np.int64),
                   logps=np.asarray([s.logp for s in steps], dtype=np.float32),
                   values=np.asarray([s.value for s in steps], dtype=np.float32),
                   rewards=np.asarray(rewards, dtype=np.float32))

    @property
    def total_reward(self) -> float:
        return float(self.rewards.sum())


def target_std(stats: RunningMeanStd) -> float:
    """The standard deviation the value targets are divided by: 1 until two distinct targets."""
    return math.sqrt(float(stats.var)) if stats.count > 1 and stats.var > 0 else 1.0


class SchedulerAgent:
    """Policy pi(a|s) over a in [0, I_max) (I = a + 1) and value V(s), trained by PPO.

    `scale` holds the running mean and variance of the value targets (models/rl/normalization.py
    RunningMeanStd); the value net predicts (target - mean) / std.
    """

    def __init__(self, i_max: int, config: AgentConfig | None = None, seed: int = 0,
                 n_features: int = len(FEATURES)):
        if i_max < 1:
            raise ConfigError("i_max must be >= 1")
        self.config = config or AgentConfig()
        self.config.validate()
        self.i_max, self.n_features = int(i_max), n_features
        torch.manual_seed(seed)
        self.policy = mlp(n_features, self.config.hidden, self.i_max, out_gain=0.01)
        self.value = mlp(n_features, self.config.hidden, 1, out_gain=1.0)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=self.config.learning_rate, eps=1e-5)
        self.scale = RunningMeanStd(())
        self.updates = 0
        self.episodes_seen = 0

    def parameters(self) -> list[nn.Parameter]:
        return list(self.policy.parameters()) + list(self.value.parameters())

    # -- acting --------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, greedy: bool = False,
            generator: torch.Generator | None = None) -> tuple[int, float, float]:
        """(action, log-probability, value in reward units) for one observation."""
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        logits = self.policy(x)[0]
        logp_all = torch.log_softmax(logits, dim=-1)
        if greedy:
            action = int(torch.argmax(logp_all))
        else:
            action = int(torch.multinomial(logp_all.exp(), 1, generator=generator))
        value = float(self.value(x)[0, 0]) * target_std(self.scale) + float(self.scale.mean)
        return action, float(logp_all[action]), value

    @torch.no_grad()
    def probabilities(self, obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(-1, self.n_features)
        return torch.softmax(self.policy(x), dim=-1).numpy()

    # -- learning ------------------------------------------------------------------------
    def update(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """One PPO update on a batch of complete episodes. Returns train/... statistics."""
        cfg = self.config
        episodes = [e for e in episodes if len(e.rewards)]
        if not episodes:
            return {}
        # -- advantage phase: GAE per episode, value targets standardised by the running scale
        advs, rets = zip(*(episode_gae(e.rewards, e.values, cfg.gamma, cfg.gae_lambda) for e in episodes),
                         strict=True)
        obs = torch.as_tensor(np.concatenate([e.obs for e in episodes]), dtype=torch.float32)
        actions = torch.as_tensor(np.concatenate([e.actions for e in episodes]), dtype=torch.int64)
        old_logp = torch.as_tensor(np.concatenate([e.logps for e in episodes]), dtype=torch.float32)
        adv = torch.as_tensor(np.concatenate(advs), dtype=torch.float32)
        returns_np = np.concatenate(rets)
        self.scale.update(returns_np)
        target = torch.as_tensor((returns_np - self.scale.mean) / target_std(self.scale), dtype=torch.float32)
        if len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)

        # -- minibatch epochs
        coefficients = cfg.loss_coefficients()
        n = len(actions)
        mb = min(cfg.minibatch_size, n)
        generator = torch.Generator().manual_seed(self.updates)
        stats: dict[str, list[float]] = {k: [] for k in ("loss", "pg_loss", "v_loss", "entropy",
                                                         "approx_kl", "clipfrac")}
        for _ in range(cfg.update_epochs):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, mb):
                idx = order[start:start + mb]
                new_logp, entropy = CategoricalHead.log_prob_entropy(self.policy(obs[idx]), actions[idx])
                out = ppo_loss(new_logp, old_logp[idx], adv[idx], self.value(obs[idx])[:, 0], None,
                               target[idx], entropy, coefficients)
                self.optimizer.zero_grad()
                out.loss.backward()
                nn.utils.clip_grad_norm_(self.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for key, value in (("loss", out.loss), ("pg_loss", out.policy_loss),
                                   ("v_loss", out.value_loss), ("entropy", out.entropy),
                                   ("approx_kl", out.approx_kl), ("clipfrac", out.clipfrac)):
                    stats[key].append(float(value.detach()))

        # -- logging
        self.updates += 1
        self.episodes_seen += len(episodes)
        values = np.concatenate([e.values for e in episodes])
        var_ret = float(np.var(returns_np))
        out_stats = {f"train/{k}": float(np.mean(v)) for k, v in stats.items()}
        out_stats["train/explained_variance"] = (float(1 - np.var(returns_np - values) / var_ret)
                                                 if var_ret > 0 else math.nan)
        out_stats["train/episode_reward_mean"] = float(np.mean([e.total_reward for e in episodes]))
        out_stats["train/decisions"] = float(n)
        return out_stats

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        return {"policy": self.policy.state_dict(), "value": self.value.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scale": self.scale_state(),
                "updates": self.updates, "episodes_seen": self.episodes_seen}

    def scale_state(self) -> dict[str, float]:
        """The value-target statistics as plain floats (JSON and weights_only safe)."""
        scale = self.scale
        return {"count": float(scale.count), "mean": float(scale.mean), "var": float(scale.var)}

    def load_state_dict(self, state: StateDict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.value.load_state_dict(state["value"])
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scale = RunningMeanStd.from_moments(Moments.from_state(state["scale"]))
        self.updates = int(state["updates"])
        self.episodes_seen = int(state["episodes_seen"])

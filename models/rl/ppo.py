"""The PPO learner: merge actors' fragments, GAE, clipped-surrogate epochs (CleanRL's phases)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from models.envs.batch import EnvSpaces
from models.errors import NonFiniteError
from models.rl.flat_parameters import FlatAdam, FlatParameters, flat_adam_state
from models.rl.gae import compute_gae, next_values_for
from models.rl.normalization import Moments, NormStats, RunningMeanStd, merged_with_deltas, shipped_stats
from models.rl.policy import ActorCritic, cpu_policy, weights_to_bytes
from models.rl.rollout import RolloutBatch
from models.run.config import PPOConfig


@dataclass
class PPOLoss:
    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clipfrac: torch.Tensor


@dataclass(frozen=True)
class LossCoefficients:
    """What the PPO loss reads of a configuration (PPOConfig's names and defaults)."""

    clip_coef: float = 0.2
    """Surrogate clip range (and the value clip range with clip_vloss)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    norm_adv: bool = True
    """Standardise the advantages within the minibatch."""
    clip_vloss: bool = False
    """Clip the value loss around the old values (old_values must then be given)."""
    vloss_form: str = "max"
    """With clip_vloss: "max", CleanRL's 0.5 * max(unclipped, clipped); "clipped", SB3's squared
    error of the clipped prediction only."""

    @classmethod
    def from_config(cls, cfg: PPOConfig) -> LossCoefficients:
        return cls(clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                   norm_adv=cfg.norm_adv, clip_vloss=cfg.clip_vloss, vloss_form=cfg.vloss_form)


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
             new_values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
             entropy: torch.Tensor, cfg: LossCoefficients) -> PPOLoss:
    """Clipped surrogate + value loss - entropy bonus, with KL and clip-fraction diagnostics.

    Used by the policy's Learner and by the scheduler agent (models/scheduling/agent.py).
    old_values is read only with cfg.clip_vloss.
    """
    if cfg.clip_vloss and old_values is None:
        raise ValueError("ppo_loss with clip_vloss needs old_values")
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()  # k3 estimator: >= 0, unbiased
        clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
    if cfg.norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    surrogate = torch.max(-advantages * ratio,
                          -advantages * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef))
    policy_loss = surrogate.mean()
    if cfg.clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
        if cfg.vloss_form == "clipped":
            value_loss = ((clipped - returns) ** 2).mean()
        else:
            value_loss = 0.5 * torch.max((new_values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((new_values - returns) ** 2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy_mean
    return PPOLoss(loss, policy_loss, value_loss, entropy_mean, approx_kl, clipfrac)


@dataclass
class LearnerBatch:
    """Fragments of all actors flattened for minibatching, with advantages computed."""

    obs: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return self.logp.shape[0]


def select_device(preference: str = "auto") -> torch.device:
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


class Learner:
    """Holds the policy and optimiser; one `update` per round."""

    def __init__(self, spaces: EnvSpaces, cfg: PPOConfig, seed: int = 0,
                 device: str = "auto", max_rounds: int | None = None, max_env_steps: int | None = None):
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.cfg = cfg
        self.device = select_device(device)
        self.policy = ActorCritic(spaces, cfg.hidden, init_log_std=cfg.init_log_std).to(self.device)
        # One flat buffer for the weights and one for the gradients: Adam, the clip and the
        # zeroing then touch one tensor each, not 13; same results to the bit (BENCHMARKS.md,
        # "A faster round").
        self.flat = FlatParameters(self.policy)
        self.optimizer = FlatAdam(self.flat.flat, lr=cfg.learning_rate, eps=1e-5)
        self.max_rounds = max_rounds
        self.max_env_steps = max_env_steps
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0
        self.obs_rms = RunningMeanStd(spaces.obs_shape) if cfg.normalize_obs else None
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None

    def weights(self) -> bytes:
        return weights_to_bytes(self.policy)

    def policy_on_cpu(self) -> ActorCritic:
        """The policy for acting in this process (a CPU copy when learning on a GPU)."""
        return cpu_policy(self.policy)

    def norm_state(self) -> NormStats | None:
        """Normaliser statistics that travel to actors with the weights (None: no normalising)."""
        return shipped_stats(self.obs_rms, self.ret_rms, self.cfg.gamma)

    def _merge_norm_deltas(self, batches: list[RolloutBatch]) -> None:
        """Exact merge: shipped base + each actor's own fragment statistics (never the base twice)."""
        self.obs_rms = merged_with_deltas(self.obs_rms, [b.norm_deltas.obs for b in batches])
        self.ret_rms = merged_with_deltas(self.ret_rms, [b.norm_deltas.reward for b in batches])

    # -- advantage phase -----------------------------------------------------------------
    @torch.no_grad()
    def prepare(self, batches: list[RolloutBatch]) -> LearnerBatch:
        """Concatenate fragments along the env axis and compute GAE in one pass.

        Each actor's columns bootstrap from its own last observation, and truncated
        episodes from their own final observation.
        """
        for b in batches:  # NaN in, NaN weights out: stop before anything is learned from them
            for name, values in (("rewards", b.rewards), ("observations", b.obs), ("final observations", b.trunc_obs),
                                 ("last observations", b.last_obs)):
                if values.dtype != np.uint8 and not np.isfinite(values).all():
                    raise NonFiniteError(f"actor {b.actor_index} returned non-finite {name} "
                                         f"({int((~np.isfinite(values)).sum())} values): the env produced NaN or inf")
        steps = {b.rewards.shape[0] for b in batches}
        if len(steps) != 1:
            raise ValueError(f"fragments of different lengths cannot be merged: {sorted(steps)}")
        obs = np.concatenate([b.obs for b in batches], axis=1)
        offsets = np.cumsum([0] + [b.rewards.shape[1] for b in batches[:-1]])
        trunc_index = np.concatenate(
            [b.trunc_index + np.array([0, off]) for b, off in zip(batches, offsets, strict=True)])
        trunc_obs = np.concatenate([b.trunc_obs for b in batches])
        last_obs = np.concatenate([b.last_obs for b in batches])
        t_len, n_envs = obs.shape[:2]

        all_obs = np.concatenate([obs.reshape(t_len * n_envs, *obs.shape[2:]), last_obs, trunc_obs])
        obs_tensor = self._obs_tensor(all_obs)
        all_values = self._values(obs_tensor).cpu().numpy().astype(np.float64)
        values = all_values[: t_len * n_envs].reshape(t_len, n_envs)
        last_values = all_values[t_len * n_envs: t_len * n_envs + n_envs]
        trunc_values = all_values[t_len * n_envs + n_envs:]

        rewards = np.concatenate([b.rewards for b in batches], axis=1)
        terminated = np.concatenate([b.terminated for b in batches], axis=1)
        truncated = np.concatenate([b.truncated for b in batches], axis=1)
        next_values = next_values_for(values, last_values, trunc_index, trunc_values)
        advantages, returns = compute_gae(rewards, values, next_values, terminated, truncated,
                                          self.cfg.gamma, self.cfg.gae_lambda)
        actions = np.concatenate([b.actions for b in batches], axis=1)
        logp = np.concatenate([b.logp for b in batches], axis=1)
        flat = t_len * n_envs
        return LearnerBatch(
            obs=obs_tensor[:flat],
            actions=torch.as_tensor(actions.reshape(flat, *actions.shape[2:]), device=self.device),
            logp=self._tensor(logp.reshape(flat)),
            values=self._tensor(values.reshape(flat)),
            advantages=self._tensor(advantages.reshape(flat)),
            returns=self._tensor(returns.reshape(flat)),
        )

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    def _obs_tensor(self, array: np.ndarray) -> torch.Tensor:
        if array.dtype == np.uint8:  # Atari frames travel and stay at one byte per pixel
            return torch.as_tensor(array, device=self.device)
        return self._tensor(array)

    def _values(self, obs: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """V(obs) in chunks, so a round of Atari frames never becomes one huge float batch."""
        return torch.cat([self.policy.value(obs[i:i + chunk]) for i in range(0, len(obs), chunk)])

    # -- optimisation phase --------------------------------------------------------------
    def anneal_fraction(self, round_index: int, env_steps: int) -> float:
        """anneal_lr's step-size factor: linear to 0 at whichever budget is nearer, K rounds or
        max_env_steps (CleanRL anneals over its env-step budget)."""
        fractions = [1.0]
        if self.max_rounds:
            fractions.append(1.0 - round_index / self.max_rounds)
        if self.max_env_steps:
            fractions.append(1.0 - env_steps / self.max_env_steps)
        return max(min(fractions), 0.0)

    def update(self, batches: list[RolloutBatch], round_index: int = 0, env_steps: int = 0) -> dict[str, float]:
        """One PPO update on the round's fragments; returns train/... statistics. env_steps: the
        run's env steps before this round (anneal_lr over max_env_steps)."""
        t0 = time.perf_counter()
        cfg = self.cfg
        if cfg.anneal_lr and (self.max_rounds or self.max_env_steps):
            for group in self.optimizer.param_groups:
                group["lr"] = self.anneal_fraction(round_index, env_steps) * cfg.learning_rate
        data = self.prepare(batches)
        self._merge_norm_deltas(batches)
        n = len(data)
        mb = min(cfg.minibatch_size, n)
        keys = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")
        # summed on the learner's device: no per-step host sync (float() or .cpu()) on a GPU
        sums = torch.zeros(len(keys), dtype=torch.float64, device=self.device)
        steps = 0
        coefficients = LossCoefficients.from_config(cfg)
        self.flat.check_views()
        for _ in range(cfg.update_epochs):
            order = torch.randperm(n, generator=self.generator).to(self.device)
            # one gather per epoch, then each minibatch is a contiguous slice (a view)
            shuffled = [t[order] for t in (data.obs, data.actions, data.logp, data.advantages,
                                           data.values, data.returns)]
            epoch_kl = torch.zeros((), dtype=torch.float64, device=self.device)
            epoch_steps = 0
            for start in range(0, n - mb + 1, mb):
                obs, actions, old_logp, advantages, old_values, returns = (
                    t[start:start + mb] for t in shuffled)
                new_logp, entropy, new_values = self.policy.evaluate(obs, actions)
                out = ppo_loss(new_logp, old_logp, advantages, new_values, old_values, returns, entropy,
                               coefficients)
                if not torch.isfinite(out.loss):
                    raise NonFiniteError(f"round {round_index}: the PPO loss is {float(out.loss)} at "
                                         f"gradient step {steps}; no weights were changed by it")
                self.flat.zero_grad()
                out.loss.backward()
                grad_norm = self.flat.clip_grad_norm_(cfg.max_grad_norm)
                if not torch.isfinite(grad_norm):
                    raise NonFiniteError(f"round {round_index}: the gradient norm is {float(grad_norm)} at "
                                         f"gradient step {steps}; no weights were changed by it")
                self.optimizer.step()
                step_stats = torch.stack([out.loss.detach(), out.policy_loss.detach(), out.value_loss.detach(),
                                          out.entropy.detach(), out.approx_kl, out.clipfrac, grad_norm.detach()])
                sums += step_stats.double()
                epoch_kl += step_stats[4].double()
                epoch_steps += 1
                steps += 1
            if cfg.target_kl is not None and float(epoch_kl) / max(epoch_steps, 1) > cfg.target_kl:
                break
        stats = {f"train/{k}": float(v) / max(steps, 1) for k, v in zip(keys, sums.tolist(), strict=True)}
        stats.update(self._after_update_stats(data))
        stats["train/grad_steps"] = float(steps)
        stats["train/learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        stats["time/learner_s"] = time.perf_counter() - t0
        self.updates += 1
        return stats

    @torch.no_grad()
    def _after_update_stats(self, data: LearnerBatch) -> dict[str, float]:
        """KL between the policy that sampled this round and the new one, and value fit."""
        chunk = 4096
        new_logp = torch.cat([self.policy.evaluate(data.obs[i:i + chunk], data.actions[i:i + chunk])[0]
                              for i in range(0, len(data), chunk)])
        log_ratio = new_logp - data.logp
        kl = ((log_ratio.exp() - 1) - log_ratio).mean()
        var_returns = data.returns.var()
        explained = 1 - (data.returns - data.values).var() / var_returns if var_returns > 0 else 0.0
        return {"train/policy_kl": float(kl), "train/explained_variance": float(explained)}

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain state (tensors, numbers, dicts): loads with torch.load(weights_only=True)."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "updates": self.updates,
                "obs_rms": self.obs_rms.moments().to_state() if self.obs_rms else None,
                "ret_rms": self.ret_rms.moments().to_state() if self.ret_rms else None}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(flat_adam_state(state["optimizer"], self.flat))
        self.generator.set_state(state["generator"])
        self.updates = state["updates"]
        if state["obs_rms"] is not None:
            self.obs_rms = RunningMeanStd.from_moments(Moments.from_state(state["obs_rms"]))
        if state["ret_rms"] is not None:
            self.ret_rms = RunningMeanStd.from_moments(Moments.from_state(state["ret_rms"]))

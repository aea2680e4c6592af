"""IMPACT (Luo et al., ICLR 2020): an asynchronous learner with a circular buffer, a target network
and V-trace, next to our synchronous PPO (models/rl/ppo.py). Pure torch/numpy: no Prefect, no MLflow.

Phases of one learner step (`ImpactLearner.step`):
1. batch: `batch_fragments` fragments drawn from the circular buffer (`FragmentBuffer`); each
   fragment is used at most `max_reuse` times, then evicted; a full buffer overwrites its oldest.
2. targets: V-trace (models/impact/vtrace.py) with the *target network* as the judged policy pi and the
   actor's behaviour policy mu, values from the learner's current critic (as RLlib's APPO).
3. loss: the IMPACT surrogate, ratio = clip(mu/pi_target, 0, is_clip) * pi_theta/mu inside PPO's
   clip, value loss against the V-trace targets, entropy bonus. It is models/rl/ppo.py `ppo_loss`
   with an anchor log-prob (`impact_anchor_logp`), so the clipped surrogate has one home.
4. every `target_update_every` learner steps the target network becomes a hard copy of the policy.

Versions: the learner's version is its number of learner steps; an actor tags each fragment with
the version of the weights it sampled with, and policy lag = learner version - that version.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from models.envs.batch import EnvSpaces
from models.errors import ConfigError, NonFiniteError
from models.impact.buffer import FragmentBuffer, ImpactFragment
from models.impact.config import ImpactConfig
from models.impact.vtrace import vtrace
from models.rl.gae import next_values_for
from models.rl.normalization import NormStats, RunningMeanStd, merged_with_deltas, shipped_stats
from models.rl.policy import ActorCritic, cpu_policy
from models.rl.ppo import LossCoefficients, ppo_loss, select_device


def impact_anchor_logp(behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
                       is_clip: float) -> torch.Tensor:
    """The log-prob that PPO's ratio is taken against, so that exp(new - anchor) equals IMPACT's
    clip(mu/pi_target, 0, is_clip) * pi_theta/mu: where mu/pi_target <= is_clip the anchor is
    log pi_target, else log mu - log is_clip (mu > 0 for a sampled action, so 0 is never hit)."""
    return torch.maximum(target_logp, behaviour_logp - math.log(is_clip))


def weights_vector(module: torch.nn.Module) -> np.ndarray:
    """All of a module's state as one float32 vector (what actors read from shared memory)."""
    return torch.cat([v.detach().cpu().reshape(-1).float() for v in module.state_dict().values()]).numpy()


def load_weights_vector(module: torch.nn.Module, vector: np.ndarray) -> None:
    """Inverse of weights_vector, for a module built the same way."""
    state, offset = {}, 0
    for name, value in module.state_dict().items():
        n = value.numel()
        state[name] = torch.as_tensor(vector[offset:offset + n]).reshape(value.shape).to(value.dtype)
        offset += n
    if offset != len(vector):
        raise ValueError(f"weights vector has {len(vector)} values, the module {offset}")
    module.load_state_dict(state)


class ImpactLearner:
    """The policy, its target network, the buffer and the optimiser; one `step` per gradient step."""

    def __init__(self, spaces: EnvSpaces, cfg: ImpactConfig, seed: int = 0, device: str = "auto"):
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        if len(spaces.obs_shape) != 1:
            raise ConfigError("IMPACT here supports vector observations (MLP policies) only")
        self.cfg = cfg
        self.device = select_device(device)
        self.policy = ActorCritic(spaces, cfg.hidden, init_log_std=cfg.init_log_std).to(self.device)
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate, eps=1e-5)
        self.buffer = FragmentBuffer(cfg.buffer_fragments, cfg.max_reuse, np.random.default_rng(seed))
        self.version = 0  # learner steps done
        self.target_version = 0  # the learner version the target network is a copy of
        self.coefficients = LossCoefficients(clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef,
                                             ent_coef=cfg.ent_coef, norm_adv=cfg.norm_adv)
        self.obs_rms = RunningMeanStd(spaces.obs_shape) if cfg.normalize_obs else None
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None

    def add(self, fragment: ImpactFragment) -> None:
        # Merged on arrival, not when sampled: a fragment is reused up to K times, its data counts once.
        # Training uses the fragment's observations as its actor normalised them (PPO's rule): the
        # behaviour log-probs, target and current network then all score the same inputs.
        deltas = fragment.batch.norm_deltas
        self.obs_rms = merged_with_deltas(self.obs_rms, [deltas.obs])
        self.ret_rms = merged_with_deltas(self.ret_rms, [deltas.reward])
        self.buffer.add(fragment)

    def norm_state(self) -> NormStats | None:
        """The merged statistics actors normalise with next, published with the weights."""
        return shipped_stats(self.obs_rms, self.ret_rms, self.cfg.gamma)

    def weights_vector(self) -> np.ndarray:
        return weights_vector(self.policy)

    def policy_on_cpu(self) -> ActorCritic:
        """The policy for acting in this process (a CPU copy when learning on a GPU)."""
        return cpu_policy(self.policy)

    # -- targets ------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self, fragments: list[ImpactFragment]):
        batches = [f.batch for f in fragments]
        for b in batches:
            if not (np.isfinite(b.rewards).all() and np.isfinite(b.obs).all()):
                raise NonFiniteError(f"actor {b.actor_index} returned non-finite rewards or observations")
        lengths = {b.rewards.shape[0] for b in batches}
        if len(lengths) != 1:
            raise ValueError(f"fragments of different lengths cannot be batched: {sorted(lengths)}")
        obs = np.concatenate([b.obs for b in batches], axis=1)
        t_len, n_envs = obs.shape[:2]
        offsets = np.cumsum([0] + [b.rewards.shape[1] for b in batches[:-1]])
        trunc_index = np.concatenate([b.trunc_index + np.array([0, off]) for b, off in zip(batches, offsets, strict=True)])
        trunc_obs = np.concatenate([b.trunc_obs for b in batches])
        last_obs = np.concatenate([b.last_obs for b in batches])
        flat = t_len * n_envs
        all_obs = self._tensor(np.concatenate([obs.reshape(flat, *obs.shape[2:]), last_obs, trunc_obs]))
        all_values = self.policy.value(all_obs).cpu().numpy().astype(np.float64)
        values = all_values[:flat].reshape(t_len, n_envs)
        next_values = next_values_for(values, all_values[flat:flat + n_envs], trunc_index,
                                      all_values[flat + n_envs:])
        actions = np.concatenate([b.actions for b in batches], axis=1)
        actions_t = torch.as_tensor(actions.reshape(flat, *actions.shape[2:]), device=self.device)
        target_logp = self.target.evaluate(all_obs[:flat], actions_t)[0]
        behaviour_logp = np.concatenate([b.logp for b in batches], axis=1)
        vt = vtrace(behaviour_logp, target_logp.cpu().numpy().reshape(t_len, n_envs),
                    np.concatenate([b.rewards for b in batches], axis=1), values, next_values,
                    np.concatenate([b.terminated for b in batches], axis=1),
                    np.concatenate([b.truncated for b in batches], axis=1),
                    self.cfg.gamma, self.cfg.rho_bar, self.cfg.c_bar, self.cfg.vtrace_lambda)
        lag = np.repeat([self.version - f.behaviour_version for f in fragments],
                        [t_len * b.rewards.shape[1] for b in batches])
        return (all_obs[:flat], actions_t, self._tensor(behaviour_logp.reshape(flat)), target_logp,
                self._tensor(vt.advantages.reshape(flat)), self._tensor(vt.vs.reshape(flat)), vt, lag)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    # -- one learner step -----------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """One gradient step on a batch from the buffer; returns train/... and impact/... figures."""
        if len(self.buffer) == 0:
            raise RuntimeError("learner step with an empty buffer")
        t0 = time.perf_counter()
        cfg = self.cfg
        fragments = self.buffer.sample(cfg.batch_fragments)
        obs, actions, behaviour_logp, target_logp, advantages, vs, vt, lag = self._prepare(fragments)
        new_logp, entropy, new_values = self.policy.evaluate(obs, actions)
        anchor = impact_anchor_logp(behaviour_logp, target_logp, cfg.is_clip)
        out = ppo_loss(new_logp, anchor, advantages, new_values, None, vs, entropy, self.coefficients)
        if not torch.isfinite(out.loss):
            raise NonFiniteError(f"learner step {self.version}: the IMPACT loss is {float(out.loss)}")
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        if not torch.isfinite(grad_norm):
            raise NonFiniteError(f"learner step {self.version}: the gradient norm is {float(grad_norm)}")
        self.optimizer.step()
        self.version += 1
        if self.version % cfg.target_update_every == 0:
            self.target.load_state_dict(self.policy.state_dict())
            self.target_version = self.version
        with torch.no_grad():
            is_ratio = (behaviour_logp - target_logp).exp()
        stats = {
            "train/loss": float(out.loss.detach()), "train/policy_loss": float(out.policy_loss.detach()),
            "train/value_loss": float(out.value_loss.detach()), "train/entropy": float(out.entropy.detach()),
            "train/approx_kl": float(out.approx_kl), "train/clipfrac": float(out.clipfrac),
            "train/grad_norm": float(grad_norm),
            "impact/policy_lag_mean": float(lag.mean()), "impact/policy_lag_max": float(lag.max()),
            "impact/rho_mean": float(vt.rhos.mean()),
            "impact/rho_clipped_frac": float((vt.rhos > cfg.rho_bar).mean()),
            "impact/c_clipped_frac": float((vt.rhos > cfg.c_bar).mean()),
            "impact/is_ratio_clipped_frac": float((is_ratio > cfg.is_clip).float().mean()),
            "impact/vtrace_target_mean": float(vt.vs.mean()),
            "impact/batch_env_steps": float(len(lag)),
            "time/learner_step_s": time.perf_counter() - t0,
        }
        return stats


class StatsAccumulator:
    """Per-step learner figures over a chunk: means, except *_max (max) and batch_env_steps (sum)."""

    def __init__(self):
        self._sums: dict[str, float] = {}
        self._n = 0

    def add(self, stats: dict[str, float]) -> None:
        self._n += 1
        for key, value in stats.items():
            if key.endswith("_max"):
                self._sums[key] = max(self._sums.get(key, -math.inf), value)
            else:
                self._sums[key] = self._sums.get(key, 0.0) + value

    def result(self) -> dict[str, float]:
        if not self._n:
            return {}
        out = {}
        for key, value in self._sums.items():
            summed = key.endswith("_max") or key in ("impact/batch_env_steps", "time/learner_step_s")
            out[key] = value if summed else value / self._n
        out["train/grad_steps"] = float(self._n)
        return out

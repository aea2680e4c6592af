"""Networks and action heads for Atari (Nature CNN) and continuous control (diagonal Gaussian).

Continuous actions: the policy samples from N(mean, exp(log_std)) with a state-independent
log_std parameter (CleanRL ppo_continuous_action.py). The *unclipped* sample is what is stored
in the batch and re-scored by the learner; clipping to the action space's bounds happens only
in the env step (``np.clip(action, low, high)``), as in CleanRL (its ClipAction wrapper) and
SB3. Storing the clipped action would make the stored log-prob disagree with the action.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _init(layer: nn.Module, gain: float, orthogonal: bool = True) -> nn.Module:
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """Mnih et al. (2015)'s encoder with CleanRL's separate policy and value heads on it.

    Input: uint8 frames (B, 4, 84, 84), numpy or torch; they are scaled by 1/255 inside
    ``features``. Trunk: conv 32x8x8/4, conv 64x4x4/2, conv 64x3x3/1, Linear 3136->512, ReLU
    after each; orthogonal init with gain sqrt(2). Heads: policy Linear 512->n_actions
    (gain 0.01), value Linear 512->1 (gain 1).

    ``orthogonal_init=False`` keeps torch's cheap default init: for actors that load the
    learner's weights straight away (the orthogonal init's QR of the 512x3136 matrix costs
    about 0.1 s on one core, more on a busy one).
    """

    def __init__(self, n_actions: int, in_channels: int = 4, orthogonal_init: bool = True):
        super().__init__()
        gain, o = math.sqrt(2), orthogonal_init
        self.trunk = nn.Sequential(
            _init(nn.Conv2d(in_channels, 32, 8, stride=4), gain, o), nn.ReLU(),
            _init(nn.Conv2d(32, 64, 4, stride=2), gain, o), nn.ReLU(),
            _init(nn.Conv2d(64, 64, 3, stride=1), gain, o), nn.ReLU(),
            nn.Flatten(),
            _init(nn.Linear(64 * 7 * 7, 512), gain, o), nn.ReLU(),
        )
        self.policy_head = _init(nn.Linear(512, n_actions), 0.01, o)
        self.value_head = _init(nn.Linear(512, 1), 1.0, o)

    def features(self, obs: torch.Tensor | np.ndarray) -> torch.Tensor:
        """The 512-unit shared representation of uint8 frames."""
        x = torch.as_tensor(obs, device=self.value_head.weight.device)
        return self.trunk(x.float() / 255.0)

    def forward(self, obs: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, n_actions), values (B,)) from one trunk pass."""
        h = self.features(obs)
        return self.policy_head(h), self.value_head(h).squeeze(-1)

    def logits(self, obs: torch.Tensor | np.ndarray) -> torch.Tensor:
        return self.policy_head(self.features(obs))

    def value(self, obs: torch.Tensor | np.ndarray) -> torch.Tensor:
        return self.value_head(self.features(obs)).squeeze(-1)


class DiagGaussianHead:
    """Diagonal Gaussian actions; log-probs and entropies are summed over action dimensions.

    ``log_std`` is the policy's state-independent parameter, shape (act_dim,) or (1, act_dim);
    it broadcasts against ``mean`` (B, act_dim). Same formulas as torch.distributions.Normal,
    without its per-call overhead.
    """

    @staticmethod
    def sample(mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None = None):
        """(actions, log-probs (B,)): unclipped actions; clip only when stepping the env."""
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        actions = mean + log_std.exp() * noise
        logp = (-0.5 * noise.square() - log_std - LOG_SQRT_2PI).sum(-1)
        return actions, logp

    @staticmethod
    def log_prob_entropy(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor):
        """Log-prob of given actions and the entropy, each (B,)."""
        z = (actions - mean) / log_std.exp()
        logp = (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + LOG_SQRT_2PI + log_std).expand_as(mean).sum(-1)
        return logp, entropy

    @staticmethod
    def mode(mean: torch.Tensor) -> torch.Tensor:
        return mean


_NUMPY_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda h: np.maximum(h, 0.0)}


class NumpyGaussianSampler:
    """The MLP Gaussian actor's forward pass and sampling in numpy (the actors' hot loop).

    A snapshot of ``actor`` (an nn.Sequential of Linear layers and Tanh/ReLU activations that
    outputs the mean) and ``log_std``. Returns unclipped float32 actions and their log-probs,
    computed exactly as DiagGaussianHead.log_prob_entropy re-scores them. Observations must
    already be normalised (models.normalization.ObservationNormalizer).
    """

    def __init__(self, actor: nn.Sequential, log_std: torch.Tensor, seed: int):
        self.ops: list[tuple[str, object]] = []
        for module in actor:
            if isinstance(module, nn.Linear):
                self.ops.append(("linear", (module.weight.detach().cpu().numpy().T.copy(),
                                            module.bias.detach().cpu().numpy().copy())))
            elif type(module) in _NUMPY_ACTIVATIONS:
                self.ops.append(("act", _NUMPY_ACTIVATIONS[type(module)]))
            else:
                raise TypeError(f"NumpyGaussianSampler cannot run {type(module).__name__}")
        self.log_std = log_std.detach().cpu().numpy().astype(np.float32).reshape(-1)
        self.std = np.exp(self.log_std)
        self.rng = np.random.default_rng(seed)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        h = np.asarray(obs, dtype=np.float32).reshape(obs.shape[0], -1)
        for kind, op in self.ops:
            if kind == "linear":
                weight, bias = op
                h = h @ weight + bias
            else:
                h = op(h)
        return h

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = self.mean(obs)
        noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        actions = mean + self.std * noise
        z = (actions - mean) / self.std  # from the stored float32 action, as the learner does
        logp = (-0.5 * z * z - self.log_std - np.float32(LOG_SQRT_2PI)).sum(-1)
        return actions, logp

"""Actor-critic networks and their action heads.

One class serves both sides: actors call `act` (sampling with no torch.distributions
overhead), the learner calls `evaluate` to re-score stored actions and read values.
"""

from __future__ import annotations

import io
import math

import numpy as np
import torch
from torch import nn

from models.envs import EnvSpaces


def _layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [_layer(n_in, width, math.sqrt(2)), nn.Tanh()]
        n_in = width
    layers.append(_layer(n_in, n_out, out_gain))
    return nn.Sequential(*layers)


class CategoricalHead:
    """Discrete actions from logits."""

    @staticmethod
    def sample(logits: torch.Tensor, generator: torch.Generator | None):
        log_probs = torch.log_softmax(logits, dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def log_prob_entropy(logits: torch.Tensor, actions: torch.Tensor):
        log_probs = torch.log_softmax(logits, dim=-1)
        logp = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return logp, entropy

    @staticmethod
    def mode(logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs (CleanRL's layout); the head depends on the action space."""

    def __init__(self, spaces: EnvSpaces, hidden: tuple[int, ...] = (64, 64)):
        super().__init__()
        if not spaces.discrete:
            raise NotImplementedError("continuous action spaces need the Gaussian head (MuJoCo issue)")
        self.spaces = spaces
        self.hidden = tuple(hidden)
        n_obs = int(np.prod(spaces.obs_shape))
        self.actor = mlp(n_obs, self.hidden, spaces.n_actions, out_gain=0.01)
        self.critic = mlp(n_obs, self.hidden, 1, out_gain=1.0)
        self.head = CategoricalHead()

    # -- actors' hot path ------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, generator: torch.Generator | None = None):
        """Sample actions for a batch of observations: (actions, log-probs) as numpy."""
        logits = self.actor(torch.as_tensor(obs, dtype=torch.float32))
        actions, logp = self.head.sample(logits, generator)
        return actions.numpy(), logp.numpy()

    def sampler(self, seed: int) -> NumpyCategoricalSampler:
        """A snapshot of the current policy for the actors' hot loop (see NumpyCategoricalSampler)."""
        return NumpyCategoricalSampler(self.actor, seed)

    # -- learner -----------------------------------------------------------------------------
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-prob and entropy of given actions, and state values."""
        logp, entropy = self.head.log_prob_entropy(self.actor(obs), actions)
        return logp, entropy, self.value(obs)


class NumpyCategoricalSampler:
    """The MLP policy's forward pass and sampling in numpy.

    For 64-unit MLPs torch's per-call dispatch dominates: measured 0.18 ms per call against
    0.046 ms here on one core, which is most of an actor's time on CartPole.
    """

    def __init__(self, actor: nn.Sequential, seed: int):
        linears = [m for m in actor if isinstance(m, nn.Linear)]
        self.layers = [(m.weight.detach().cpu().numpy().T.copy(), m.bias.detach().cpu().numpy().copy())
                       for m in linears]
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.asarray(obs, dtype=np.float32).reshape(obs.shape[0], -1)
        for weight, bias in self.layers[:-1]:
            h = np.tanh(h @ weight + bias)
        weight, bias = self.layers[-1]
        logits = h @ weight + bias
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        cdf = np.exp(log_probs).cumsum(-1)
        u = self.rng.random((obs.shape[0], 1)) * cdf[:, -1:]
        actions = np.minimum((cdf < u).sum(-1), log_probs.shape[-1] - 1)
        return actions, log_probs[np.arange(actions.shape[0]), actions]


def weights_to_bytes(model: nn.Module) -> bytes:
    """CPU state dict as bytes: what travels to actors."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def weights_from_bytes(model: nn.Module, blob: bytes) -> None:
    model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True))

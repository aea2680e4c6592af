"""The actor-critic policy: networks from models/rl/networks.py, heads from models/rl/action_heads.py.

One class serves both sides: actors call `act` (sampling with no torch.distributions
overhead), the learner calls `evaluate` to re-score stored actions and read values.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from torch import nn

from models.envs.batch import EnvSpaces
from models.rl.action_heads import (
    CategoricalHead,
    DiagGaussianHead,
    NumpyCategoricalSampler,
    NumpyGaussianSampler,
)
from models.rl.networks import NatureCNN, mlp


class ActorCritic(nn.Module):
    """The policy for an env's spaces; only the network and action head differ (as in CleanRL).

    - image observations (Atari): Nature CNN trunk shared by a categorical policy and value head;
    - vector observations, discrete actions: separate tanh MLPs, categorical head;
    - vector observations, continuous actions: separate tanh MLPs, diagonal Gaussian head with a
      state-independent log-std (starting at ``init_log_std``, which travels with the weights);
      stored actions are unclipped (the env step clips).
    """

    def __init__(self, spaces: EnvSpaces, hidden: tuple[int, ...] = (64, 64),
                 init_weights: bool = True, init_log_std: float = 0.0):
        super().__init__()
        self.spaces = spaces
        self.hidden = tuple(hidden)
        self.is_image = len(spaces.obs_shape) == 3
        if self.is_image:
            if not spaces.discrete:
                raise NotImplementedError("image observations with continuous actions")
            self.cnn = NatureCNN(spaces.n_actions, spaces.obs_shape[0], orthogonal_init=init_weights)
            self.head = CategoricalHead()
            return
        n_obs = int(np.prod(spaces.obs_shape))
        self.actor = mlp(n_obs, self.hidden, spaces.n_actions, out_gain=0.01)
        self.critic = mlp(n_obs, self.hidden, 1, out_gain=1.0)
        if spaces.discrete:
            self.head = CategoricalHead()
        else:
            self.head = DiagGaussianHead()
            self.log_std = nn.Parameter(torch.full((spaces.n_actions,), float(init_log_std)))

    def _dist_params(self, obs: torch.Tensor):
        if self.is_image:
            return (self.cnn.logits(obs),)
        if self.spaces.discrete:
            return (self.actor(obs),)
        return self.actor(obs), self.log_std

    # -- actors' hot path ------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, generator: torch.Generator | None = None):
        """Sample actions for a batch of observations: (actions, log-probs) as numpy."""
        actions, logp = self.head.sample(*self._dist_params(self._as_input(obs)), generator)
        return actions.numpy(), logp.numpy()

    @torch.no_grad()
    def mode(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions (for evaluation)."""
        return self.head.mode(self._dist_params(self._as_input(obs))[0]).numpy()

    def sampler(self, seed: int):
        """A snapshot of the current policy for the actors' hot loop.

        MLPs run in numpy (measured 4x faster than torch per call at this size); the CNN
        stays in torch, where the convolutions dominate.
        """
        if self.is_image:
            generator = torch.Generator().manual_seed(seed)
            return lambda obs: self.act(obs, generator)
        if self.spaces.discrete:
            return NumpyCategoricalSampler(self.actor, seed)
        return NumpyGaussianSampler(self.actor, self.log_std, seed)

    def _as_input(self, obs: np.ndarray) -> torch.Tensor:
        if self.is_image:  # frames stay uint8 until the network scales them
            return torch.as_tensor(obs)
        return torch.as_tensor(obs, dtype=torch.float32)

    # -- learner -----------------------------------------------------------------------------
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        if self.is_image:
            return self.cnn.value(obs)
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-prob and entropy of given actions, and state values."""
        if self.is_image:
            logits, values = self.cnn(obs)  # one trunk pass for both heads
            logp, entropy = self.head.log_prob_entropy(logits, actions)
            return logp, entropy, values
        logp, entropy = self.head.log_prob_entropy(*self._dist_params(obs), actions)
        return logp, entropy, self.value(obs)


def weights_to_bytes(model: nn.Module) -> bytes:
    """CPU state dict as bytes: what travels to actors."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def weights_from_bytes(model: nn.Module, blob: bytes) -> None:
    model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True))


def cpu_policy(policy: ActorCritic) -> ActorCritic:
    """The policy itself on the CPU, else a CPU copy of it (to act in this process while learning on a GPU)."""
    if next(policy.parameters()).device.type == "cpu":
        return policy
    copy = ActorCritic(policy.spaces, policy.hidden, init_weights=False)
    copy.load_state_dict({k: v.cpu() for k, v in policy.state_dict().items()})
    return copy

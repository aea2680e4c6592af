"""Network building blocks: orthogonally initialised layers, tanh MLPs and the Nature CNN.

Every network of the project is built here: the policy's actor and critic MLPs
(models/rl/policy.py), the scheduler agent's policy and value MLPs (models/scheduling/agent.py) and
the Atari encoder. Initialisation follows CleanRL: orthogonal weights (gain sqrt(2) in hidden
layers, 0.01 for a policy output, 1 for a value output) and zero biases.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

HIDDEN_GAIN = math.sqrt(2)
"""Orthogonal gain of hidden layers (tanh and ReLU alike, as in CleanRL)."""


def init_layer(layer: nn.Module, gain: float, orthogonal: bool = True) -> nn.Module:
    """Orthogonal weights with `gain` and zero bias, in place; `orthogonal=False` keeps torch's init."""
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, out_gain: float) -> nn.Sequential:
    """Linear-tanh layers of widths `hidden`, then a linear output layer with gain `out_gain`.

    Layers are created and initialised one at a time, first to last, so that a seeded run
    draws the same random numbers in the same order (same-seed runs are bit-identical).
    """
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [init_layer(nn.Linear(n_in, width), HIDDEN_GAIN), nn.Tanh()]
        n_in = width
    layers.append(init_layer(nn.Linear(n_in, n_out), out_gain))
    return nn.Sequential(*layers)


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
        gain, o = HIDDEN_GAIN, orthogonal_init
        self.trunk = nn.Sequential(
            init_layer(nn.Conv2d(in_channels, 32, 8, stride=4), gain, o), nn.ReLU(),
            init_layer(nn.Conv2d(32, 64, 4, stride=2), gain, o), nn.ReLU(),
            init_layer(nn.Conv2d(64, 64, 3, stride=1), gain, o), nn.ReLU(),
            nn.Flatten(),
            init_layer(nn.Linear(64 * 7 * 7, 512), gain, o), nn.ReLU(),
        )
        self.policy_head = init_layer(nn.Linear(512, n_actions), 0.01, o)
        self.value_head = init_layer(nn.Linear(512, 1), 1.0, o)

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

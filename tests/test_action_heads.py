"""Action heads: torch sampling and re-scoring, and the numpy samplers that must agree with them."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from models.rl.action_heads import DiagGaussianHead, NumpyGaussianSampler


@pytest.mark.parametrize("log_std_shape", [(3,), (1, 3)])
def test_gaussian_log_prob_and_entropy_match_torch_normal(log_std_shape):
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(7, 3, generator=g)
    log_std = torch.tensor([-1.0, 0.0, 0.7]).reshape(log_std_shape)
    actions = torch.randn(7, 3, generator=g) * 2
    logp, entropy = DiagGaussianHead.log_prob_entropy(mean, log_std, actions)
    normal = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(logp, normal.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, normal.entropy().sum(-1))
    assert logp.shape == entropy.shape == (7,)


def test_gaussian_sample_log_probs_and_moments():
    g = torch.Generator().manual_seed(1)
    mean = torch.tensor([[0.5, -2.0]]).expand(100_000, 2)
    log_std = torch.tensor([-0.5, 0.3])
    actions, logp = DiagGaussianHead.sample(mean, log_std, g)
    torch.testing.assert_close(logp, DiagGaussianHead.log_prob_entropy(mean, log_std, actions)[0],
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.02, rtol=0)
    torch.testing.assert_close(actions.std(0), log_std.exp(), atol=0.02, rtol=0)
    # the same generator seed gives the same actions
    again, _ = DiagGaussianHead.sample(mean, log_std, torch.Generator().manual_seed(1))
    torch.testing.assert_close(again, actions)


def make_actor(n_obs, n_act, seed=0):
    torch.manual_seed(seed)  # the layout of models.rl.networks.mlp: Linear/Tanh, 64x64
    actor = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_act))
    for layer in actor:  # a non-trivial mean
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.bias, std=0.5)
    return actor, torch.linspace(-1.5, 0.5, n_act)


@pytest.mark.parametrize("n_obs,n_act", [(11, 3), (376, 17)])  # Hopper, Humanoid sizes
def test_numpy_sampler_log_probs_match_torch_head(n_obs, n_act):
    actor, log_std = make_actor(n_obs, n_act)
    sampler = NumpyGaussianSampler(actor, log_std, seed=0)
    obs = np.random.default_rng(1).normal(size=(256, n_obs)).astype(np.float32)
    actions, logp = sampler(obs)
    assert actions.dtype == np.float32 and actions.shape == (256, n_act) and logp.shape == (256,)
    with torch.no_grad():
        mean = actor(torch.as_tensor(obs))
        torch_logp, _ = DiagGaussianHead.log_prob_entropy(mean, log_std, torch.as_tensor(actions))
    np.testing.assert_allclose(sampler.mean(obs), mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(logp, torch_logp.numpy(), atol=1e-5, rtol=0)


def test_numpy_sampler_moments_and_relu():
    torch.manual_seed(2)
    actor = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    log_std = torch.tensor([0.2, -0.8])
    sampler = NumpyGaussianSampler(actor, log_std, seed=3)
    obs = np.tile(np.array([[0.3, -0.1, 2.0, 1.0]], dtype=np.float32), (100_000, 1))
    actions, _ = sampler(obs)
    with torch.no_grad():
        mean = actor(torch.as_tensor(obs[:1])).numpy()[0]
    np.testing.assert_allclose(actions.mean(0), mean, atol=0.02)
    np.testing.assert_allclose(actions.std(0), np.exp(log_std.numpy()), atol=0.02)
    # seeded: the same seed gives the same actions
    np.testing.assert_array_equal(NumpyGaussianSampler(actor, log_std, seed=3)(obs[:5])[0], actions[:5])


def test_numpy_sampler_rejects_unknown_layers():
    with pytest.raises(TypeError):
        NumpyGaussianSampler(nn.Sequential(nn.Linear(2, 2), nn.Dropout()), torch.zeros(2), seed=0)


def test_entropy_of_standard_normal():
    _, entropy = DiagGaussianHead.log_prob_entropy(torch.zeros(1, 4), torch.zeros(4), torch.zeros(1, 4))
    assert entropy.item() == pytest.approx(4 * (0.5 + 0.5 * math.log(2 * math.pi)))

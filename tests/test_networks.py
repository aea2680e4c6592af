"""Network building blocks: the tanh MLP and the Nature CNN, and their initialisation."""

import numpy as np
import torch
from torch import nn

from models.rl.networks import NatureCNN, mlp


def test_nature_cnn_shapes_and_init():
    torch.manual_seed(0)
    net = NatureCNN(n_actions=6)
    obs = np.random.default_rng(0).integers(0, 256, size=(5, 4, 84, 84), dtype=np.uint8)
    logits, values = net(obs)
    assert logits.shape == (5, 6) and values.shape == (5,)
    assert net.logits(torch.as_tensor(obs)).shape == (5, 6) and net.value(obs).shape == (5,)
    assert net.features(obs).shape == (5, 512)
    torch.testing.assert_close(net.logits(obs), logits)
    # orthogonal init: rows of the policy head are orthogonal with norm 0.01
    w = net.policy_head.weight.detach()
    torch.testing.assert_close(w @ w.T, 1e-4 * torch.eye(6), atol=1e-7, rtol=0)
    assert torch.count_nonzero(net.trunk[0].bias) == 0


def test_nature_cnn_without_orthogonal_init_loads_weights():
    learner = NatureCNN(n_actions=4)
    actor = NatureCNN(n_actions=4, orthogonal_init=False)
    actor.load_state_dict(learner.state_dict())
    frames = torch.zeros((1, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(actor(frames), learner(frames))


def test_nature_cnn_scales_uint8_inside():
    net = NatureCNN(n_actions=4, orthogonal_init=False)
    frames = torch.full((2, 4, 84, 84), 255, dtype=torch.uint8)
    torch.testing.assert_close(net.features(frames), net.trunk(torch.ones(2, 4, 84, 84)))


def test_mlp_layout_and_orthogonal_init():
    torch.manual_seed(0)
    net = mlp(5, (16, 8), 3, out_gain=0.01)
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.Tanh, nn.Linear, nn.Tanh, nn.Linear]
    assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [16, 8, 3]
    first, head = net[0].weight.detach(), net[-1].weight.detach()
    torch.testing.assert_close(first.T @ first, 2.0 * torch.eye(5), atol=1e-5, rtol=0)  # gain sqrt(2)
    torch.testing.assert_close(head @ head.T, 1e-4 * torch.eye(3), atol=1e-7, rtol=0)
    assert all(torch.count_nonzero(m.bias) == 0 for m in net if isinstance(m, nn.Linear))


def test_mlp_is_seeded():
    torch.manual_seed(3)
    a = mlp(4, (8,), 2, out_gain=1.0)
    torch.manual_seed(3)
    b = mlp(4, (8,), 2, out_gain=1.0)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))

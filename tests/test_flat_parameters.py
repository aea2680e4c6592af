"""Flat weight and gradient buffers with FlatAdam: the arithmetic of torch's Adam and clip, bit for bit."""

from __future__ import annotations

import pytest
import torch

from models.envs.batch import env_spaces
from models.rl.flat_parameters import FlatAdam, FlatParameters, flat_adam_state
from models.rl.policy import ActorCritic


def policy(env_id: str = "Hopper-v5", seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(env_spaces(env_id), (64, 64), init_log_std=-0.5)


def loss_of(model: ActorCritic, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    obs = torch.randn(64, model.spaces.obs_shape[0], generator=g) * 3
    if model.spaces.discrete:
        actions = torch.randint(0, model.spaces.n_actions, (64,), generator=g)
    else:
        actions = torch.randn(64, model.spaces.n_actions, generator=g)
    logp, entropy, values = model.evaluate(obs, actions)
    return -(logp * torch.randn(64, generator=g)).mean() + ((values - 5.0) ** 2).mean() - 0.01 * entropy.mean()


def torch_steps(model: ActorCritic, optimizer: torch.optim.Optimizer, steps: range, max_norm: float) -> list[float]:
    norms = []
    for step in steps:
        optimizer.zero_grad()
        loss_of(model, step).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)))
        optimizer.step()
    return norms


def flat_steps(model: ActorCritic, flat: FlatParameters, optimizer: FlatAdam, steps: range,
               max_norm: float) -> list[float]:
    norms = []
    for step in steps:
        flat.zero_grad()
        loss_of(model, step).backward()
        norms.append(float(flat.clip_grad_norm_(max_norm)))
        optimizer.step()
    return norms


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("env_id", ["Hopper-v5", "CartPole-v1"])
@pytest.mark.parametrize("max_norm", [0.05, 100.0])  # clipping every step / never
def test_flat_buffers_and_flat_adam_equal_torch_adam_and_clip_bit_for_bit(env_id, max_norm):
    reference, fast = policy(env_id), policy(env_id)
    assert same_weights(reference, fast)
    torch_adam = torch.optim.Adam(reference.parameters(), lr=3e-3, eps=1e-5, foreach=True)
    flat = FlatParameters(fast)
    flat_adam = FlatAdam(flat.flat, lr=3e-3, eps=1e-5)
    expected = torch_steps(reference, torch_adam, range(25), max_norm)
    got = flat_steps(fast, flat, flat_adam, range(25), max_norm)
    assert got == expected
    assert same_weights(reference, fast)
    assert not same_weights(reference, policy(env_id))  # the steps did change the weights
    # the module's own parameters are views of the buffer the optimiser stepped
    assert torch.equal(torch.cat([p.reshape(-1) for p in fast.parameters()]), flat.flat.detach())


def test_flat_adam_state_is_torch_adams_format_both_ways():
    a, b = policy(seed=1), policy(seed=1)
    flat_a, flat_b = FlatParameters(a), FlatParameters(b)
    adam_a = FlatAdam(flat_a.flat, lr=1e-3, eps=1e-5)
    flat_steps(a, flat_a, adam_a, range(5), 0.5)
    b.load_state_dict(a.state_dict())
    torch_b = torch.optim.Adam([flat_b.flat], lr=1e-3, eps=1e-5, foreach=True)
    torch_b.load_state_dict(adam_a.state_dict())  # FlatAdam's state into torch's Adam
    flat_steps(a, flat_a, adam_a, range(5, 10), 0.5)
    flat_steps(b, flat_b, torch_b, range(5, 10), 0.5)
    assert same_weights(a, b)
    # and back: torch's state into a fresh FlatAdam
    adam_b = FlatAdam(flat_b.flat, lr=0.5, eps=1e-5)
    adam_b.load_state_dict(torch_b.state_dict())
    assert adam_b.param_groups[0]["lr"] == 1e-3
    flat_steps(a, flat_a, adam_a, range(10, 12), 0.5)
    flat_steps(b, flat_b, adam_b, range(10, 12), 0.5)
    assert same_weights(a, b)


def test_a_per_parameter_adam_state_from_an_older_checkpoint_continues_exactly():
    """Checkpoints written before the flat buffers hold one Adam state per parameter tensor."""
    old, new = policy(seed=2), policy(seed=2)
    old_adam = torch.optim.Adam(old.parameters(), lr=2e-3, eps=1e-5, foreach=True)
    torch_steps(old, old_adam, range(4), 0.5)
    new.load_state_dict(old.state_dict())
    flat = FlatParameters(new)
    adam = FlatAdam(flat.flat, lr=2e-3, eps=1e-5)
    adam.load_state_dict(flat_adam_state(old_adam.state_dict(), flat))
    torch_steps(old, old_adam, range(4, 9), 0.5)
    flat_steps(new, flat, adam, range(4, 9), 0.5)
    assert same_weights(old, new)


def test_mismatched_optimizer_states_are_refused():
    a = policy()
    flat = FlatParameters(a)
    other = ActorCritic(env_spaces("CartPole-v1"), (16,))
    state = torch.optim.Adam(other.parameters(), lr=1e-3).state_dict()
    with pytest.raises(ValueError, match="parameters in one group"):
        flat_adam_state(state, flat)
    small = FlatParameters(other)
    small_adam = FlatAdam(small.flat, lr=1e-3)
    flat_steps(other, small, small_adam, range(1), 1.0)
    with pytest.raises(ValueError, match="shape"):
        FlatAdam(flat.flat, lr=1e-3).load_state_dict(small_adam.state_dict())


def test_a_detached_gradient_view_is_caught_before_it_silently_stops_training():
    model = policy()
    flat = FlatParameters(model)
    flat.check_views()
    model.zero_grad(set_to_none=True)  # what torch's optimisers do by default
    with pytest.raises(RuntimeError, match="no longer views the flat buffer"):
        flat.check_views()

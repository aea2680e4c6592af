"""The actors' numpy sampler agrees with the learner's torch policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.envs import EnvSpaces
from models.policy import ActorCritic, NumpyCategoricalSampler, weights_from_bytes, weights_to_bytes

SPACES = EnvSpaces(obs_shape=(3,), obs_dtype=np.dtype(np.float32), discrete=True, n_actions=4)


@pytest.fixture
def policy() -> ActorCritic:
    torch.manual_seed(0)
    model = ActorCritic(SPACES, (16, 16))
    with torch.no_grad():  # the 0.01 output gain makes every policy near-uniform; sharpen it
        model.actor[-1].weight.mul_(200.0)
        model.actor[-1].bias.copy_(torch.tensor([0.5, -0.5, 1.0, 0.0]))
    return model


def observations(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, size=(n, 3)).astype(np.float32)


def test_sampler_log_probs_match_evaluate(policy):
    obs = observations(500)
    actions, logp = policy.sampler(seed=3)(obs)
    assert actions.shape == (500,) and logp.shape == (500,)
    assert set(np.unique(actions)) <= {0, 1, 2, 3}
    ref_logp, entropy, _ = policy.evaluate(torch.as_tensor(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(logp, ref_logp.detach().numpy(), atol=1e-5)
    # The test policy really is non-uniform, so matching log-probs is not a coincidence.
    assert ref_logp.detach().numpy().std() > 0.1


def test_sampler_frequencies_match_softmax(policy):
    n = 40_000
    one_obs = observations(1, seed=7)
    probs = torch.softmax(policy.actor(torch.as_tensor(one_obs)), -1).detach().numpy()[0]
    assert probs.min() > 0.02 and probs.max() < 0.9  # every action has a useful expected count
    actions, _ = policy.sampler(seed=123)(np.repeat(one_obs, n, axis=0))
    counts = np.bincount(actions, minlength=4)
    expected = probs * n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 16.27, (counts, expected)  # 99.9% quantile of chi-square with 3 dof
    np.testing.assert_allclose(counts / n, probs, atol=0.01)


def test_sampler_is_seeded(policy):
    obs = observations(200)
    a1, l1 = policy.sampler(seed=42)(obs)
    a2, l2 = policy.sampler(seed=42)(obs)
    a3, _ = policy.sampler(seed=43)(obs)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(l1, l2)
    assert (a1 != a3).any()


def test_sampler_is_a_snapshot_of_the_weights(policy):
    sampler = NumpyCategoricalSampler(policy.actor, seed=0)
    obs = observations(50)
    before = sampler(obs)
    with torch.no_grad():
        policy.actor[-1].bias.add_(5.0)
    sampler.rng = np.random.default_rng(0)
    after = sampler(obs)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


def test_weights_round_trip_through_bytes(policy):
    torch.manual_seed(99)
    other = ActorCritic(SPACES, (16, 16))
    obs = torch.as_tensor(observations(20))
    assert not torch.allclose(other.actor(obs), policy.actor(obs))
    weights_from_bytes(other, weights_to_bytes(policy))
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), policy.state_dict().values(),
                                                  strict=True))


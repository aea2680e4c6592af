"""The actors' numpy sampler agrees with the learner's torch policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.envs.batch import EnvSpaces, env_spaces
from models.rl.action_heads import NumpyCategoricalSampler
from models.rl.policy import ActorCritic, weights_from_bytes, weights_to_bytes
from tests.fingerprints import assert_same_fingerprint, fingerprint

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



# Fingerprints (tests/fingerprints.py) of ActorCritic(spaces) after torch.manual_seed(0), one thread:
# the same seed gives the same initial network (recorded from the code whose sha256 digests of the
# raw bytes matched the pre-restructuring ones on the AMD machines; these hold on Intel ones too).
INIT_FINGERPRINT = {
    "CartPole-v1": {
        "actor.0.weight": (256.0, 5.7801317, 35.2872975, -0.0247658, -0.2297983, -0.1013095),
        "actor.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "actor.2.weight": (4096.0, -3.676853, 578.9489221, 0.1359587, -0.034065, 0.1942886),
        "actor.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "actor.4.weight": (128.0, -0.0033929, 0.1265765, 0.0005608, -0.001367, -0.0016173),
        "actor.4.bias": (2.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.0.weight": (256.0, -2.9930069, 36.1121831, 0.0401651, -0.075482, -0.3595178),
        "critic.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.2.weight": (4096.0, -2.7096466, 580.1842126, 0.041425, 0.4184303, -0.2419361),
        "critic.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.4.weight": (64.0, -0.4154671, 6.1548695, -0.2423799, 0.0220741, -0.0946777),
        "critic.4.bias": (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    },
    "Hopper-v5": {
        "log_std": (3.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "actor.0.weight": (704.0, 4.6165503, 100.425234, 0.1000202, -0.069156, 0.0708045),
        "actor.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "actor.2.weight": (4096.0, -7.7928911, 580.5595905, -0.3362209, -0.1743782, 0.0866079),
        "actor.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "actor.4.weight": (192.0, -0.0062417, 0.1938355, -0.0011044, -0.0024659, -0.0032581),
        "actor.4.bias": (3.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.0.weight": (704.0, -13.7631702, 100.3305259, 0.2488572, -0.2243419, 0.1465505),
        "critic.0.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.2.weight": (4096.0, -10.933026, 578.1777202, 0.2117063, 0.0171487, 0.0872692),
        "critic.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "critic.4.weight": (64.0, -0.7947089, 6.6245951, -0.1279273, -0.122482, 0.0689655),
        "critic.4.bias": (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    },
    "atari": {
        "cnn.trunk.0.weight": (8192.0, -1.9342724, 577.5898459, 0.0274892, -0.0991364, 0.0475337),
        "cnn.trunk.0.bias": (32.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "cnn.trunk.2.weight": (32768.0, 8.6830925, 1635.700204, -0.0701389, 0.036643, -0.0098235),
        "cnn.trunk.2.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "cnn.trunk.4.weight": (36864.0, -6.8839924, 1733.2556861, 0.016399, 0.0566809, 0.0633945),
        "cnn.trunk.4.bias": (64.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "cnn.trunk.7.weight": (1605632.0, -10.228168, 32349.7337664, -0.0169821, 0.017966, -0.011254),
        "cnn.trunk.7.bias": (512.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "cnn.policy_head.weight": (3072.0, 0.0141652, 1.0837946, 0.0004984, 0.0003943, 0.0002702),
        "cnn.policy_head.bias": (6.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        "cnn.value_head.weight": (512.0, 0.5464026, 18.1155863, 0.0064501, -0.0089822, -0.0024497),
        "cnn.value_head.bias": (1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    },
}


def init_spaces(name: str) -> EnvSpaces:
    if name == "atari":
        return EnvSpaces(obs_shape=(4, 84, 84), obs_dtype=np.dtype(np.uint8), discrete=True, n_actions=6)
    return env_spaces(name)


@pytest.mark.parametrize("name", sorted(INIT_FINGERPRINT))
def test_same_seed_initialisation_is_the_recorded_one(name):
    spaces = init_spaces(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the Learner runs; the orthogonal init's QR depends on threads
    try:
        torch.manual_seed(0)
        model = ActorCritic(spaces)
    finally:
        torch.set_num_threads(threads)
    assert_same_fingerprint(fingerprint(model.state_dict()), INIT_FINGERPRINT[name])

"""The actors' numpy sampler agrees with the learner's torch policy."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from models.action_heads import NumpyCategoricalSampler
from models.envs import EnvSpaces, env_spaces
from models.policy import ActorCritic, weights_from_bytes, weights_to_bytes

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



# sha256 of every parameter's bytes after torch.manual_seed(0); ActorCritic(spaces), captured from
# the code before the MLP and init helpers moved to models/networks.py. A change here means a
# same-seed training run no longer reproduces earlier ones.
INIT_SHA256 = {
    "CartPole-v1": {
        "actor.0.weight":
            "25e91d172c80338943b24165a0a1f96a098a8de07121f6e9ebf7f16b12c61571",
        "actor.0.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "actor.2.weight":
            "c583cd92f8ff20756aa01c3f471f0074dec2f0f0f115cd63344ab392ac970623",
        "actor.2.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "actor.4.weight":
            "33a1973f4408d670a761bae905b23c43403a41adc5081311ae68edd86c0e075f",
        "actor.4.bias":
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc",
        "critic.0.weight":
            "4b7df68fb164f1c8fde149f5b9d5ea95572b99a4e54a7b0818804309faa9aad9",
        "critic.0.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "critic.2.weight":
            "a1f0572390330ede8f1e90859b288ce679cb3fb830bfb9e9770b361868c408a3",
        "critic.2.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "critic.4.weight":
            "db9d6b44e9169774f3938eb3023de9b1424bc20167c72e9416165f6ecd07fc73",
        "critic.4.bias":
            "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119",
    },
    "Hopper-v5": {
        "log_std":
            "15ec7bf0b50732b49f8228e07d24365338f9e3ab994b00af08e5a3bffe55fd8b",
        "actor.0.weight":
            "ec7af006dc26e16e8df6599062abcbf03313613dabdaa4c5c8bb5b0a50a59bee",
        "actor.0.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "actor.2.weight":
            "fccc87e01c53651514efbc13e2eb0a1c46e897a733ffa3bdb7fdead466db3415",
        "actor.2.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "actor.4.weight":
            "bcd541900ec9d2fa08956a03cba2a0df1e4d81fc834214a0221bf5bace150e59",
        "actor.4.bias":
            "15ec7bf0b50732b49f8228e07d24365338f9e3ab994b00af08e5a3bffe55fd8b",
        "critic.0.weight":
            "2a43bef58792747f4ebeefa224bd45ab63a6311b43c1c2e240b5334d38bca8b4",
        "critic.0.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "critic.2.weight":
            "5eabe15068f89839ca10e0a4329a97dee12831a61fa31798f7df25ab7bef88d9",
        "critic.2.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "critic.4.weight":
            "0160e407a0b8d87d2b219c4b823993ade89c3756c15955c77bd1d4c4970406db",
        "critic.4.bias":
            "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119",
    },
    "atari": {
        "cnn.trunk.0.weight":
            "bd0282efd9a947f798e2dd988e1d591d5890ac0573c707bf4b00ca9700c6c3a3",
        "cnn.trunk.0.bias":
            "38723a2e5e8a17aa7950dc008209944e898f69a7bd10a23c839d341e935fd5ca",
        "cnn.trunk.2.weight":
            "aab341e70c278dcfff1553c9a2d2f0385335f1b96b2aa295f0a364c573180607",
        "cnn.trunk.2.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "cnn.trunk.4.weight":
            "5bea1d13ba20c71138103a6e66854cbf98e7f361cfcc00dbd505362e4da49066",
        "cnn.trunk.4.bias":
            "5341e6b2646979a70e57653007a1f310169421ec9bdd9f1a5648f75ade005af1",
        "cnn.trunk.7.weight":
            "225cce826bd9412cb0c726b6e1e019e7ef6c42335fe783462c0b5aa91b4df624",
        "cnn.trunk.7.bias":
            "e5a00aa9991ac8a5ee3109844d84a55583bd20572ad3ffcd42792f3c36b183ad",
        "cnn.policy_head.weight":
            "9aad4acbfa1f1a52fb2776f9add4e72bd5089534564b22eb1fa11879ca0550ac",
        "cnn.policy_head.bias":
            "9d908ecfb6b256def8b49a7c504e6c889c4b0e41fe6ce3e01863dd7b61a20aa0",
        "cnn.value_head.weight":
            "9b27ed436703321bea9d47abe5d1af2c47213c44ef06e81f2a12a0e7f2f1d393",
        "cnn.value_head.bias":
            "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119",
    },
}


def init_spaces(name: str) -> EnvSpaces:
    if name == "atari":
        return EnvSpaces(obs_shape=(4, 84, 84), obs_dtype=np.dtype(np.uint8), discrete=True, n_actions=6)
    return env_spaces(name)


@pytest.mark.parametrize("name", sorted(INIT_SHA256))
def test_same_seed_initialisation_is_bit_identical_to_the_recorded_one(name):
    spaces = init_spaces(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the Learner runs; the orthogonal init's QR depends on threads
    try:
        torch.manual_seed(0)
        model = ActorCritic(spaces)
    finally:
        torch.set_num_threads(threads)
    digests = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
               for k, v in model.state_dict().items()}
    assert digests == INIT_SHA256[name]

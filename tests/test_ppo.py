"""The PPO loss and the Learner: diagnostics, hand-computed advantages, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from models.envs.batch import env_spaces
from models.rl.ppo import Learner, LossCoefficients, ppo_loss
from models.rl.rollout import RolloutBatch
from models.run.config import PPOConfig


@pytest.fixture(scope="module")
def spaces():
    return env_spaces("CartPole-v1")


def t(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


# -- ppo_loss ------------------------------------------------------------------------------

ADV = [1.0, -2.0, 0.5, 3.0, -1.5, 0.0, 2.0, -0.5]


def loss_inputs(ratios: list[float], values=None, returns=None, entropy=None):
    old = torch.linspace(-1.5, -0.2, len(ratios))
    new = old + torch.log(t(ratios))
    n = len(ratios)
    values = t(values if values is not None else [0.0] * n)
    returns = t(returns if returns is not None else [0.0] * n)
    entropy = t(entropy if entropy is not None else [0.0] * n)
    return new, old, t(ADV[:n]), values, values.clone(), returns, entropy


def test_loss_coefficients_are_the_configs():
    assert LossCoefficients.from_config(PPOConfig()) == LossCoefficients()
    cfg = PPOConfig(clip_coef=0.1, vf_coef=0.25, ent_coef=0.01, norm_adv=False, clip_vloss=True)
    assert LossCoefficients.from_config(cfg) == LossCoefficients(0.1, 0.25, 0.01, False, True)


def test_value_clipping_needs_old_values():
    with pytest.raises(ValueError, match="old_values"):
        ppo_loss(*loss_inputs([1.0] * 4)[:4], None, *loss_inputs([1.0] * 4)[5:],
                 LossCoefficients(clip_vloss=True))
    out = ppo_loss(*loss_inputs([1.0] * 4)[:4], None, *loss_inputs([1.0] * 4)[5:], LossCoefficients())
    assert out.value_loss.item() == 0.0


def test_equal_logp_gives_zero_kl_and_clipfrac_and_zero_normalised_policy_loss():
    old = torch.linspace(-1.5, -0.2, 8)
    out = ppo_loss(old.clone(), old, t(ADV), t([0.0] * 8), t([0.0] * 8), t([0.0] * 8),
                   t([0.0] * 8), LossCoefficients(norm_adv=True))
    assert out.approx_kl.item() == 0.0
    assert out.clipfrac.item() == 0.0
    adv = np.array(ADV)
    normalised = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    assert out.policy_loss.item() == pytest.approx(-normalised.mean(), abs=1e-6)
    assert out.policy_loss.item() == pytest.approx(0.0, abs=1e-6)


def test_equal_logp_without_normalisation_gives_minus_mean_advantage():
    old = torch.linspace(-1.5, -0.2, 8)
    out = ppo_loss(old.clone(), old, t(ADV), t([0.0] * 8), t([0.0] * 8), t([0.0] * 8),
                   t([0.0] * 8), LossCoefficients(norm_adv=False))
    assert out.approx_kl.item() == 0.0 and out.clipfrac.item() == 0.0
    assert out.policy_loss.item() == pytest.approx(-sum(ADV) / 8, rel=1e-6)  # -0.3125


@pytest.mark.parametrize(
    ("ratios", "clip", "expected_clipfrac"),
    [
        ([1.0, 1.5, 1.1, 0.5, 1.3, 1.0, 1.0, 1.0], 0.2, 3 / 8),
        ([1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5], 0.2, 1.0),
        ([1.1, 0.9, 1.05, 0.95, 1.15, 0.85, 1.0, 1.0], 0.2, 0.0),
        ([1.1, 0.9, 1.05, 0.95, 1.15, 0.85, 1.0, 1.0], 0.08, 4 / 8),
        ([2.0, 3.0, 1.0, 1.0], 0.4, 2 / 4),
    ],
)
def test_clipfrac_is_the_fraction_of_ratios_outside_the_clip_range(ratios, clip, expected_clipfrac):
    out = ppo_loss(*loss_inputs(ratios), LossCoefficients(clip_coef=clip))
    assert out.clipfrac.item() == pytest.approx(expected_clipfrac, abs=1e-7)
    r = np.array(ratios)
    assert out.approx_kl.item() == pytest.approx(np.mean((r - 1) - np.log(r)), rel=1e-4, abs=1e-7)
    assert out.approx_kl.item() >= 0


def test_clipped_surrogate_by_hand():
    # norm_adv off so the advantages are used as given; clip 0.2.
    ratios = [1.5, 0.5, 1.5, 0.5]
    adv = [2.0, 2.0, -1.0, -1.0]
    new, old, _, values, old_values, returns, entropy = loss_inputs(ratios)
    out = ppo_loss(new, old, t(adv), values, old_values, returns, entropy,
                   LossCoefficients(clip_coef=0.2, norm_adv=False))
    # max(-A r, -A clip(r, 0.8, 1.2)) per sample:
    per_sample = [max(-2.0 * 1.5, -2.0 * 1.2),   # -2.4: gain capped at 1 + eps
                  max(-2.0 * 0.5, -2.0 * 0.8),   # -1.0: the unclipped, more pessimistic term
                  max(1.0 * 1.5, 1.0 * 1.2),     # 1.5
                  max(1.0 * 0.5, 1.0 * 0.8)]     # 0.8
    assert out.policy_loss.item() == pytest.approx(sum(per_sample) / 4, rel=1e-5)  # -0.275


def test_value_and_total_loss_by_hand():
    new, old, adv, _, _, _, _ = loss_inputs([1.0] * 4)
    new_values, old_values, returns = t([1.0, 2.0, 0.0, -1.0]), t([0.0, 2.5, 0.5, -1.0]), t([0.0, 0.0, 1.0, 1.0])
    entropy = t([0.5, 0.7, 0.6, 0.2])
    cfg = LossCoefficients(norm_adv=False, vf_coef=0.5, ent_coef=0.1, clip_coef=0.2)
    out = ppo_loss(new, old, adv, new_values, old_values, returns, entropy, cfg)
    # 0.5 * mean((v - R)^2) = 0.5 * (1 + 4 + 1 + 4) / 4
    assert out.value_loss.item() == pytest.approx(1.25, rel=1e-6)
    assert out.entropy.item() == pytest.approx(0.5, rel=1e-6)
    policy = -(1.0 - 2.0 + 0.5 + 3.0) / 4
    assert out.loss.item() == pytest.approx(policy + 0.5 * 1.25 - 0.1 * 0.5, rel=1e-6)

    clipped = ppo_loss(new, old, adv, new_values, old_values, returns, entropy,
                       LossCoefficients(norm_adv=False, clip_vloss=True, clip_coef=0.2))
    # clipped values: 0.2, 2.3, 0.3, -1.0 -> squared errors 0.04, 5.29, 0.49, 4
    # max with unclipped (1, 4, 1, 4) -> 1, 5.29, 1, 4
    assert clipped.value_loss.item() == pytest.approx(0.5 * (1 + 5.29 + 1 + 4) / 4, rel=1e-5)

    sb3 = ppo_loss(new, old, adv, new_values, old_values, returns, entropy,
                   LossCoefficients(norm_adv=False, clip_vloss=True, clip_coef=0.2, vloss_form="clipped"))
    # SB3: the clipped prediction's squared error alone, no 0.5: (0.04 + 5.29 + 0.49 + 4) / 4
    assert sb3.value_loss.item() == pytest.approx((0.04 + 5.29 + 0.49 + 4) / 4, rel=1e-5)
    # beyond the clip range a value gets no gradient from it (the first three moved by >= 0.5)
    values = new_values.clone().requires_grad_(True)
    ppo_loss(new, old, adv, values, old_values, returns, entropy,
             LossCoefficients(norm_adv=False, clip_vloss=True, clip_coef=0.2, vloss_form="clipped")
             ).value_loss.backward()
    assert values.grad[:3].eq(0).all() and values.grad[3] != 0


def test_an_unknown_value_loss_form_is_refused():
    from models.run.config import ConfigError

    with pytest.raises(ConfigError, match="ppo.vloss_form must be one of max, clipped"):
        PPOConfig(vloss_form="huber").validate()
    assert LossCoefficients.from_config(PPOConfig(clip_vloss=True, vloss_form="clipped")).vloss_form == "clipped"


# -- Learner -------------------------------------------------------------------------------

def synthetic_batches(learner: Learner, n_actors: int = 2, steps: int = 16, envs: int = 2,
                      seed: int = 0) -> list[RolloutBatch]:
    """Fragments with plausible CartPole observations, actions sampled by the learner's policy."""
    rng = np.random.default_rng(seed)
    sampler = learner.policy.sampler(seed)
    out = []
    for a in range(n_actors):
        obs = rng.normal(0, 0.5, size=(steps, envs, 4)).astype(np.float32)
        actions, logp = sampler(obs.reshape(steps * envs, 4))
        terminated = np.zeros((steps, envs), dtype=bool)
        terminated[steps // 2, 0] = True
        truncated = np.zeros((steps, envs), dtype=bool)
        truncated[steps // 3, envs - 1] = True
        out.append(RolloutBatch(
            obs=obs, actions=actions.reshape(steps, envs), logp=logp.reshape(steps, envs).astype(np.float32),
            rewards=np.ones((steps, envs), dtype=np.float32), terminated=terminated, truncated=truncated,
            trunc_index=np.array([[steps // 3, envs - 1]]),
            trunc_obs=rng.normal(0, 0.5, size=(1, 4)).astype(np.float32),
            last_obs=rng.normal(0, 0.5, size=(envs, 4)).astype(np.float32),
            episode_returns=[], episode_lengths=[], actor_index=a))
    return out


CFG = PPOConfig(update_epochs=2, minibatch_size=16, learning_rate=1e-3)


def test_learner_update_returns_finite_train_stats(spaces):
    learner = Learner(spaces, CFG, seed=3, device="cpu")
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    stats = learner.update(synthetic_batches(learner))
    expected_keys = {f"train/{k}" for k in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                                            "clipfrac", "grad_norm", "policy_kl", "explained_variance",
                                            "grad_steps", "learning_rate")} | {"time/learner_s"}
    assert set(stats) == expected_keys
    assert all(math.isfinite(v) for v in stats.values()), stats
    assert stats["train/policy_kl"] >= 0
    assert stats["train/approx_kl"] >= 0
    assert 0 <= stats["train/clipfrac"] <= 1
    assert 0 < stats["train/entropy"] <= math.log(2) + 1e-6
    assert stats["train/grad_steps"] == 2 * (2 * 16 * 2) // 16  # epochs * samples // minibatch
    assert stats["train/learning_rate"] == pytest.approx(1e-3)
    assert learner.updates == 1
    after = learner.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "update changed no weight"


def test_learner_anneals_learning_rate(spaces):
    learner = Learner(spaces, PPOConfig(update_epochs=1, minibatch_size=64, learning_rate=1e-3,
                                        anneal_lr=True), seed=0, device="cpu", max_rounds=10)
    stats = learner.update(synthetic_batches(learner), round_index=4)
    assert stats["train/learning_rate"] == pytest.approx(0.6e-3)


def test_learner_anneals_to_zero_at_the_nearer_of_k_rounds_and_the_env_step_budget(spaces):
    learner = Learner(spaces, PPOConfig(update_epochs=1, minibatch_size=64, learning_rate=1e-3, anneal_lr=True),
                      seed=0, device="cpu", max_rounds=10, max_env_steps=1000)
    assert learner.anneal_fraction(round_index=2, env_steps=500) == pytest.approx(0.5)  # S is nearer
    assert learner.anneal_fraction(round_index=8, env_steps=100) == pytest.approx(0.2)  # K is nearer
    assert learner.anneal_fraction(round_index=1, env_steps=1500) == 0.0  # past S: never negative
    stats = learner.update(synthetic_batches(learner), round_index=1, env_steps=750)
    assert stats["train/learning_rate"] == pytest.approx(0.25e-3)


def test_same_seed_learners_give_identical_weights(spaces):
    def run(seed: int) -> tuple[dict, dict]:
        learner = Learner(spaces, CFG, seed=seed, device="cpu")
        batches = synthetic_batches(learner, seed=11)
        stats = learner.update(batches)
        stats.update({f"r2/{k}": v for k, v in learner.update(batches, round_index=1).items()})
        return learner.policy.state_dict(), stats

    w1, s1 = run(5)
    w2, s2 = run(5)
    w3, _ = run(6)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    timing = {"time/learner_s", "r2/time/learner_s"}
    assert {k: v for k, v in s1.items() if k not in timing} == {k: v for k, v in s2.items() if k not in timing}
    assert any(not torch.equal(w1[k], w3[k]) for k in w1)


def test_the_update_is_clipped_ppo_minibatch_by_minibatch_exactly(spaces):
    """Learner.update's fast path (one gather per epoch, flat buffers with FlatAdam and one-multiply clipping,
    statistics summed as tensors) gives the same weights and statistics, bit for bit, as the
    plain loop: index each minibatch, torch's default Adam, sum the statistics in floats."""
    cfg = PPOConfig(update_epochs=3, minibatch_size=16, learning_rate=1e-3, clip_vloss=True)
    learner = Learner(spaces, cfg, seed=7, device="cpu")
    plain = Learner(spaces, cfg, seed=7, device="cpu")
    plain.optimizer = torch.optim.Adam(plain.policy.parameters(), lr=cfg.learning_rate, eps=1e-5)
    batches = synthetic_batches(learner, seed=2)
    stats = learner.update(batches)

    data = plain.prepare(batches)
    n, sums, steps = len(data), dict.fromkeys(("loss", "approx_kl", "clipfrac", "grad_norm"), 0.0), 0
    for _ in range(cfg.update_epochs):
        order = torch.randperm(n, generator=plain.generator)
        for start in range(0, n - 16 + 1, 16):
            idx = order[start:start + 16]
            logp, entropy, values = plain.policy.evaluate(data.obs[idx], data.actions[idx])
            out = ppo_loss(logp, data.logp[idx], data.advantages[idx], values, data.values[idx],
                           data.returns[idx], entropy, LossCoefficients.from_config(cfg))
            plain.optimizer.zero_grad()
            out.loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(plain.policy.parameters(), cfg.max_grad_norm)
            plain.optimizer.step()
            for key, value in (("loss", out.loss), ("approx_kl", out.approx_kl), ("clipfrac", out.clipfrac),
                               ("grad_norm", grad_norm)):
                sums[key] += float(value)
            steps += 1

    fast, slow = learner.policy.state_dict(), plain.policy.state_dict()
    assert all(torch.equal(fast[k], slow[k]) for k in fast)
    assert stats["train/grad_steps"] == steps == 3 * 4
    for key, total in sums.items():
        assert stats[f"train/{key}"] == pytest.approx(total / steps, rel=1e-6), key


def test_prepare_rejects_fragments_of_different_lengths(spaces):
    learner = Learner(spaces, CFG, seed=0, device="cpu")
    a = synthetic_batches(learner, n_actors=1, steps=8)
    b = synthetic_batches(learner, n_actors=1, steps=12)
    with pytest.raises(ValueError, match="different lengths"):
        learner.prepare(a + b)


def hand_batch(obs0: list[list[float]], rewards: list[list[float]], last0: list[float],
               trunc: list[tuple[int, int, float]] = ()) -> RolloutBatch:
    """A [T, N] fragment whose observations are zero except component 0 (which the test critic reads)."""
    t_len, n = len(obs0), len(obs0[0])
    obs = np.zeros((t_len, n, 4), dtype=np.float32)
    obs[..., 0] = obs0
    last = np.zeros((n, 4), dtype=np.float32)
    last[:, 0] = last0
    truncated = np.zeros((t_len, n), dtype=bool)
    trunc_obs = np.zeros((len(trunc), 4), dtype=np.float32)
    for m, (ti, ni, v) in enumerate(trunc):
        truncated[ti, ni] = True
        trunc_obs[m, 0] = v
    return RolloutBatch(
        obs=obs, actions=np.zeros((t_len, n), dtype=np.int64), logp=np.full((t_len, n), -0.69, np.float32),
        rewards=np.array(rewards, dtype=np.float32), terminated=np.zeros((t_len, n), dtype=bool),
        truncated=truncated, trunc_index=np.array([(ti, ni) for ti, ni, _ in trunc], dtype=np.int64).reshape(-1, 2),
        trunc_obs=trunc_obs, last_obs=last, episode_returns=[], episode_lengths=[])


def test_prepare_bootstraps_each_actor_from_its_own_last_obs(spaces):
    learner = Learner(spaces, PPOConfig(gamma=0.5, gae_lambda=0.5), seed=0, device="cpu")
    # Controlled critic: V(obs) = obs[0], so every value below is the number written in the obs.
    critic = nn.Linear(4, 1)
    with torch.no_grad():
        critic.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
        critic.bias.zero_()
    learner.policy.critic = critic

    actor_a = hand_batch(obs0=[[1], [2]], rewards=[[1], [1]], last0=[10])
    # actor B, env 1 is truncated at t=0 with V(final obs) = 100 (its local index (0, 1)).
    actor_b = hand_batch(obs0=[[3, 5], [4, 6]], rewards=[[0, 1], [2, 1]], last0=[20, 30],
                         trunc=[(0, 1, 100.0)])
    data = learner.prepare([actor_a, actor_b])

    # gamma * lambda = 0.25. Columns after merging: [A0, B0, B1].
    # A0: V = 1, 2; V(last) = 10.  d1 = 1 + 0.5*10 - 2 = 4;  d0 = 1 + 0.5*2 - 1 = 1
    #     A = [1 + 0.25*4, 4] = [2, 4]; R = [3, 6]
    # B0: V = 3, 4; V(last) = 20.  d1 = 2 + 0.5*20 - 4 = 8;  d0 = 0 + 0.5*4 - 3 = -1
    #     A = [-1 + 0.25*8, 8] = [1, 8]; R = [4, 12]
    # B1: V = 5, 6; truncated at t=0 (V(final) = 100); V(last) = 30.
    #     d1 = 1 + 0.5*30 - 6 = 10;  d0 = 1 + 0.5*100 - 5 = 46 (trace cut)
    #     A = [46, 10]; R = [51, 16]
    # Flattened time-major: t0: A0, B0, B1; t1: A0, B0, B1.
    np.testing.assert_allclose(data.values.numpy(), [1, 3, 5, 2, 4, 6])
    np.testing.assert_allclose(data.advantages.numpy(), [2, 1, 46, 4, 8, 10], rtol=1e-6)
    np.testing.assert_allclose(data.returns.numpy(), [3, 4, 51, 6, 12, 16], rtol=1e-6)
    assert len(data) == 6
    np.testing.assert_allclose(data.obs[:, 0].numpy(), [1, 3, 5, 2, 4, 6])
    np.testing.assert_allclose(data.logp.numpy(), [-0.69] * 6, rtol=1e-6)


def test_prepare_with_constant_critic(spaces):
    """Zeroed critic output layer with bias c: V = c everywhere, whatever the observation."""
    learner = Learner(spaces, PPOConfig(gamma=0.9, gae_lambda=0.8), seed=0, device="cpu")
    last_layer = learner.policy.critic[-1]
    with torch.no_grad():
        last_layer.weight.zero_()
        last_layer.bias.fill_(2.0)
    batch = hand_batch(obs0=[[0.1], [0.2]], rewards=[[1], [0]], last0=[0.3])
    batch.terminated[1, 0] = True
    data = learner.prepare([batch])
    # d1 = 0 + 0 - 2 = -2 (terminated);  d0 = 1 + 0.9*2 - 2 = 0.8;  A0 = 0.8 + 0.72*(-2) = -0.64
    np.testing.assert_allclose(data.values.numpy(), [2.0, 2.0])
    np.testing.assert_allclose(data.advantages.numpy(), [-0.64, -2.0], rtol=1e-6)
    np.testing.assert_allclose(data.returns.numpy(), [1.36, 0.0], atol=1e-6)


def test_non_finite_input_or_loss_stops_the_update_before_a_step():
    import dataclasses

    from models.errors import NonFiniteError
    from models.rl.rollout import ActorJob, run_actor

    learner = Learner(env_spaces("CartPole-v1"), PPOConfig(minibatch_size=32, update_epochs=1), seed=0)
    job = ActorJob("CartPole-v1", 0, 3, 7, 64, 1, learner.cfg.hidden, learner.weights())
    batch = run_actor(job)
    bad = dataclasses.replace(batch, rewards=batch.rewards.copy())
    bad.rewards[5, 0] = np.nan
    with pytest.raises(NonFiniteError, match="actor 3 returned non-finite rewards"):
        learner.update([bad])
    with torch.no_grad():
        next(learner.policy.parameters()).fill_(float("inf"))
    with pytest.raises(NonFiniteError, match="loss is nan at gradient step 0"):
        learner.update([batch])
    assert not learner.optimizer.state_dict()["state"]  # Adam's state appears at its first step: none was taken

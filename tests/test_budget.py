"""The budget rule's upper bound of a round's cost (models/billing/budget.py), computed by hand."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.billing.budget import (
    BOUND_MARGIN,
    FORWARD_PASSES,
    Measured,
    RunShape,
    calibrate_learner,
    round_bound,
)
from models.billing.cost import PriceTable

SHAPE = RunShape(fragment=64, update_epochs=4, minibatch_size=128, backend="local",
                 learner_device="cpu", learner_s_per_unit_calibrated=0.01)


@pytest.fixture(scope="module")
def prices() -> PriceTable:
    return PriceTable.load()


def test_units_count_gradient_steps_and_forward_passes():
    assert SHAPE.units(1) == (4 + FORWARD_PASSES) * 1
    assert SHAPE.units(128) == 6 and SHAPE.units(129) == 12 and SHAPE.units(1024) == 48


def test_round_zero_uses_the_prior_and_the_calibration(prices):
    actor, learner = prices.actor_per_second, prices.learner_per_second("cpu")
    prior_actor_s = 10.0 + 64 * 0.0025  # local cold start-up + fragment x step (prices.toml)
    bound = round_bound(4, SHAPE, Measured(), prices, learner_startup_s=3.0)
    assert bound.actors_usd == pytest.approx(BOUND_MARGIN * 4 * prior_actor_s * actor)
    assert bound.learner_usd == pytest.approx(BOUND_MARGIN * 0.01 * SHAPE.units(256) * learner)
    assert bound.startup_usd == pytest.approx(3.0 * learner)  # measured: exact, no margin
    assert bound.total_usd == bound.actors_usd + bound.learner_usd + bound.startup_usd
    work_pool = RunShape(**{**SHAPE.__dict__, "backend": "work-pool"})
    assert round_bound(4, work_pool, Measured(), prices).actors_usd > bound.actors_usd
    # a resident learner is billed for the round: + its slowest actor and the overhead prior (5 s)
    resident = round_bound(4, SHAPE, Measured(), prices, learner_startup_s=3.0, learner_resident=True)
    assert resident.learner_usd - bound.learner_usd == pytest.approx(BOUND_MARGIN * (prior_actor_s + 5.0) * learner)


def test_measured_maxima_replace_the_actor_prior_and_new_actors_may_start_cold(prices):
    actor = prices.actor_per_second
    measured = Measured()
    measured.observe([1.0, 3.0], learner_s=0.06, samples=128, shape=SHAPE)
    measured.observe([0.5, 0.5], learner_s=0.01, samples=128, shape=SHAPE)
    assert measured.actor_s == 3.0 and measured.max_actors == 2 and measured.min_batch == 128
    assert measured.learner_s_per_unit == pytest.approx(0.06 / 6)
    # 2 actors were seen: each bounded by the 3 s maximum; the third may start cold (prior)
    assert round_bound(2, SHAPE, measured, prices).actors_usd == pytest.approx(BOUND_MARGIN * 6.0 * actor)
    prior_actor_s = 10.0 + 64 * 0.0025
    assert round_bound(3, SHAPE, measured, prices).actors_usd == pytest.approx(
        BOUND_MARGIN * (6.0 + prior_actor_s) * actor)


def test_the_learner_bound_grows_with_the_batch_and_never_drops_below_the_smallest_measured(prices):
    learner = prices.learner_per_second("cpu")
    measured = Measured()
    measured.observe([1.0] * 16, learner_s=4.8, samples=1024, shape=SHAPE)  # 0.1 s per unit
    per_unit = max(0.1, SHAPE.learner_s_per_unit_calibrated)
    assert round_bound(32, SHAPE, measured, prices).learner_usd == pytest.approx(
        BOUND_MARGIN * per_unit * SHAPE.units(2048) * learner)
    # a smaller batch than any measured is bounded as the smallest measured one (fixed overhead)
    assert round_bound(1, SHAPE, measured, prices).learner_usd == pytest.approx(
        BOUND_MARGIN * per_unit * SHAPE.units(1024) * learner)


def test_calibration_leaves_the_policy_and_the_random_state_untouched():
    from models.envs.batch import env_spaces
    from models.rl.policy import ActorCritic

    spaces = env_spaces("CartPole-v1")
    torch.manual_seed(0)
    policy = ActorCritic(spaces, (16, 16))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    rng = torch.get_rng_state()
    step_s = calibrate_learner(policy, spaces.obs_shape, spaces.obs_dtype, spaces.discrete,
                               spaces.n_actions, 64)
    assert step_s > 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())


def test_a_cluster_round_is_bounded_by_its_wall_time_at_the_cluster_price(prices):
    from models.billing.budget import cluster_round_bound

    shape = dataclasses.replace(SHAPE, host_cores=2)
    prior_wall = 2 * (10.0 + 64 * 0.0025) + 5.0  # 2 waves of prior actors + the overhead prior
    bound = cluster_round_bound(4, shape, Measured(), prices, "cuda", startup_due=True)
    learner_s = SHAPE.learner_s_per_unit_calibrated * SHAPE.units(4 * 64)
    assert bound.actors_usd + bound.learner_usd == pytest.approx(
        BOUND_MARGIN * (prior_wall + learner_s) * prices.server_per_s)
    assert bound.startup_usd == pytest.approx(300.0 * prices.server_per_s)
    measured = Measured()
    measured.observe([1.0] * 4, 0.5, 4 * 64, SHAPE, wall_s=7.0)
    later = cluster_round_bound(4, shape, measured, prices, "cuda")
    assert later.total_usd == pytest.approx(BOUND_MARGIN * 7.0 * prices.server_per_s)
    assert later.learner_usd == pytest.approx(BOUND_MARGIN * 7.0 * prices.server_learner_per_s)
    on_cpu = cluster_round_bound(4, shape, measured, prices, "cpu")  # a CPU learner VM
    assert on_cpu.learner_usd == pytest.approx(BOUND_MARGIN * 7.0 * 0.192 / 3600)

"""The round state and its three stop rules (budget, target, K) and resume, with no Prefect."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.errors import ConfigError
from models.rl.rollout import RolloutBatch
from models.rl.timings import ActorTimings
from models.run.presets import resolve_parameters
from models.run.records import STOP_BUDGET, STOP_MAX_ENV_STEPS, STOP_MAX_ROUNDS, STOP_TARGET
from models.run.session import TrainingSession

LEARNER_S = 0.5


def session(**overrides) -> TrainingSession:
    cfg = resolve_parameters({"env": "CartPole-v1", "scheduler": "fixed:2", "fragment": 8,
                              "tracking_uri": "sqlite:///unused.db", "checkpoint_dir": "unused",
                              **overrides})
    return TrainingSession(cfg)


def batch(returns: list[float], sampling_s: float = 1.0, steps: int = 8) -> RolloutBatch:
    z = np.zeros((steps, 1), np.float32)
    return RolloutBatch(
        obs=np.zeros((steps, 1, 4), np.float32), actions=np.zeros((steps, 1), np.int64), logp=z, rewards=z,
        terminated=z.astype(bool), truncated=z.astype(bool), trunc_index=np.zeros((0, 2), np.int64),
        trunc_obs=np.zeros((0, 4), np.float32), last_obs=np.zeros((1, 4), np.float32),
        episode_returns=list(returns), episode_lengths=[1] * len(returns),
        timings=ActorTimings(requested_at=0.0, started_at=0.0, startup_s=0.0, weight_load_s=0.0,
                             sampling_s=sampling_s, sampled_at=sampling_s))


def finish_round(s: TrainingSession, returns: list[float], actors: int = 2) -> dict[str, float]:
    stats = {"time/learner_s": LEARNER_S, "train/loss": 0.1, "train/policy_kl": 0.01}
    return s.record([batch(returns) for _ in range(actors)], stats, wall_s=2.0)


def test_target_stops_the_run_once_a_round_reaches_j():
    s = session(target_return=100.0, max_rounds=10)
    finish_round(s, [50.0])
    assert s.stop_reason is None and s.round_index == 1
    finish_round(s, [100.0, 120.0])
    assert s.stop_reason == STOP_TARGET and s.summary().target_reached
    assert s.summary().best_return == 110.0


def test_stop_at_eval_judges_j_on_the_evaluations_and_needs_every_episode_forward():
    s = session(target_return=100.0, max_rounds=10, stop_at_eval=True, eval_every=1)
    finish_round(s, [150.0])  # R_k above J: not the criterion any more
    assert s.stop_reason is None
    s.record_evaluation({"eval/return_mean": 90.0})
    assert s.stop_reason is None
    # a high return from an episode that went backwards (standing, or hopping the wrong way)
    s.record_evaluation({"eval/return_mean": 130.0, "eval/forward_displacement_min": -0.1})
    assert s.stop_reason is None
    s.record_evaluation({"eval/return_mean": 130.0, "eval/forward_displacement_min": float("nan")})
    assert s.stop_reason is None
    s.record_evaluation({"eval/return_mean": 101.0, "eval/forward_displacement_min": 2.5})
    assert s.stop_reason == STOP_TARGET and s.summary().target_reached
    assert "evaluation after round 0 returned 101 >= J=100, every episode forward (min 2.50 m)" in s.progress.stop_detail
    # without displacement figures (not a locomotion env) the return alone decides; the last
    # round's own max_rounds stop gives way to the target it reached
    last = session(target_return=100.0, max_rounds=1, stop_at_eval=True, eval_every=1)
    finish_round(last, [10.0])
    assert last.stop_reason == STOP_MAX_ROUNDS
    last.record_evaluation({"eval/return_mean": 100.0})
    assert last.stop_reason == STOP_TARGET
    # off (the default): evaluations never stop a run
    off = session(target_return=100.0, max_rounds=10, eval_every=1)
    finish_round(off, [10.0])
    off.record_evaluation({"eval/return_mean": 500.0, "eval/forward_displacement_min": 3.0})
    assert off.stop_reason is None


def test_stop_at_eval_without_evaluations_is_refused_before_anything_runs():
    from models.errors import ConfigError

    with pytest.raises(ConfigError, match="stop_at_eval judges J on the periodic evaluations: set eval_every"):
        session(stop_at_eval=True)


def test_max_rounds_stops_after_k_rounds_and_a_round_without_episodes_never_reaches_j():
    s = session(target_return=10.0, max_rounds=2)
    finish_round(s, [])
    assert math.isnan(s.last.mean_return) and s.stop_reason is None
    finish_round(s, [5.0])
    assert s.stop_reason == STOP_MAX_ROUNDS and s.summary().rounds == 2


def test_the_env_step_budget_stops_after_the_round_that_reaches_it_whatever_the_actor_count(tmp_path):
    from models.run.checkpoint import load_run_checkpoint

    s = session(target_return=1000.0, max_rounds=100, max_env_steps=40)  # rounds of 8 steps an actor
    finish_round(s, [5.0], actors=2)  # 16 steps
    assert s.stop_reason is None
    assert s.progress.done_fraction(100, 40) == pytest.approx(0.4)  # the progress bar: S is nearer than K
    assert s.progress.done_fraction(100, None) == pytest.approx(0.01)
    finish_round(s, [5.0], actors=3)  # 40: at S
    assert s.stop_reason == STOP_MAX_ENV_STEPS and s.summary().env_steps == 40 and s.summary().rounds == 2
    assert not s.summary().target_reached and "S=40" in s.progress.stop_detail
    s.progress.run_id = "abc"
    s.save(tmp_path / "latest.pt")
    raised = session(target_return=1000.0, max_rounds=100, max_env_steps=64)  # a resume may raise S
    raised.load(load_run_checkpoint(tmp_path / "latest.pt"))
    assert raised.stop_reason is None
    same = session(target_return=1000.0, max_rounds=100, max_env_steps=40)
    same.load(load_run_checkpoint(tmp_path / "latest.pt"))
    assert same.stop_reason == STOP_MAX_ENV_STEPS


def test_a_bad_env_step_budget_is_refused_before_anything_runs():
    for bad in (0, -5, 2.5):
        with pytest.raises(ConfigError, match="max_env_steps"):
            session(max_env_steps=bad)


def test_budget_rule_refuses_a_round_whose_bound_does_not_fit():
    s = session(budget_usd=1.0)
    admitted = s.round_bound(2)
    assert s.admit_round(2)
    metrics = finish_round(s, [10.0])
    assert metrics["cost/round_bound_usd"] == admitted.total_usd
    assert metrics["cost/round_usd"] <= metrics["cost/round_bound_usd"]
    # with what is left set between the bounds of 3 and 4 actors: 3 fit, 4 do not
    three, four = s.round_bound(3).total_usd, s.round_bound(4).total_usd
    assert three < four
    s.progress.spent_usd = s.cfg.budget_usd - (three + four) / 2
    assert s.admit_round(3) and s.stop_reason is None
    assert not s.admit_round(4) and s.stop_reason == STOP_BUDGET
    assert "round 1 not started" in s.summary().stop_detail and "4 actors" in s.summary().stop_detail


def test_round_zero_is_checked_against_the_prior_and_the_learner_start_up():
    s = session()
    bound = s.round_bound(2)
    assert bound.startup_usd == pytest.approx(s.learner_startup_s * s.prices.learner_per_second("cpu"))
    assert s.learner_startup_s > 0
    # a budget below round 0's bound stops the run before any actor starts
    tiny = session(budget_usd=bound.total_usd * 0.99)
    assert not tiny.admit_round(2)
    summary = tiny.summary()
    assert summary.stop_reason == STOP_BUDGET and summary.rounds == 0 and summary.cost_usd == 0.0
    assert "round 0 not started" in summary.stop_detail


def test_the_learner_start_up_is_billed_once_on_the_learner_device():
    s = session()
    first = finish_round(s, [10.0])
    second = finish_round(s, [10.0])
    per_s = s.prices.learner_per_second(s.learner_device)
    assert first["time/learner_startup_s"] == s.learner_startup_s > 0
    assert first["cost/startup_usd"] == pytest.approx(s.learner_startup_s * per_s)  # actors: 0 s start-up
    assert second["cost/startup_usd"] == 0.0 and second["time/learner_startup_s"] == 0.0
    assert s.round_bound(2).startup_usd == 0.0  # paid: no longer in the bound
    summary = s.summary()
    assert summary.learner_device == s.learner_device
    assert summary.actors_cost_usd + summary.learner_cost_usd + summary.startup_cost_usd == \
        pytest.approx(summary.cost_usd, rel=1e-12)
    assert summary.server_cluster_cost_usd - summary.server_cluster_cost_no_startup_usd == \
        pytest.approx(s.prices.server_startup_s * s.prices.server_cluster_per_second(s.learner_device))


def test_state_reports_the_last_round_to_the_scheduler():
    s = session()
    first = s.state()
    assert first.round_index == 0 and math.isnan(first.last_return) and first.last_loss == 0.0
    finish_round(s, [30.0])
    state = s.state()
    assert (state.round_index, state.last_return, state.last_loss, state.policy_kl) == (1, 30.0, 0.1, 0.01)
    assert state.last_learner_s == LEARNER_S and state.last_actor_s == pytest.approx(1.0)
    assert state.budget_left_usd == pytest.approx(s.cfg.budget_usd - s.progress.spent_usd)


def test_resume_continues_with_the_same_totals_and_history(tmp_path):
    from models.run.checkpoint import load_run_checkpoint

    s = session(max_rounds=5, seed=4)
    finish_round(s, [10.0])
    finish_round(s, [20.0])
    s.progress.run_id = "abc"
    s.save(tmp_path / "latest.pt")
    resumed = session(max_rounds=5, seed=4)
    resumed.load(load_run_checkpoint(tmp_path / "latest.pt"))
    assert resumed.progress == s.progress
    assert resumed.state() == s.state()
    for a, b in zip(resumed.learner.state_dict()["policy"].values(),
                    s.learner.state_dict()["policy"].values(), strict=True):
        assert a.equal(b)


@pytest.mark.parametrize("scheduler", ["fixed:2", "adapt", "increase:2:1:20", "learned:cartpole:sample"])
def test_every_scheduler_state_survives_a_weights_only_checkpoint(tmp_path, scheduler):
    from models.run.checkpoint import load_run_checkpoint

    s = session(scheduler=scheduler, seed=1)
    s.scheduler.choose(s.state())
    finish_round(s, [10.0])
    s.scheduler.choose(s.state())
    s.save(tmp_path / "latest.pt")
    resumed = session(scheduler=scheduler, seed=1)
    resumed.load(load_run_checkpoint(tmp_path / "latest.pt"))
    assert [resumed.scheduler.choose(resumed.state()) for _ in range(3)] == \
        [s.scheduler.choose(s.state()) for _ in range(3)]


def test_backend_boots_before_round_0_are_in_its_bound_and_billed_once_as_start_up():
    s = session(max_rounds=5)
    without = s.round_bound(2)
    s.note_backend_startup(4.0)  # two worker processes booted 2 s each before round 0
    with_boots = s.round_bound(2)
    boots_usd = 4.0 * s.prices.actor_per_second
    assert with_boots.startup_usd == pytest.approx(without.startup_usd + boots_usd)
    assert s.admit_round(2)
    first = finish_round(s, [1.0])
    assert first["time/pool_startup_s"] == 4.0
    assert first["cost/round_usd"] == pytest.approx(
        first["cost/actors_usd"] + first["cost/learner_usd"] + first["cost/startup_usd"])
    assert first["cost/startup_usd"] >= boots_usd
    assert first["cost/round_usd"] <= with_boots.total_usd  # the bound held
    second = finish_round(s, [1.0])
    assert second["time/pool_startup_s"] == 0.0  # billed once
    assert s.round_bound(2).startup_usd == 0.0


def test_a_resident_learner_is_billed_every_second_of_the_rounds_cloud_clock():
    per_round, resident = session(max_rounds=5), session(max_rounds=5, learner_billing="resident")
    price = per_round.prices.learner_per_second(per_round.learner_device)
    for s in (per_round, resident):
        rounds = [finish_round(s, [10.0]) for _ in range(2)]
        for m in rounds:
            cloud = m["time/round_cloud_s"]
            assert cloud >= LEARNER_S + 1.0  # the slowest actor and the update, at least
            assert m["cost/learner_per_round_usd"] == pytest.approx(LEARNER_S * price, rel=1e-12)
            assert m["cost/learner_resident_usd"] == pytest.approx(cloud * price, rel=1e-12)
            billed = m["cost/learner_resident_usd"] if s is resident else m["cost/learner_per_round_usd"]
            assert m["cost/learner_usd"] == billed
            assert m["cost/round_usd"] == pytest.approx(m["cost/actors_usd"] + billed + m["cost/startup_usd"], rel=1e-12)
        summary = s.summary()
        extra = sum(m["time/round_cloud_s"] - LEARNER_S for m in rounds) * price  # what residence adds
        assert summary.learner_billing == s.cfg.learner_billing
        assert summary.cost_with_learner_usd(s.cfg.learner_billing) == pytest.approx(summary.cost_usd, rel=1e-12)
        assert summary.cost_with_learner_usd("resident") - summary.cost_with_learner_usd("per-round") == \
            pytest.approx(extra, rel=1e-9)
        assert summary.cost_usd == pytest.approx(s.progress.spent_usd, rel=1e-12)
    with pytest.raises(ConfigError, match="learner_billing must be one of per-round, resident"):
        session(learner_billing="hourly")

"""models/report/scalability.py: a round's latency split, with hand-computed values."""

from __future__ import annotations

import pytest

from models.report.scalability import PARTS, latency_row

HISTORY = {  # three rounds; the first pays the start-up and is left out
    "time/actor_dispatch_s": [9.0, 0.1, 0.1], "time/actor_startup_s": [9.0, 0.2, 0.2],
    "time/actor_weight_load_s": [0.0, 0.05, 0.05], "time/actor_sampling_s": [1.0, 1.0, 2.0],
    "time/actor_upload_s": [0.0, 0.05, 0.05], "time/round_s": [20.0, 2.0, 3.0], "time/learner_s": [5.0, 0.5, 0.5],
    "time/round_cloud_s": [25.0, 2.5, 3.5], "time/round_cycle_wall_s": [30.0, 3.0, 4.0]}


def test_the_parts_are_the_later_rounds_means_and_add_up_to_the_cloud_time():
    row = latency_row(8, HISTORY)
    assert row.rounds == 2 and row.actors == 8
    expected = {"dispatch_s": 0.1, "startup_s": 0.2, "weight_load_s": 0.05, "sampling_s": 1.5, "upload_s": 0.05,
                "slowest_actor_wait_s": 2.5 - 0.5 - 1.9, "learner_s": 0.5, "orchestration_s": 3.0 - 2.5}
    assert {p: row.part(p) for p in PARTS} == pytest.approx(expected)
    assert sum(row.parts) == pytest.approx(row.cloud_s) and row.cloud_s == pytest.approx(3.0)
    assert row.wall_s == pytest.approx(3.5)


def test_a_run_too_short_or_without_a_metric_is_refused():
    with pytest.raises(ValueError, match="more than"):
        latency_row(1, {k: v[:1] for k, v in HISTORY.items()})
    with pytest.raises(ValueError, match="time/learner_s"):
        latency_row(1, {k: v for k, v in HISTORY.items() if k != "time/learner_s"})

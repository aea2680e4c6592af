"""The slow-server warning (issue 34): said once, at round 1, when orchestration is long and most of the round."""

import math

from models.report.slow_server import (
    CHECKED_ROUND,
    SLOW_ROUND_ORCHESTRATION_S,
    round_orchestration_s,
    slow_server_warning,
)


def test_round_orchestration_is_the_cycle_less_actors_and_learner():
    assert round_orchestration_s(2.5, 0.3, 0.2) == 2.0
    assert round_orchestration_s(0.4, 0.3, 0.2) == 0.0  # never negative


def test_a_stock_sqlite_round_warns_once_naming_the_faster_choices():
    text = slow_server_warning(CHECKED_ROUND, 2.0, 2.5, "http://127.0.0.1:4200/api")
    assert text.startswith("orchestration took 2.00 s of round 1's 2.50 s")
    assert "http://127.0.0.1:4200/api" in text and "unset PREFECT_API_URL" in text and "PostgreSQL" in text
    assert slow_server_warning(0, 2.0, 2.5, None) is None  # round 0 pays one-off costs
    assert slow_server_warning(2, 2.0, 2.5, None) is None  # said once


def test_no_warning_where_the_training_sets_the_pace():
    assert slow_server_warning(CHECKED_ROUND, 0.15, 0.3, None) is None  # the temporary API's round
    assert slow_server_warning(CHECKED_ROUND, SLOW_ROUND_ORCHESTRATION_S + 0.1, 4.0, None) is None  # under half
    assert slow_server_warning(CHECKED_ROUND, math.nan, 1.0, None) is None
    assert slow_server_warning(CHECKED_ROUND, 1.0, 0.0, None) is None

"""Peers on stated terms (issue 33): the CPU-seconds meter and the published-score check."""

import math
import os
import time

import pytest

from benchmarks.cpu_meter import CpuMeter, busy_seconds, cpu_s_per_1k_steps
from benchmarks.peer_reproduction import PUBLISHED, Published, verdict


def test_busy_seconds_sums_the_busy_fields_of_the_aggregate_line():
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    text = f"cpu  {hz} {2 * hz} {3 * hz} {100 * hz} {50 * hz} {4 * hz} {5 * hz} {6 * hz} 0 0\ncpu0 1 2 3\n"
    assert busy_seconds(text) == pytest.approx(1 + 2 + 3 + 4 + 5 + 6)  # idle and iowait left out
    with pytest.raises(ValueError, match="aggregate"):
        busy_seconds("cpu0 1 2 3\n")


def test_cpu_meter_sees_a_busy_loop_of_this_process():
    with CpuMeter() as meter:
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:
            pass
    r = meter.reading
    assert r.wall_s >= 0.3
    assert 0.25 <= r.cpu_s <= r.wall_s * r.cores + 0.05  # at least this core; at most every core
    assert cpu_s_per_1k_steps(3.0, 2000) == pytest.approx(1.5)
    assert math.isnan(cpu_s_per_1k_steps(3.0, 0))


def test_published_band_and_verdict():
    cleanrl = PUBLISHED[("cleanrl", "Hopper-v5")]
    assert cleanrl.band() == pytest.approx((2382.86 - 2 * 271.74, 2382.86 + 2 * 271.74))
    assert verdict(cleanrl, training_mean=2000.0, eval_mean=math.nan) == (2000.0, True)
    assert verdict(cleanrl, training_mean=1000.0, eval_mean=3000.0) == (1000.0, False)  # the training figure counts
    assert verdict(cleanrl, training_mean=3500.0, eval_mean=math.nan) == (3500.0, True)  # above the band: not broken
    # one trained agent with a tiny std: the band is 10% of the mean each side, not +-20
    zoo = PUBLISHED[("rlzoo", "Hopper-v5")]
    assert zoo.band() == pytest.approx((2410.435 * 0.8, 2410.435 * 1.2))
    assert verdict(zoo, training_mean=2400.0, eval_mean=1059.0) == (1059.0, False)  # Hopper standing
    assert not verdict(Published(1.0, 0.0, 1, "training episodes", "", ""), math.nan, 1.0)[1]

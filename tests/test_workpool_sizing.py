"""tasks/workpool/warm_pool.py's sizing: pure functions of the scheduler's recent choices."""

from __future__ import annotations

from tasks.workpool.warm_pool import ResizePlan, ServerInfo, plan_resize, warm_target


def test_warm_target_follows_the_largest_of_the_last_complete_rounds():
    sizes = {0: 2, 1: 6, 2: 3, 3: 1, 4: 1}
    assert warm_target({}, -1, 3, 8) == 8  # before any round: all of them
    assert warm_target({0: 4}, 0, 3, 8) == 8  # round 0 is starting: nothing complete yet
    assert warm_target(sizes, 4, 3, 8) == 6  # rounds 1-3
    assert warm_target(sizes, 5, 3, 8) == 3  # rounds 2-4
    assert warm_target(sizes, 4, 3, 4) == 4  # never above the most
    assert warm_target(sizes, 4, 1, 8) == 1  # window of one: round 3


def server(name: str, busy: bool = False) -> ServerInfo:
    return ServerInfo(server_id=name, flow_run_id=None, seq=0, ready=True, busy=busy, dead=False,
                      retiring=False)


def test_plan_resize_retires_idle_servers_only_and_starts_the_missing():
    live = [server("a", busy=True), server("b"), server("c")]
    assert plan_resize(3, live) == ResizePlan(retire=(), start=0)
    assert plan_resize(1, live) == ResizePlan(retire=("b", "c"), start=0)
    assert plan_resize(2, live) == ResizePlan(retire=("b",), start=0)
    assert plan_resize(5, live) == ResizePlan(retire=(), start=2)
    # a busy server is never cut short: the pool is over target until it is idle
    assert plan_resize(0, [server("a", busy=True)]) == ResizePlan(retire=(), start=0)

"""benchmarks/api_calls.py: a run's API calls cut into rounds at each round's first call."""

from __future__ import annotations

from benchmarks.api_calls import Call, _shape, per_round


def call(method: str, path: str, seconds: float, status: int = 200) -> Call:
    return Call(method, path, status, 0.0, seconds)


def test_rounds_are_cut_at_the_tracking_task_run_and_the_ends_dropped():
    start = ("POST", "/api/task_runs/")
    rounds = []
    for k in range(4):  # round 0 (warm-up) and round 3 (no next start) are left out
        rounds += [call(*start, 0.010 * (k + 1)), call("POST", "/api/flow_runs/", 0.020),
                   call("POST", "/api/flow_runs/{id}/set_state", 0.030, status=503 if k == 1 else 200),
                   call("POST", "/api/flow_runs/{id}/set_state", 0.040)]
    profile = per_round([call("POST", "/api/flows/", 1.0)] + rounds)  # before round 0: ignored
    assert profile["rounds"] == 2
    by = {c["call"]: c for c in profile["calls"]}
    assert by["POST /api/task_runs/"]["per_round"] == 1 and abs(by["POST /api/task_runs/"]["median_ms"] - 25) < 1e-9
    assert by["POST /api/flow_runs/{id}/set_state"]["per_round"] == 2
    assert "POST /api/flows/" not in by
    assert profile["busy_503_per_round"] == 0.5
    assert abs(profile["api_s_per_round"] - (0.025 + 0.02 + 0.03 + 0.04)) < 1e-9


def test_ids_in_paths_are_shaped():
    assert _shape("/api/flow_runs/6bce0c78-c965-4761-92c5-57adbf17ec10/set_state") == "/api/flow_runs/{id}/set_state"
    assert per_round([]) == {"rounds": 0, "calls": []}


def test_a_retried_round_start_is_the_same_round():
    start = ("POST", "/api/task_runs/")
    calls = []
    for _ in range(3):
        calls += [call(*start, 0.01, status=503), call("PATCH", "/api/artifacts/{id}", 0.03),  # another thread's
                  call(*start, 0.01), call("POST", "/api/flow_runs/", 0.02)]
    profile = per_round(calls)
    assert profile["rounds"] == 1 and profile["busy_503_per_round"] == 1
    assert {c["call"]: c["per_round"] for c in profile["calls"]}["POST /api/task_runs/"] == 2

"""The heuristic schedulers (models/scheduling/schedulers.py), make_scheduler's spec parsing, and the models/ import graph."""

from __future__ import annotations

import json
import math

import pytest

from models.errors import ConfigError
from models.scheduling.schedulers import Adapt, Fixed, Max, Ramp, RoundState, make_scheduler


def state(k: int, last_return: float = math.nan) -> RoundState:
    return RoundState(round_index=k, last_loss=0.1, last_return=last_return, policy_kl=0.01,
                      last_learner_s=1.0, last_actor_s=2.0, budget_left_usd=1.0)


def test_round_state_is_seven_numbers():
    s = RoundState(3, 0.5, 100.0, 0.02, 1.5, 2.5, 0.75)
    assert s.as_tuple() == (3.0, 0.5, 100.0, 0.02, 1.5, 2.5, 0.75)


@pytest.mark.parametrize(("n", "i_max"), [(1, 1), (1, 32), (8, 32), (32, 32)])
def test_fixed_returns_n_every_round(n, i_max):
    sched = Fixed(n, i_max)
    assert [sched.choose(state(k, 100.0 * k)) for k in range(12)] == [n] * 12
    assert sched.name == f"fixed{n}"
    assert sched.state_dict() == {}


@pytest.mark.parametrize(("n", "i_max"), [(0, 32), (-1, 32), (33, 32), (2, 1)])
def test_fixed_out_of_range(n, i_max):
    with pytest.raises(ConfigError, match="i_max"):
        Fixed(n, i_max)


@pytest.mark.parametrize("i_max", [1, 7, 32])
def test_max_returns_i_max(i_max):
    sched = Max(i_max)
    assert {sched.choose(state(k, -5.0)) for k in range(5)} == {i_max}
    assert sched.name == "max"


# Adapt with J = 100, I_max = 32, window 5: I_k = clip(round(mean(last 5 returns) / 100 * 32), 1, 32)
ADAPT_SEQUENCE = [
    # (round_index, last_return, expected I_k)
    (0, math.nan, 1),    # nothing returned yet: Jhat = 0 -> clipped up to 1
    (1, 10.0, 3),        # Jhat 10: 3.2 -> 3
    (2, 20.0, 5),        # Jhat 15: 4.8 -> 5
    (3, 30.0, 6),        # Jhat 20: 6.4 -> 6
    (4, math.nan, 6),    # a round with no finished episode is skipped: Jhat stays 20
    (5, 40.0, 8),        # Jhat 25: 8.0
    (6, 50.0, 10),       # Jhat (10+20+30+40+50)/5 = 30: 9.6 -> 10
    (7, 200.0, 22),      # window drops 10: (20+30+40+50+200)/5 = 68: 21.76 -> 22
    (8, 500.0, 32),      # (30+40+50+200+500)/5 = 164: 52.48 -> clipped to 32
    (9, -100.0, 32),     # (40+50+200+500-100)/5 = 138: 44.16 -> 32
    (10, -100.0, 32),    # (50+200+500-100-100)/5 = 110: 35.2 -> 32
    (11, -100.0, 26),    # (200+500-100-100-100)/5 = 80: 25.6 -> 26
]


def test_adapt_follows_the_formula_over_a_sequence():
    sched = Adapt(target_return=100.0, i_max=32)
    got = [sched.choose(state(k, r)) for k, r, _ in ADAPT_SEQUENCE]
    assert got == [expected for _, _, expected in ADAPT_SEQUENCE]


@pytest.mark.parametrize(
    ("returns", "target", "i_max", "expected"),
    [
        ([475.0] * 5, 475.0, 32, 32),        # at the target: I_max
        ([237.5] * 5, 475.0, 32, 16),        # half way: half of I_max
        ([-20.0, -30.0], 475.0, 32, 1),      # negative returns clip to 1
        ([1.0], 475.0, 32, 1),               # 0.067 rounds to 0, clipped to 1
        ([100.0, 300.0], 200.0, 8, 8),       # Jhat 200 = J
        ([60.0, 90.0, 30.0], 200.0, 8, 2),   # Jhat 60: 2.4 -> 2
    ],
)
def test_adapt_table(returns, target, i_max, expected):
    sched = Adapt(target, i_max)
    sched.choose(state(0, 999.0))  # round 0 carries no return, even a finite one
    for k, r in enumerate(returns, start=1):
        last = sched.choose(state(k, r))
    assert last == expected


def test_adapt_ignores_a_finite_return_at_round_zero():
    sched = Adapt(100.0, 32)
    assert sched.choose(state(0, 100.0)) == 1
    assert sched.state_dict() == {"returns": []}


@pytest.mark.parametrize("target", [0.0, -1.0])
def test_adapt_needs_a_positive_target(target):
    with pytest.raises(ConfigError, match="target_return"):
        Adapt(target, 32)


def test_adapt_state_dict_round_trip():
    first = Adapt(100.0, 32)
    for k, r in [(0, math.nan), (1, 10.0), (2, 20.0), (3, 30.0)]:
        first.choose(state(k, r))
    saved = json.loads(json.dumps(first.state_dict()))  # a checkpoint must hold plain data
    assert saved == {"returns": [10.0, 20.0, 30.0]}
    resumed = Adapt(100.0, 32)
    resumed.load_state_dict(saved)
    follow = [(4, 40.0), (5, 50.0), (6, 200.0), (7, 500.0)]
    assert [resumed.choose(state(k, r)) for k, r in follow] == [first.choose(state(k, r)) for k, r in follow]
    assert resumed.state_dict() == first.state_dict() == {"returns": [30.0, 40.0, 50.0, 200.0, 500.0]}


def test_adapt_load_keeps_only_the_window():
    sched = Adapt(100.0, 32)
    sched.load_state_dict({"returns": [1000.0, 1000.0, 0.0, 0.0, 0.0, 0.0, 0.0]})
    assert sched.state_dict() == {"returns": [0.0] * 5}
    assert sched.choose(state(8, 50.0)) == round(50 / 5 / 100 * 32)  # Jhat 10 -> 3.2 -> 3


@pytest.mark.parametrize(
    ("spec", "i_max", "rounds", "per_block"),
    [
        ("increase:4", 32, 40, [1, 3, 5, 7]),              # step 2 every 10, centred on 4
        ("decrease:4", 32, 40, [7, 5, 3, 1]),
        ("increase:8", 32, 60, [3, 5, 7, 9, 11, 13]),
        ("decrease:16:4:10", 32, 40, [22, 18, 14, 10]),
        ("increase:8:2:10", 32, 10, [8]),                  # one block: Fixed(8)
        ("increase:6:3:20", 32, 60, [3, 6, 9]),
    ],
)
def test_ramp_keeps_the_fixed_budget(spec, i_max, rounds, per_block):
    sched = make_scheduler(spec, i_max, rounds, 475.0)
    assert isinstance(sched, Ramp)
    every = sched.every
    assert rounds % every == 0
    counts = [sched.choose(state(k)) for k in range(rounds)]
    assert counts == [n for n in per_block for _ in range(every)]  # changes only every `every` rounds
    n = int(spec.split(":")[1])
    fixed = Fixed(n, i_max)
    assert sum(counts) == sum(fixed.choose(state(k)) for k in range(rounds)) == n * rounds
    assert all(1 <= c <= i_max for c in counts)


def test_ramp_steps_every_ten_rounds_by_default():
    sched = make_scheduler("increase:5", 32, 30, 475.0)
    counts = [sched.choose(state(k)) for k in range(30)]
    changes = [k for k in range(1, 30) if counts[k] != counts[k - 1]]
    assert changes == [10, 20]
    assert [counts[9], counts[10], counts[20]] == [3, 5, 7]
    assert sched.name == "increase5"
    assert make_scheduler("decrease:5", 32, 30, 475.0).name == "decrease5"


@pytest.mark.parametrize(
    ("spec", "i_max", "rounds"),
    [
        ("increase:4", 32, 60),    # would start at 4 - 5 = -1
        ("decrease:30", 32, 40),   # would start at 33 > I_max
        ("increase:0", 32, 10),
        ("increase:40", 32, 10),
    ],
)
def test_ramp_that_would_leave_the_range_is_refused(spec, i_max, rounds):
    with pytest.raises(ConfigError):
        make_scheduler(spec, i_max, rounds, 475.0)


@pytest.mark.parametrize(
    ("spec", "kind", "name"),
    [
        ("fixed:8", Fixed, "fixed8"),
        (" FIXED:3 ", Fixed, "fixed3"),
        ("max", Max, "max"),
        ("Max", Max, "max"),
        ("adapt", Adapt, "adapt"),
        ("increase:4", Ramp, "increase4"),
        ("decrease:4:1", Ramp, "decrease4"),
        ("decrease:4:1:20", Ramp, "decrease4"),
        ("decrease:8:1:3:28", Ramp, "decrease8"),
    ],
)
def test_make_scheduler_parses(spec, kind, name):
    sched = make_scheduler(spec, 32, 40, 475.0)
    assert type(sched) is kind
    assert sched.name == name


def test_make_scheduler_passes_its_arguments():
    assert make_scheduler("fixed:8", 32, 40, 475.0).n == 8
    assert make_scheduler("max", 12, 40, 475.0).choose(state(0)) == 12
    adapt = make_scheduler("adapt", 16, 40, 200.0)
    assert (adapt.target, adapt.i_max, adapt.window) == (200.0, 16, 5)
    ramp = make_scheduler("decrease:4:1:20", 32, 40, 475.0)
    assert (ramp.step, ramp.every, ramp.direction) == (1, 20, -1)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("bogus", "unknown scheduler"),
        ("", "unknown scheduler"),
        ("fixed", "unknown scheduler"),         # needs N
        ("fixed:8:2", "unknown scheduler"),
        ("max:3", "unknown scheduler"),
        ("adapt:5", "unknown scheduler"),
        ("increase", "unknown scheduler"),
        ("increase:4:2:10:40:1", "unknown scheduler"),
        ("increase:8:1:3:0", "rounds must be >= 1"),
        ("fixed:x", "integers"),
        ("fixed:8.5", "integers"),
        ("fixed:0", "i_max"),
        ("fixed:33", "i_max"),
        ("switch:8:1", "unknown scheduler"),  # needs the percent of J
        ("switch:8:33:50", "i_max"),
        ("switch:8:1:0", "percent"),
        ("switch:8:1:101", "percent"),
    ],
)
def test_make_scheduler_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        make_scheduler(spec, 32, 40, 475.0)


def test_make_scheduler_adapt_needs_positive_target():
    with pytest.raises(ConfigError, match="target_return"):
        make_scheduler("adapt", 32, 40, 0.0)


def test_models_have_no_import_cycle():
    """Every `models.*` import, at any depth of a module: the graph must be acyclic."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "models"
    graph = {}
    for path in root.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            deps |= {n.split(".")[1] for n in names if n.startswith("models.")}
        graph[path.stem] = deps - {path.stem}
    done, stack = set(), []

    def visit(name):
        assert name not in stack, f"import cycle: {' -> '.join([*stack[stack.index(name):], name])}"
        if name in done or name not in graph:
            return
        stack.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        stack.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_switch_runs_its_first_count_until_a_round_returns_the_percent_of_j_then_the_second():
    sched = make_scheduler("switch:8:1:60", 32, 40, 475.0)
    assert sched.name == "switch8to1at60"
    state = lambda k, ret: RoundState(k, 0.1, ret, 0.01, 0.2, 0.3, 0.04)  # noqa: E731
    # round 0 has no return yet; 284 < 0.6 x 475 = 285 keeps 8; 285 switches, for good
    assert [sched.choose(state(0, math.nan)), sched.choose(state(1, 100.0)), sched.choose(state(2, 284.0))] == [8, 8, 8]
    assert [sched.choose(state(3, 285.0)), sched.choose(state(4, 50.0))] == [1, 1]
    resumed = make_scheduler("switch:8:1:60", 32, 40, 475.0)
    resumed.load_state_dict(sched.state_dict())  # a resumed run stays switched
    assert resumed.choose(state(5, 10.0)) == 1
    assert make_scheduler("switch:1:8:90", 32, 40, 475.0).choose(state(1, 500.0)) == 8

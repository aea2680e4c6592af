"""The experiments' statistics and tables: pure code over `train` run summaries.

The experiment flows (flows/experiments/) run the trainings and publish; everything they compute
from the finished runs lives here: mean and std over seeds, one aggregated row per scheduler
(`AggregateRow`), the learned scheduler's actor count over thirds of a run (`PhaseRow`), the
`<scheduler>/<key>` metrics of a table and its markdown form. No Prefect, no MLflow.

Two clocks, in every row: `time_s` is the cloud clock (the run as with a core per actor: each round's
P_k plus its measured orchestration; IMPACT's virtual executor; models/run/records.py RunSummary
cloud_time_s), the one every system is compared on; `wall_s` is this machine's. `sum_pk_s` (the
paper's measure, orchestration left out) is shown beside them for PPO's rows. A serverless row's
cost is as its runs were billed (the learner per round by default); `cost_resident_learner_usd`
is the same runs with the learner's container resident for the whole run.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from models.json_types import JSONObject
from models.run.config import SYSTEM_SERVERLESS

if TYPE_CHECKING:
    from models.impact.progress import ImpactSummary
    from models.run.records import RunSummary


class TableRow(Protocol):
    """A row of an experiment's table: its columns, in order, as the table and results.json show them."""

    def as_dict(self) -> JSONObject: ...


def mean_std(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and population std of the finite values (NaN, NaN when there are none)."""
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return math.nan, math.nan
    return float(np.mean(xs)), float(np.std(xs))


CLOCK_LEGEND = ("Clocks: time_s is the cloud clock (the runs as with a core per actor: each round's P_k plus "
                "its measured orchestration; IMPACT's virtual-time executor), the one systems are compared "
                "on; wall_s is this machine's wall clock; sum_pk_s is the sum of P_k alone (the paper's "
                "measure, orchestration left out).")
"""Printed above every experiment table: which clock each time column is."""

HELD_OUT_SEEDS_FROM = 100
"""Seeds from here up are held out: no preset was tuned and no scheduler trained on them (scheduler
training starts at seed 0 and uses one seed per episode or batch, fewer than 100 of them)."""
DEFAULT_HELD_OUT_SEEDS = (100, 101, 102, 103, 104)


def seeds_note(seeds: Sequence[int]) -> str:
    """Whether a comparison's seeds are held out, in words for its summary."""
    tuned = sorted(s for s in seeds if s < HELD_OUT_SEEDS_FROM)
    if not tuned:
        return f"Seeds {list(seeds)}: held out (>= {HELD_OUT_SEEDS_FROM}: no preset tuning or scheduler training used them)."
    return (f"Seeds {list(seeds)}: NOT held out: {tuned} are below {HELD_OUT_SEEDS_FROM}, the seeds presets were "
            "tuned and schedulers trained on; a reported comparison runs on seeds >= 100.")


@dataclass(frozen=True)
class AggregateRow:
    """One row of a comparison: one scheduler's runs over seeds.

    `extra` holds an experiment's own further columns (name, value), shown after the common
    ones in that order; `as_dict` names the label column `scheduler`.
    """

    label: str
    runs: int
    reached: int
    """How many runs stopped at the target return J."""
    time_s_mean: float
    time_s_std: float
    cost_usd_mean: float
    cost_usd_std: float
    rounds_mean: float
    actors_mean: float
    """Mean over runs of each run's mean actor count per round."""
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def reached_frac(self) -> float:
        return self.reached / max(self.runs, 1)

    def with_columns(self, **columns: Any) -> AggregateRow:
        """This row with further columns (appended, or replacing an extra column of that name)."""
        merged = dict(self.extra)
        merged.update(columns)
        return replace(self, extra=tuple(merged.items()))

    def value(self, key: str) -> Any:
        """A column by its table name (`scheduler`, `time_s_mean`, an extra column, ...)."""
        columns = self.as_dict()
        if key not in columns:
            raise KeyError(key)
        return columns[key]

    def as_dict(self) -> JSONObject:
        return {"scheduler": self.label, "runs": self.runs, "reached": self.reached,
                "time_s_mean": self.time_s_mean, "time_s_std": self.time_s_std,
                "cost_usd_mean": self.cost_usd_mean, "cost_usd_std": self.cost_usd_std,
                "rounds_mean": self.rounds_mean, "actors_mean": self.actors_mean, **dict(self.extra)}


def aggregate(label: str, summaries: Sequence[RunSummary], cost_key: str = "cost_usd") -> AggregateRow:
    """One row of a comparison: time to stop on both clocks and cost over seeds, and how often J was reached.

    `cost_key` names the summary field billed: `cost_usd` (what the runs were billed) or, for
    server-cluster runs, `server_cluster_cost_usd` / `server_cluster_cost_no_startup_usd` (their
    bill with and without the cluster's start-up).
    """
    time_m, time_s = mean_std([s.cloud_time_s for s in summaries])
    cost_m, cost_s = mean_std([getattr(s, cost_key) for s in summaries])
    rounds_m, _ = mean_std([float(s.rounds) for s in summaries])
    actors_m, _ = mean_std([float(np.mean([h.actors for h in s.history])) for s in summaries if s.history])
    return AggregateRow(label=label, runs=len(summaries), reached=sum(bool(s.target_reached) for s in summaries),
                        time_s_mean=time_m, time_s_std=time_s, cost_usd_mean=cost_m, cost_usd_std=cost_s,
                        rounds_mean=rounds_m, actors_mean=actors_m,
                        extra=(("wall_s_mean", mean_std([s.wall_time_s for s in summaries])[0]),
                               ("sum_pk_s_mean", mean_std([s.time_to_stop_s for s in summaries])[0]),
                               ("cost_resident_learner_usd_mean", mean_std(
                                   [s.cost_with_learner_usd("resident") for s in summaries
                                    if cost_key == "cost_usd" and s.system == SYSTEM_SERVERLESS])[0])))


def aggregate_impact(label: str, summaries: Sequence[ImpactSummary], actors: int,
                     cost_key: str = "server_cluster_cost_usd") -> AggregateRow:
    """One row for IMPACT runs. IMPACT has no rounds and no P_k: its time is its cloud time to
    stop (the virtual executor's, or the wall when its actors ran for real), its rounds column its
    learner chunks, and its cost the fixed server cluster it runs on (`cost_key`: with or without start-up)."""
    time_m, time_s = mean_std([s.cloud_s for s in summaries])
    cost_m, cost_s = mean_std([getattr(s, cost_key) for s in summaries])
    chunks_m, _ = mean_std([float(s.chunks) for s in summaries])
    return AggregateRow(label=label, runs=len(summaries), reached=sum(bool(s.target_reached) for s in summaries),
                        time_s_mean=time_m, time_s_std=time_s, cost_usd_mean=cost_m, cost_usd_std=cost_s,
                        rounds_mean=chunks_m, actors_mean=float(actors),
                        extra=(("wall_s_mean", mean_std([s.wall_s for s in summaries])[0]),
                               ("sum_pk_s_mean", math.nan), ("cost_resident_learner_usd_mean", math.nan)))


def actor_rounds(summary: RunSummary) -> int:
    """The actor-rounds a run used: the sum of I_k over its rounds."""
    return sum(h.actors for h in summary.history)


def phases(actors: Sequence[float]) -> tuple[float, float, float]:
    """Mean actor count over the first, middle and last third of a run's rounds."""
    if not actors:
        return math.nan, math.nan, math.nan
    thirds = np.array_split(np.asarray(actors, dtype=float), 3)
    early, middle, late = (float(np.mean(t)) if len(t) else math.nan for t in thirds)
    return early, middle, late


def phase_shape(early: float, middle: float, late: float) -> str:
    """The paper saw many, fewer, more actors; this names what appears, it does not force it."""
    if early > middle < late:
        return "many-fewer-more"
    if early == middle == late:
        return "flat"
    return "other"


@dataclass(frozen=True)
class PhaseRow:
    """One learned-scheduler run: its actor counts I_k and their means over thirds of the run."""

    seed: int
    rounds: int
    reached: bool
    actors: tuple[int, ...]
    early: float
    middle: float
    late: float
    shape: str

    def as_dict(self) -> JSONObject:
        return {"seed": self.seed, "rounds": self.rounds, "reached": self.reached,
                "actors": json.dumps(list(self.actors)), "early": self.early, "middle": self.middle,
                "late": self.late, "shape": self.shape}


def phase_row(seed: int, summary: RunSummary) -> PhaseRow:
    actors = tuple(int(h.actors) for h in summary.history)
    early, middle, late = phases(actors)
    return PhaseRow(seed=seed, rounds=summary.rounds, reached=bool(summary.target_reached), actors=actors,
                    early=early, middle=middle, late=late, shape=phase_shape(early, middle, late))


def mean_phases(rows: Sequence[PhaseRow]) -> tuple[float, float, float]:
    """The mean over runs of each third's mean actor count (NaN thirds left out)."""
    early, middle, late = (mean_std([getattr(r, k) for r in rows])[0] for k in ("early", "middle", "late"))
    return early, middle, late


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """The mean per index over curves of different lengths (each index over the curves that reach it)."""
    longest = max((len(c) for c in curves), default=0)
    return [float(np.mean([c[k] for c in curves if k < len(c)])) for k in range(longest)]


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a markdown table, columns in the first row's order, floats to 6 significant digits."""
    if not rows:
        return "(no rows)"
    keys = list(rows[0])

    def fmt(v: Any) -> str:
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def finite_row(row: Mapping[str, Any]) -> JSONObject:
    """The row with its non-finite floats as None (a Prefect table artifact is JSON)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def row_metrics(rows: Sequence[AggregateRow], keys: Sequence[str]) -> dict[str, float]:
    """`<scheduler>/<key>` metrics of the table's rows, for the parent MLflow run."""
    return {f"{metric_label(r.label)}/{k}": r.value(k) for r in rows for k in keys}


def metric_label(label: str) -> str:
    """A row label as an MLflow metric prefix: 'best fixed (fixed:8)' -> 'best_fixed_fixed:8'
    (MLflow names allow letters, digits, _ - . : / and spaces; spaces become underscores too)."""
    kept = re.sub(r"[^A-Za-z0-9_\-.:/ ]", "", label)
    return re.sub(r"\s+", "_", kept.strip())


def summary_record(summary: RunSummary) -> JSONObject:
    """A run summary without its per-round scheduler trace, for results.json."""
    record = {f.name: getattr(summary, f.name) for f in fields(summary) if f.name != "scheduler_trace"}
    record["history"] = [asdict(h) for h in summary.history]
    record["target_reached"] = bool(summary.target_reached)
    return record


def stripped(runs: Mapping[str, Sequence[RunSummary]]) -> dict[str, list[JSONObject]]:
    """Every label's summaries without their traces, for results.json."""
    return {label: [summary_record(s) for s in summaries] for label, summaries in runs.items()}


FIXED_SWEEP = (1, 2, 4, 8, 16, 32)
"""The actor counts of the best-fixed sweep (issue 13: Fixed(N), same seeds, in every comparison)."""


def fixed_sweep(i_max: int, counts: Sequence[int] = FIXED_SWEEP) -> list[str]:
    """The Fixed(N) specs of the sweep that a run with this i_max can choose."""
    return [f"fixed:{n}" for n in counts if 1 <= n <= i_max]


def best_fixed(rows: Sequence[AggregateRow]) -> AggregateRow | None:
    """The best Fixed(N) in hindsight: of the `fixed:N` rows that reached J on every seed, the one
    with the lowest mean cost (then the lowest mean time); None when none reached J every time."""
    candidates = [r for r in rows if r.label.startswith("fixed:") and r.runs and r.reached == r.runs]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r.cost_usd_mean, r.time_s_mean))


def same_schedule_as(learned: Sequence[RunSummary], fixed: Mapping[str, Sequence[RunSummary]]) -> str | None:
    """The Fixed(N) row whose run on every seed chose the same actors in every round as `learned`'s
    run on that seed (a constant learned scheduler is that count), or None. Same seed and same
    rounds make the same training, so such a pair's cost and time differ only by the machine's
    speed between the two runs: the reader of a compare must know it before reading the ratio."""
    mine = [[h.actors for h in s.history] for s in learned]
    for label, runs in fixed.items():
        if label.startswith("fixed:") and len(runs) == len(mine) and mine and all(
                [h.actors for h in s.history] == actors for s, actors in zip(runs, mine, strict=True)):
            return label
    return None


COST_TOLERANCE = 0.05
"""Issue 13: the learned scheduler's cost within 5% of the best fixed N, at no more time."""


def judge_against_best_fixed(learned: AggregateRow, best: AggregateRow) -> dict[str, bool]:
    """The goal against the best fixed count: cost within 5% of it at no more time, or better on
    both; a learned scheduler that missed J on a seed does not meet it."""
    cost_ok = learned.cost_usd_mean <= (1 + COST_TOLERANCE) * best.cost_usd_mean
    time_ok = learned.time_s_mean <= best.time_s_mean
    return {f"cost <= 1.05 x best fixed ({best.label})": cost_ok,
            f"time <= best fixed ({best.label})": time_ok,
            "reached J on every seed": learned.reached == learned.runs}

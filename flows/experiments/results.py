"""What each experiment flow returns: its table, where its parent run and plot are, and the
runs behind it (typed, so a caller reads `result.checks`, not a key it has to guess)."""

from __future__ import annotations

from dataclasses import dataclass

from models.impact.progress import ImpactSummary
from models.json_types import JSONObject
from models.run.records import RunSummary
from models.scheduling.training import SchedulerTrainingResult


@dataclass(frozen=True)
class ExperimentResult:
    """run_id: the MLflow parent run; plot: its plot (runs:/<run_id>/plots/<name>.png); rows: the
    published table, one JSON-able row per scheduler (per seed in actors-curve)."""

    run_id: str
    plot: str
    rows: list[JSONObject]


@dataclass(frozen=True)
class CompareResult(ExperimentResult):
    """metrics and checks: issue 13's figures of each learned scheduler (the parent run's metrics,
    and each goal met or not); same_schedule_as: learned label -> the fixed count whose actors it
    chose in every round; runs: label -> one summary per seed (the server cluster's under
    "server cluster"); impact_runs: IMPACT's, one per seed, when it was a baseline."""

    metrics: dict[str, float]
    checks: dict[str, bool]
    same_schedule_as: dict[str, str]
    runs: dict[str, list[RunSummary]]
    impact_runs: list[ImpactSummary]


@dataclass(frozen=True)
class MotivationResult(ExperimentResult):
    runs: dict[str, list[RunSummary]]


@dataclass(frozen=True)
class ActorsCurveResult(ExperimentResult):
    """phases: the mean actors over the first, middle and last third of the runs."""

    phases: list[float]


@dataclass(frozen=True)
class TransferResult(ExperimentResult):
    finetune: SchedulerTrainingResult
    scratch: SchedulerTrainingResult


@dataclass(frozen=True)
class ScalabilityResult(ExperimentResult):
    """rows: one per actor count, its mean round's parts (models/report/scalability.py PARTS)."""


@dataclass(frozen=True)
class Table2Result(ExperimentResult):
    """tables: workload -> its rows; metrics and checks: each learned row against Max, Adapt and
    the best Fixed(N) per workload; ran, kept and missing: the cells (workload / system / seed) run
    now, reused from an earlier run of the table, and not finished with the current code."""

    tables: dict[str, list[JSONObject]]
    metrics: dict[str, float]
    checks: dict[str, bool]
    ran: list[str]
    kept: list[str]
    missing: list[str]

"""A Table 2's rows per workload from its finished cells (flows/experiments/table2.py): one row per
system over the seeds that finished, the server cluster and IMPACT with and without the cluster's
start-up, and the best Fixed(N) in hindsight. Pure: no Prefect, no MLflow.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.errors import ConfigError
from models.impact.progress import ImpactSummary
from models.report.experiment_stats import AggregateRow, aggregate, aggregate_impact, best_fixed, mean_std
from models.report.table2_cells import IMPACT, SERVER_CLUSTER, Cell
from models.run.records import RunSummary


@dataclass(frozen=True)
class CellResult:
    """A finished cell: its row label and its run's summary (a `train` run's or an IMPACT run's)."""

    cell: Cell
    label: str
    """The row it belongs to: the system, spelled for readers ('learned (hopper)', 'fixed:8')."""
    summary: RunSummary | None = None
    impact: ImpactSummary | None = None
    cached: bool = False
    """Reused from an earlier run of the table (same code and settings), not run now."""
    scheduler_sha256: str | None = None
    """A learned cell's scheduler checkpoint's bytes (the transfer page checks its provenance against them)."""

    @property
    def env_steps(self) -> int:
        return self.summary.env_steps if self.summary is not None else self.impact.env_steps  # type: ignore[union-attr]


def workload_rows(results: Sequence[CellResult], impact_actors: int) -> list[AggregateRow]:
    """The rows of one workload's table, in the order its systems first appear in `results`."""
    labels = list(dict.fromkeys(r.label for r in results))
    rows: list[AggregateRow] = []
    for label in labels:
        mine = [r for r in results if r.label == label]
        steps = ("env_steps_mean", mean_std([float(r.env_steps) for r in mine])[0])
        if mine[0].cell.system == IMPACT:
            impact = [r.impact for r in mine if r.impact is not None]
            rows += [aggregate_impact(label, impact, impact_actors).with_columns(env_steps_mean=steps[1]),
                     aggregate_impact(f"{label} without start-up", impact, impact_actors,
                                      cost_key="server_cluster_cost_no_startup_usd").with_columns(env_steps_mean=steps[1])]
            continue
        summaries = [r.summary for r in mine if r.summary is not None]
        if mine[0].cell.system == SERVER_CLUSTER:
            rows += [aggregate(label, summaries, cost_key="server_cluster_cost_usd").with_columns(env_steps_mean=steps[1]),
                     aggregate(f"{label} without start-up", summaries,
                               cost_key="server_cluster_cost_no_startup_usd").with_columns(env_steps_mean=steps[1])]
            continue
        rows.append(aggregate(label, summaries).with_columns(env_steps_mean=steps[1]))
    best = best_fixed(rows)
    if best is not None:
        rows.append(dataclasses.replace(best, label=f"best fixed ({best.label})"))
    return rows


PAGE_COLUMNS = (("scheduler", "system"), ("runs", "seeds done"), ("reached", "reached J"),
                ("time_s_mean", "time to J (a run that missed J: to its stop), cloud clock (s)"),
                ("time_s_std", "+- (s)"), ("wall_s_mean", "wall (s)"),
                ("cost_usd_mean", "cost, learner per round (USD)"),
                ("cost_resident_learner_usd_mean", "cost, learner resident (USD)"),
                ("env_steps_mean", "env steps"), ("rounds_mean", "rounds"), ("actors_mean", "mean actors"))
"""The results page's columns: (results.json row key, heading)."""


def page_cell(value: object) -> str:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def page_table(rows: Sequence[dict[str, object]]) -> str:
    """One workload's rows (results.json `tables[<workload>]`) as the results page's markdown table."""
    lines = ["| " + " | ".join(h for _, h in PAGE_COLUMNS) + " |", "|" + "---|" * len(PAGE_COLUMNS)]
    lines += ["| " + " | ".join(page_cell(r.get(k, "")) for k, _ in PAGE_COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class LastEvaluation:
    """A cell's last evaluation: where its run reached J on evaluations, the one that reached it
    (the run stops there); what the body did there says what J means on a locomotion env."""

    return_mean: float
    length_mean: float
    """NaN for runs before eval/length_mean was recorded (2026-12-05)."""
    displacement_mean: float
    displacement_min: float


EVALUATIONS_FILE = "last_evaluations.json"
"""Beside exported cells' records: each cell's last evaluation by run id, as its MLflow run stays
behind in the store it ran in (a cell carried to another machine keeps what its body did)."""


def evaluations_json(evaluations: Mapping[str, LastEvaluation]) -> str:
    """Run id -> last evaluation, NaN written as null (strict JSON)."""
    def figure(x: float) -> float | None:
        return x if math.isfinite(x) else None
    return json.dumps({run_id: {f.name: figure(getattr(e, f.name)) for f in dataclasses.fields(LastEvaluation)}
                       for run_id, e in sorted(evaluations.items())}, indent=1)


def parse_evaluations(text: str, source: str) -> dict[str, LastEvaluation]:
    """The inverse of evaluations_json; anything else is a ConfigError naming `source`."""
    names = {f.name for f in dataclasses.fields(LastEvaluation)}
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object of run ids")
        found = {}
        for run_id, figures in data.items():
            if not isinstance(figures, dict) or set(figures) != names:
                raise ValueError(f"run {run_id!r}: expected the fields {sorted(names)}")
            if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in figures.values()):
                raise ValueError(f"run {run_id!r}: figures must be numbers or null")
            found[run_id] = LastEvaluation(**{k: math.nan if v is None else float(v) for k, v in figures.items()})
        return found
    except ValueError as exc:  # json.JSONDecodeError is one
        raise ConfigError(f"{source}: not a file of last evaluations: {exc}") from exc


def body_table(rows: dict[str, Sequence[LastEvaluation]]) -> str:
    """Per row (its cells' last evaluations): mean eval return, episode length and forward
    displacement over the seeds, and the lowest episode's displacement on any seed."""
    lines = ["| system | seeds | eval return | episode length (steps) | forward displacement (m) | "
             "lowest episode's displacement (m) |", "|---|---|---|---|---|---|"]
    for label, evals in rows.items():
        lowest = [e.displacement_min for e in evals if math.isfinite(e.displacement_min)]
        figures = [mean_std(getattr(e, f) for e in evals)[0] for f in ("return_mean", "length_mean", "displacement_mean")]
        lines.append(f"| {label} | {len(evals)} | " + " | ".join(page_cell(x) for x in figures)
                     + f" | {page_cell(min(lowest) if lowest else math.nan)} |")
    return "\n".join(lines)

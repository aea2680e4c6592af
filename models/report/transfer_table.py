"""Transfer against training from scratch, from a Table 2 (issue 35, point 4).

A table with several learned rows on one workload (`learned:<ref>`: fine-tuned from other
workloads' schedulers, and trained there from scratch) gives each scheduler's held-out figure in
one run; each checkpoint's provenance gives what its training cost, on the target workload and
on the workloads it saw before. Fine-tuning pays when it reaches a held-out figure that training
from scratch reaches only with more training: snapshots of one from-scratch training (e.g. after
48 and after 100 episodes) bracket how much it took to match a fine-tuned scheduler's held-out
time, and so what fine-tuning saved. Pure: no Prefect, no MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.errors import ConfigError
from models.report.table2_cells import workload_name
from models.scheduling.provenance import SchedulerProvenance, SchedulerTrainingRun

LEARNED_ROW = "learned ("


@dataclass(frozen=True)
class TrainingSpent:
    """Scheduler training on some workloads: episodes, wall time on the machine that ran them,
    and what the episodes' trainings were billed."""

    episodes: int = 0
    wall_s: float = 0.0
    billed_usd: float = 0.0


@dataclass(frozen=True)
class TransferRow:
    """One learned row of a Table 2 with its scheduler's training."""

    row: str
    """The table's row label, `learned (<ref>)`."""
    ref: str
    sources: tuple[str, ...]
    """The envs it trained on before the target, oldest first (empty: from scratch)."""
    on_target: TrainingSpent
    before: TrainingSpent
    """Its training on the source envs (the fine-tuned's source scheduler's)."""
    runs: int
    reached: int
    time_s: float
    """Held-out time to J on the cloud clock, mean over the seeds (the table's row)."""
    time_s_std: float
    cost_usd: float

    @property
    def from_scratch(self) -> bool:
        return not self.sources


MATCH_TOLERANCE = 0.05
"""A from-scratch scheduler matches a fine-tuned one's held-out time when it is at most this much
slower on the mean (the seeds' spread is several times larger: a strict "faster" would call noise)."""


@dataclass(frozen=True)
class TransferVerdict:
    """A fine-tuned row against the table's from-scratch rows (snapshots of one training, or
    several): how much training from scratch it took to match its held-out time."""

    fine_tuned: str
    wall_s: float
    """The fine-tuned row's training on the target."""
    matched_by: str | None
    """The from-scratch row with the least training that matched it (None: none did)."""
    matched_wall_s: float
    """That row's training on the target (inf: none matched)."""
    unmatched_wall_s: float
    """The most training on the target of a from-scratch row with less training that did not (0: none)."""

    def saving(self) -> str:
        """The training that fine-tuning saved, bracketed by the snapshots that did and did not match
        (a bound below 0, where the fine-tuning took longer than a snapshot that did not match, is no bound)."""
        if self.matched_by is None:
            least = 1 - self.wall_s / self.unmatched_wall_s
            if least < 0:
                return (f"unknown (from scratch had not matched it after {self.unmatched_wall_s / 60:.0f} min of "
                        f"training, less than the fine-tuning's {self.wall_s / 60:.0f} min)")
            return (f"at least {least:.0%} (from scratch had not matched it "
                    f"after {self.unmatched_wall_s / 60:.0f} min of training)")
        most = 1 - self.wall_s / self.matched_wall_s
        if self.unmatched_wall_s <= 0 or self.wall_s >= self.unmatched_wall_s:
            return f"at most {most:.0%} (from scratch matched it by {self.matched_wall_s / 60:.0f} min)"
        return (f"between {1 - self.wall_s / self.unmatched_wall_s:.0%} and {most:.0%} (from scratch matched it "
                f"between {self.unmatched_wall_s / 60:.0f} and {self.matched_wall_s / 60:.0f} min of training)")


def spent(provenance: SchedulerProvenance, target: tuple[str, str | None], on_target: bool) -> TrainingSpent:
    """The training runs of a checkpoint on the target (env, preset variant) (on_target) or on
    every other workload, summed."""
    runs = [r for r in provenance.trained_on if (_workload_of(r) == target) == on_target]
    return TrainingSpent(sum(r.episodes for r in runs), sum(r.wall_s for r in runs), sum(r.billed_usd for r in runs))


def _workload_of(run: SchedulerTrainingRun) -> tuple[str, str | None]:
    return run.env, run.workload.preset


def learned_row_refs(rows: Sequence[Mapping[str, object]]) -> list[tuple[str, str]]:
    """(row label, scheduler ref) of every learned row of a workload's table."""
    found = []
    for row in rows:
        label = str(row["scheduler"])
        if label.startswith(LEARNED_ROW):
            found.append((label, label.removeprefix(LEARNED_ROW).removesuffix(")").removesuffix(", transferred")))
    return found


def transfer_rows(rows: Sequence[Mapping[str, object]], provenance: Mapping[str, SchedulerProvenance],
                  target: tuple[str, str | None]) -> list[TransferRow]:
    """The learned rows of one workload's table (results.json `tables[workload]`) with the
    training of each scheduler (provenance by ref) on the target (env, preset variant) and before
    it. A row whose scheduler never trained on the target (zero-shot) is no transfer: left out."""
    out = []
    by_label = {str(r["scheduler"]): r for r in rows}
    for label, ref in learned_row_refs(rows):
        if ref not in provenance:
            raise ConfigError(f"no provenance for the scheduler of row {label!r}")
        meta, row = provenance[ref], by_label[label]
        if not any(_workload_of(r) == target for r in meta.trained_on):
            continue
        sources = tuple(dict.fromkeys(workload_name(*_workload_of(r)) for r in meta.trained_on
                                      if _workload_of(r) != target))
        out.append(TransferRow(label, ref, sources, spent(meta, target, True), spent(meta, target, False),
                               int(row["runs"]), int(row["reached"]), float(row["time_s_mean"]),  # type: ignore[arg-type]
                               float(row.get("time_s_std", 0.0)), float(row["cost_usd_mean"])))  # type: ignore[arg-type]
    return out


def verdicts(rows: Sequence[TransferRow], tolerance: float = MATCH_TOLERANCE) -> list[TransferVerdict]:
    """Every comparable fine-tuned row against the from-scratch rows that reached J on every seed,
    by their training on the target: the first to match its held-out time within `tolerance`, and
    the last before it that did not. Comparable: it reached J on every seed (else its time is a
    time to stop, not to J) and its training time is known."""
    scratch = sorted((r for r in rows if r.from_scratch and comparable(r)), key=lambda r: r.on_target.wall_s)
    out = []
    for tuned in (r for r in rows if not r.from_scratch and comparable(r)):
        matched = next((r for r in scratch if r.time_s <= tuned.time_s * (1 + tolerance)), None)
        before = [r for r in scratch if matched is None or r.on_target.wall_s < matched.on_target.wall_s]
        if matched is None and not before:
            continue
        out.append(TransferVerdict(tuned.row, tuned.on_target.wall_s, matched.row if matched else None,
                                   matched.on_target.wall_s if matched else math.inf,
                                   before[-1].on_target.wall_s if before else 0.0))
    return out


def comparable(row: TransferRow) -> bool:
    """A row whose held-out time is a time to J on every seed and whose training time is known."""
    return row.reached == row.runs > 0 and row.on_target.wall_s > 0

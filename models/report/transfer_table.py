"""Transfer against training from scratch, from a Table 2 (issue 35, point 4).

A table with several learned rows on one workload (`learned:<ref>`: fine-tuned from other
workloads' schedulers, and trained there from scratch) gives each scheduler's held-out figure in
one run; each checkpoint's provenance gives what its training cost, on the target workload and
on the workloads it saw before. Fine-tuning pays when it reaches a held-out figure that training
from scratch reaches only with more training: with one held-out measurement per scheduler, a
from-scratch scheduler that is still slower after N episodes bounds the saving from below, one
that is already faster bounds it from above. Pure: no Prefect, no MLflow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.errors import ConfigError
from models.scheduling.provenance import SchedulerProvenance

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


@dataclass(frozen=True)
class TransferVerdict:
    """A fine-tuned row against a from-scratch row of the same table."""

    fine_tuned: str
    scratch: str
    training_wall_ratio: float
    """The fine-tuned's training on the target over the scratch's (wall)."""
    training_cost_ratio: float
    scratch_caught_up: bool
    """The scratch row's held-out time is at most the fine-tuned's."""

    def saving(self) -> str:
        """The training saved, as far as one held-out measurement of each tells."""
        saved = 1.0 - self.training_wall_ratio
        if self.scratch_caught_up:
            return f"at most {saved:.0%} (from scratch matched it within its episodes)"
        return f"at least {saved:.0%} (from scratch had not matched it)"


def spent(provenance: SchedulerProvenance, env: str, on_env: bool) -> TrainingSpent:
    """The training runs of a checkpoint on `env` (on_env) or on every other env, summed."""
    runs = [r for r in provenance.trained_on if (r.env == env) == on_env]
    return TrainingSpent(sum(r.episodes for r in runs), sum(r.wall_s for r in runs), sum(r.billed_usd for r in runs))


def learned_row_refs(rows: Sequence[Mapping[str, object]]) -> list[tuple[str, str]]:
    """(row label, scheduler ref) of every learned row of a workload's table."""
    found = []
    for row in rows:
        label = str(row["scheduler"])
        if label.startswith(LEARNED_ROW):
            found.append((label, label.removeprefix(LEARNED_ROW).removesuffix(")").removesuffix(", transferred")))
    return found


def transfer_rows(rows: Sequence[Mapping[str, object]], provenance: Mapping[str, SchedulerProvenance],
                  env: str) -> list[TransferRow]:
    """The learned rows of one workload's table (results.json `tables[workload]`) with the
    training of each scheduler (provenance by ref) on `env` and before it."""
    out = []
    by_label = {str(r["scheduler"]): r for r in rows}
    for label, ref in learned_row_refs(rows):
        if ref not in provenance:
            raise ConfigError(f"no provenance for the scheduler of row {label!r}")
        meta, row = provenance[ref], by_label[label]
        if not any(r.env == env for r in meta.trained_on):
            raise ConfigError(f"{ref} never trained on {env}: a zero-shot row, not a transfer")
        sources = tuple(dict.fromkeys(r.env for r in meta.trained_on if r.env != env))
        out.append(TransferRow(label, ref, sources, spent(meta, env, True), spent(meta, env, False),
                               int(row["runs"]), int(row["reached"]), float(row["time_s_mean"]),  # type: ignore[arg-type]
                               float(row.get("time_s_std", 0.0)), float(row["cost_usd_mean"])))  # type: ignore[arg-type]
    return out


def verdicts(rows: Sequence[TransferRow]) -> list[TransferVerdict]:
    """Every fine-tuned row against every from-scratch row that reached J on every seed."""
    out = []
    for tuned in (r for r in rows if not r.from_scratch):
        for scratch in (r for r in rows if r.from_scratch and r.reached == r.runs > 0):
            if scratch.on_target.wall_s <= 0:
                continue
            out.append(TransferVerdict(tuned.row, scratch.row, tuned.on_target.wall_s / scratch.on_target.wall_s,
                                       tuned.on_target.billed_usd / scratch.on_target.billed_usd
                                       if scratch.on_target.billed_usd > 0 else float("nan"),
                                       scratch.time_s <= tuned.time_s))
    return out

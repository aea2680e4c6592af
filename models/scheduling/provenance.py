"""How a scheduler checkpoint was trained: its workload and every training run behind it.

Written as JSON in the checkpoint's header (models/scheduling/learned.py) and read back typed, so
a resumed training continues with the workload and seeds it started with, a fine-tuned scheduler
lists its source's training before its own, and a card can say what a checkpoint saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from models.errors import ConfigError
from models.json_types import JSONObject
from models.run.workload import WORKLOAD_FIELDS, Placement, Workload


def _known(names: set[str], data: Any, what: str) -> JSONObject:
    """data as keyword arguments with these names; unknown keys and non-mappings are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{what}: unknown key(s) {unknown}; known: {sorted(names)}")
    return dict(data)


LEGACY_PLACEMENT_KEYS = ("local_workers", "backend", "backend_options")
"""Checkpoints written before Workload and Placement (2026-12-04) kept where the episodes ran inside
their workload; they are read into a Placement."""


def workload_and_placement(data: object) -> tuple[Workload, Placement]:
    """A training session's `workload` JSON (and its legacy placement keys) as the two dataclasses."""
    values = _known(set(WORKLOAD_FIELDS) | set(LEGACY_PLACEMENT_KEYS), data, "scheduler workload")
    placement = Placement(**{k: values.pop(k) for k in LEGACY_PLACEMENT_KEYS if k in values})
    if not isinstance(values.get("env"), str):
        raise ConfigError("scheduler workload: env must be a gymnasium env id")
    return Workload(**values), placement


TRAINING_MODES = ("scratch", "finetune")


@dataclass
class SchedulerTrainingRun:
    """One `train-scheduler` run that trained the checkpoint (an entry of its `trained_on`)."""

    env: str
    mlflow_run_id: str
    """The run's parent MLflow run: resuming it finds this entry."""
    seed: int
    """Episode e trained the workload with seed + e."""
    mode: str
    """scratch or finetune."""
    workload: Workload
    """What every episode's training run was asked to do (its i_max and J resolved)."""
    beta: float
    batch_episodes: int
    cost_weight: float = 0.0
    """0 in checkpoints from before the reward had a cost term: the paper's time-only reward."""
    episodes: int = 0
    """Episodes this run has trained so far."""
    wall_s: float = 0.0
    """This run's training wall time so far, resumed attempts included."""
    common_seeds: bool = False
    """The episodes of a batch shared one workload seed (each its own scheduler seed)."""
    billed_usd: float = 0.0
    """What this run's episodes were billed so far (their trainings' cost_usd); 0 in checkpoints
    from before it was recorded."""
    placement: Placement = field(default_factory=Placement)
    """Where the episodes' actors ran (a resume may place them elsewhere)."""

    def __post_init__(self) -> None:
        if self.mode not in TRAINING_MODES:
            raise ConfigError(f"training session mode must be one of {TRAINING_MODES}, got {self.mode!r}")

    def to_json(self) -> JSONObject:
        return {**asdict(self), "workload": self.workload.to_json(), "placement": self.placement.to_json()}

    @classmethod
    def from_json(cls, data: object) -> SchedulerTrainingRun:
        values = _known({f.name for f in fields(cls)}, data, "trained_on entry")
        missing = sorted(f.name for f in fields(cls)
                         if f.default is MISSING and f.default_factory is MISSING and f.name not in values)
        if missing:
            raise ConfigError(f"trained_on entry: missing {missing}")
        workload, placement = workload_and_placement(values["workload"])
        if "placement" in values:
            placement = Placement.from_json(values["placement"])
        return cls(**{**values, "workload": workload, "placement": placement})


@dataclass
class SchedulerProvenance:
    """Everything a checkpoint records about its training, oldest run first."""

    trained_on: list[SchedulerTrainingRun] = field(default_factory=list)
    fine_tuned_from: str | None = None
    """The scheduler the latest fine-tuning run started from (path, packaged name or MLflow URI)."""
    episodes_done: int = 0
    """Episodes of the latest run when the checkpoint was written: where a resume continues."""
    updates: int = 0

    def session(self, mlflow_run_id: str) -> SchedulerTrainingRun | None:
        return next((s for s in self.trained_on if s.mlflow_run_id == mlflow_run_id), None)

    @property
    def episodes_total(self) -> int:
        return sum(s.episodes for s in self.trained_on)

    def to_json(self) -> JSONObject:
        out: JSONObject = {"trained_on": [s.to_json() for s in self.trained_on],
                               "progress": {"episodes_done": self.episodes_done, "updates": self.updates}}
        if self.fine_tuned_from is not None:
            out["fine_tuned_from"] = self.fine_tuned_from
        return out

    @classmethod
    def from_json(cls, data: Any) -> SchedulerProvenance:
        values = _known({"trained_on", "progress", "fine_tuned_from"}, data, "scheduler provenance")
        progress = values.get("progress") or {}
        if not isinstance(progress, Mapping) or not set(progress) <= {"episodes_done", "updates"}:
            raise ConfigError(f"scheduler provenance: progress must hold episodes_done and updates, got {progress!r}")
        trained_on = values.get("trained_on") or []
        if not isinstance(trained_on, list):
            raise ConfigError("scheduler provenance: trained_on must be a list")
        return cls(trained_on=[SchedulerTrainingRun.from_json(s) for s in trained_on],
                   fine_tuned_from=values.get("fine_tuned_from"),
                   episodes_done=int(progress.get("episodes_done", 0)), updates=int(progress.get("updates", 0)))


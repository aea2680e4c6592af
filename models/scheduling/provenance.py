"""How a scheduler checkpoint was trained: its workload and every training run behind it.

Written as JSON in the checkpoint's header (models/scheduling/learned.py) and read back typed, so
a resumed training continues with the workload and seeds it started with, a fine-tuned scheduler
lists its source's training before its own, and a card can say what a checkpoint saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from models.errors import ConfigError


def _known(names: set[str], data: Any, what: str) -> dict[str, Any]:
    """data as keyword arguments with these names; unknown keys and non-mappings are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{what}: unknown key(s) {unknown}; known: {sorted(names)}")
    return dict(data)


@dataclass(frozen=True)
class SchedulerWorkload:
    """The `train` parameters every episode of a scheduler training runs with. None keeps
    `train`'s default (the env's preset)."""

    env: str
    i_max: int = 32
    """The scheduler's action space: 1..i_max actors."""
    preset: str | None = None
    """A variant of the env's preset the unset parameters come from (e.g. locomotion for
    Hopper-v5: J 2000, episodes carried across rounds); None: the env's own preset."""
    target_return: float | None = None
    """J; a training resolves it (preset, else gymnasium's reward_threshold) before it starts."""
    budget_usd: float | None = None
    max_rounds: int | None = None
    fragment: int | None = None
    ppo: dict[str, Any] | None = None
    """Overrides of the workload's PPO settings, e.g. {"learning_rate": 0.002}."""
    local_workers: int | None = None
    backend: str | None = None
    """Where the episodes' actors run: local (default), dask, ... (tasks/backends.py)."""
    backend_options: dict[str, Any] | None = None
    """That backend's options, e.g. {"dask_address": "tcp://scheduler:8786"} for dask."""
    eval_every: int | None = None
    """Every this many rounds (and at the end) the workload's policy plays whole deterministic
    episodes (None: off, `train`'s default)."""
    eval_episodes: int | None = None
    """Episodes of each of those evaluations (None: `train`'s default, 5)."""
    stop_at_eval: bool | None = None
    """J is judged on those evaluations, not on R_k (the mean return of the episodes that ended
    in a round): with few actors R_k holds a single episode, and a lucky one ends the episode
    early, which a scheduler learns to exploit (BENCHMARKS.md issue 13). Needs eval_every."""

    def train_parameters(self) -> dict[str, Any]:
        """Keyword arguments of the `train` flow."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def placed(self, backend: str | None, backend_options: dict[str, Any] | None,
               local_workers: int | None) -> SchedulerWorkload:
        """The same workload with its actors placed as given (None keeps this one's): a resumed
        training may run on another cluster without changing what it learns on."""
        return replace(self, backend=self.backend if backend is None else backend,
                       backend_options=self.backend_options if backend_options is None else backend_options,
                       local_workers=self.local_workers if local_workers is None else local_workers)

    def with_target(self, target_return: float) -> SchedulerWorkload:
        return replace(self, target_return=float(target_return))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> SchedulerWorkload:
        values = _known({f.name for f in fields(cls)}, data, "scheduler workload")
        if not isinstance(values.get("env"), str):
            raise ConfigError("scheduler workload: env must be a gymnasium env id")
        return cls(**values)


TRAINING_MODES = ("scratch", "finetune")


@dataclass
class TrainingSession:
    """One `train-scheduler` run that trained the checkpoint (an entry of its `trained_on`)."""

    env: str
    mlflow_run_id: str
    """The run's parent MLflow run: resuming it finds this entry."""
    seed: int
    """Episode e trained the workload with seed + e."""
    mode: str
    """scratch or finetune."""
    workload: SchedulerWorkload
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

    def __post_init__(self) -> None:
        if self.mode not in TRAINING_MODES:
            raise ConfigError(f"training session mode must be one of {TRAINING_MODES}, got {self.mode!r}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "workload": self.workload.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> TrainingSession:
        values = _known({f.name for f in fields(cls)}, data, "trained_on entry")
        missing = sorted(f.name for f in fields(cls) if f.default is MISSING and f.name not in values)
        if missing:
            raise ConfigError(f"trained_on entry: missing {missing}")
        return cls(**{**values, "workload": SchedulerWorkload.from_json(values["workload"])})


@dataclass
class SchedulerProvenance:
    """Everything a checkpoint records about its training, oldest run first."""

    trained_on: list[TrainingSession] = field(default_factory=list)
    fine_tuned_from: str | None = None
    """The scheduler the latest fine-tuning run started from (path, packaged name or MLflow URI)."""
    episodes_done: int = 0
    """Episodes of the latest run when the checkpoint was written: where a resume continues."""
    updates: int = 0

    def session(self, mlflow_run_id: str) -> TrainingSession | None:
        return next((s for s in self.trained_on if s.mlflow_run_id == mlflow_run_id), None)

    @property
    def episodes_total(self) -> int:
        return sum(s.episodes for s in self.trained_on)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"trained_on": [s.to_json() for s in self.trained_on],
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
        return cls(trained_on=[TrainingSession.from_json(s) for s in trained_on],
                   fine_tuned_from=values.get("fine_tuned_from"),
                   episodes_done=int(progress.get("episodes_done", 0)), updates=int(progress.get("updates", 0)))


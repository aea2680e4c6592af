"""A `train` run's set-up before anything starts: its parameters as one validated RunConfig (a new
run: presets fill what is unset; a resumed run: the checkpoint's configuration with the changes a
resume may make), and a learned scheduler named by an MLflow URI fetched from the run's store.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flows.tracking import RunTracker, default_tracking_uri, project_root
from models.errors import ConfigError
from models.run.config import RunConfig
from models.run.presets import resolve_parameters, resolve_run_changes
from models.scheduling.learned_spec import is_learned_spec, is_mlflow_uri, parse_learned_spec

if TYPE_CHECKING:
    from models.run.checkpoint import RunCheckpoint
    from models.run.records import RunProgress


def fetch_scheduler_checkpoint(ref: str, tracking_uri: str, dest: str | Path) -> Path:
    """Download the scheduler checkpoint an MLflow URI names (runs:/<id>/scheduler/scheduler.pt,
    models:/...) from `tracking_uri`, never from MLFLOW_TRACKING_URI or a default, into the
    folder `dest`; a folder artifact gives its first .pt file."""
    import mlflow.artifacts

    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=ref, tracking_uri=tracking_uri,
                                                         dst_path=str(dest)))
    except Exception as exc:  # MlflowException, OSError: say which URI and store failed
        raise ConfigError(f"cannot download scheduler checkpoint {ref!r} from {tracking_uri}: {exc}") from exc
    if local.is_dir():
        found = sorted(local.rglob("*.pt"))
        if not found:
            raise ConfigError(f"no .pt scheduler checkpoint under {ref!r} in {tracking_uri}")
        local = found[0]
    return local


def localise_scheduler_spec(spec: str | None, tracking_uri: str, dest_root: str | Path) -> str | None:
    """'learned:<MLflow URI>[:mode]' -> 'learned:<local copy>:<mode>', the copy downloaded from
    `tracking_uri` into a fresh folder under dest_root (kept: a resumed run loads it again).
    Every other spec comes back unchanged."""
    if not is_learned_spec(spec):
        return spec
    learned = parse_learned_spec(spec)
    if not is_mlflow_uri(learned.ref):
        return spec
    Path(dest_root).mkdir(parents=True, exist_ok=True)
    local = fetch_scheduler_checkpoint(learned.ref, tracking_uri, tempfile.mkdtemp(prefix="scheduler-", dir=dest_root))
    return f"learned:{local}:{learned.mode}"


@dataclass(frozen=True)
class RunSetup:
    """A run's resolved configuration, and for a resumed run its checkpoint and what changed."""

    config: RunConfig
    checkpoint: RunCheckpoint | None = None
    changes: Mapping[str, object] | None = None
    scheduler_source: str | None = None
    checkpoint_path: str | None = None
    """The file a resumed run's checkpoint came from (what an error about it names)."""


def prepare_run(given: dict[str, object], resume: str | None) -> RunSetup:
    """The train flow's parameters (those given) as one validated RunConfig, before anything starts.

    A new run: presets fill what is unset; a learned scheduler named by an MLflow URI is
    downloaded from the run's own store. A resumed run: the checkpoint's stored configuration,
    with only the changes a resume may make.
    """
    if resume:
        if not Path(resume).is_file():  # a FIFO or a folder would hang or fail deep in torch.load
            raise ConfigError(f"resume: {resume} is not a checkpoint file (checkpoints/<run id>/latest.pt)")
        from models.run.checkpoint import load_run_checkpoint  # torch: only when resuming

        checkpoint = load_run_checkpoint(resume)
        try:
            stored = RunConfig.from_dict(checkpoint.config)
        except (ConfigError, TypeError, KeyError) as exc:  # an edited or damaged configuration
            raise ConfigError(f"checkpoint {resume}: its config is not a valid run configuration: {exc}") from None
        changes = resolve_run_changes(given, stored)
        config = stored.with_changes(changes)
        RunTracker(config.tracking_uri).check_reachable()
        return RunSetup(config, checkpoint, changes, checkpoint_path=str(resume))
    given.setdefault("tracking_uri", default_tracking_uri())
    RunTracker(str(given["tracking_uri"])).check_reachable()  # in seconds, before anything starts
    given.setdefault("checkpoint_dir", str(project_root() / "checkpoints"))
    source = given.get("scheduler")
    given["scheduler"] = localise_scheduler_spec(source, given["tracking_uri"],
                                                 Path(given["checkpoint_dir"]) / "scheduler-artifacts")
    if given["scheduler"] is None:
        del given["scheduler"]
    cfg = resolve_parameters(given)
    return RunSetup(cfg, scheduler_source=str(source).strip() if source != given.get("scheduler") else None)


def check_against_run(progress: RunProgress, tracker: RunTracker, run_id: str, where: str) -> None:
    """A resumed checkpoint's rounds as its MLflow run logged them: each logged round's bill and env
    steps must be the checkpoint's (an edited history, even one whose totals were edited to match,
    is refused, naming the file, the field and what MLflow holds)."""
    for key, name in (("cost/round_usd", "cost_usd"), ("rollout/env_steps", "env_steps")):
        for logged in tracker.client.get_metric_history(run_id, key):
            if logged.step >= len(progress.history):
                continue
            mine = float(getattr(progress.history[logged.step], name))
            if not math.isclose(mine, logged.value, rel_tol=1e-9, abs_tol=1e-15):
                raise ConfigError(f"{where}: progress.history[{logged.step}].{name} = {mine!r}, but MLflow run "
                                  f"{run_id} logged {logged.value!r} for that round ({key}): the checkpoint was "
                                  "edited or belongs to another run")

"""What a resumed experiment needs: the runs it already finished, kept as they were returned.

An experiment flow (flows/experiments/) is a sequence of nested training runs; on this 2-core
machine a workload like Hopper-v5 makes that an hour or more. After each run the experiment
keeps a `FinishedRun` (the run's label, seed, scheduler and summary) as an artifact of its
MLflow parent run; an experiment resumed with that parent's id reads them back and skips those
runs, so a crash loses at most the run in flight. The records are models/run/wire.py blobs (JSON and
numpy, no pickle): reading one runs no code. Pure: no Prefect, no MLflow.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from models.errors import ConfigError
from models.impact.progress import ImpactSummary
from models.run.records import RunSummary
from models.run.wire import Codec, WireError

FINISHED_DIR = "finished_runs"
"""The folder of an experiment's parent run that holds its finished runs' records."""
IMPACT_SCHEDULER = "impact"
"""`FinishedRun.scheduler` of an IMPACT run (it has no `train` scheduler)."""


@dataclass(frozen=True)
class FinishedRun:
    """One nested run an experiment finished: a `train` run's summary or an IMPACT run's."""

    label: str
    seed: int
    scheduler: str
    """The `train` scheduler spec it ran, or IMPACT_SCHEDULER."""
    summary: RunSummary | None = None
    impact: ImpactSummary | None = None
    key: str = ""
    """The cache key of the code and settings it ran with (models/report/table2_cells.py cell_key);
    "" for an experiment that keys its runs by (label, seed) alone."""

    def __post_init__(self) -> None:
        if (self.summary is None) == (self.impact is None):
            raise ValueError("a finished run holds exactly one of a train summary and an IMPACT summary")

    @property
    def has_cloud_clock(self) -> bool:
        """Whether it was measured on the cloud clock (runs kept before it existed were not)."""
        cloud = self.summary.cloud_time_s if self.summary is not None else self.impact.cloud_s  # type: ignore[union-attr]
        return math.isfinite(cloud)


CODEC = Codec(FinishedRun)


def finished_run_file(label: str, seed: int) -> str:
    """The artifact file name of (label, seed): readable, and distinct for distinct pairs."""
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", label).strip("_") or "run"
    digest = hashlib.sha256(f"{label}\0{seed}".encode()).hexdigest()[:8]
    return f"{slug}__seed{seed}__{digest}.mrlw"


def encode_finished(run: FinishedRun) -> bytes:
    return CODEC.encode(run)


def decode_finished(data: bytes, source: str) -> FinishedRun:
    """A FinishedRun from its blob; anything else is a ConfigError naming `source`."""
    try:
        return CODEC.decode(data, FinishedRun)
    except (WireError, ValueError, TypeError) as exc:
        raise ConfigError(f"{source} is not a finished-run record of an experiment: {exc}") from exc


def read_carried(paths: Iterable[str | Path]) -> list[FinishedRun]:
    """The finished-run records in these files and folders (a folder: its *.mrlw files), e.g. a
    table's cells exported from another machine's store; checked before anything runs."""
    found: list[FinishedRun] = []
    for given in paths:
        path = Path(given)
        files = sorted(path.glob("*.mrlw")) if path.is_dir() else [path]
        if not path.exists() or not files:
            raise ConfigError(f"carry: {path} is no finished-run record (.mrlw) nor a folder of them")
        found += [decode_finished(f.read_bytes(), str(f)) for f in files]
    return found


def changed_params(stored: Mapping[str, str], given: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """The parameters (flattened, as MLflow stores them) a resume would change: name -> (stored,
    given). MLflow cuts a value at 6000 characters, so only that much of a given value is compared."""
    return {key: (stored.get(key), given.get(key)) for key in sorted(set(stored) | set(given))
            if stored.get(key) != (None if given.get(key) is None else given[key][:6000])}

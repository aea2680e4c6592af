"""What the work-pool backend and its actors exchange through the storage block, in one place.

Both sides import this module: the backend (tasks/workpool/) and the actor flows
(flows/actor.py). Layout under a training run's prefix in the block (tasks/storage.py):

    weights/<digest>            the round's weights (raw bytes, loaded with weights_only=True)
    jobs/<job_id>               a JobEnvelope: the ActorJob without weights, where its weights are
    started/<job_id>            a ProcessMarker, written when the actor begins
    results/<job_id>            a ResultEnvelope: the RolloutBatch, or the actor's error
    servers/<id>/ready          a ProcessMarker, once a warm server is up
    servers/<id>/inbox/<n>      the n-th job id for that server, UTF-8 ("" = stop)

Every object is written with models/run/wire.py, which cannot run code when read: anything in the
block may have been written by any actor. A blob that does not decode, or an envelope of another
version, raises StorageFormatError naming its key.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeVar

from models.rl.rollout import ActorJob, RolloutBatch
from models.run.wire import Codec, WireError
from tasks.storage import BlockStore

PROTOCOL_VERSION = 1
# An actor past its job's deadline by this much ends its own process (flows/actor.py).
DEADLINE_GRACE_S = 5.0


class StorageFormatError(RuntimeError):
    """A key in the storage block holds something other than what the protocol puts there."""


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def new_run_prefix() -> str:
    """A training run's own folder in the block."""
    return f"minionsrl/{new_token()}"


def new_job_id(round_index: int, actor_index: int) -> str:
    return f"r{round_index}-a{actor_index}-{new_token()[:6]}"


@dataclass(frozen=True)
class RunKeys:
    """The storage keys of one training run (its prefix), built here and nowhere else."""

    prefix: str

    def weights(self, digest: str) -> str:
        return f"{self.prefix}/weights/{digest}"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}/jobs/{job_id}"

    def started(self, job_id: str) -> str:
        return f"{self.prefix}/started/{job_id}"

    def started_dir(self) -> str:
        return f"{self.prefix}/started"

    def result(self, job_id: str) -> str:
        return f"{self.prefix}/results/{job_id}"

    def of_job(self, job_id: str) -> tuple[str, str, str]:
        """Everything a job leaves behind: its envelope, start marker and result."""
        return self.job(job_id), self.started(job_id), self.result(job_id)

    def ready(self, server_id: str) -> str:
        return f"{self.prefix}/servers/{server_id}/ready"

    def inbox(self, server_id: str, seq: int) -> str:
        return f"{self.prefix}/servers/{server_id}/inbox/{seq}"


@dataclass(frozen=True)
class JobEnvelope:
    """One actor's job as stored: the ActorJob with empty weights, and where its weights are."""

    job: ActorJob
    weights_digest: str
    deadline_at: float | None  # wall clock; None: no timeout
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class ResultEnvelope:
    """What an actor sends back: its batch, or the error that ended it."""

    batch: RolloutBatch | None = None
    error: str | None = None
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class ProcessMarker:
    """Where an actor (started/) or a warm server (ready) runs."""

    pid: int
    host: str
    flow_run_id: str | None
    at: float
    version: int = PROTOCOL_VERSION


Stored = JobEnvelope | ResultEnvelope | ProcessMarker
S = TypeVar("S", JobEnvelope, ResultEnvelope, ProcessMarker)
CODEC = Codec(JobEnvelope, ResultEnvelope, ProcessMarker)


def put(store: BlockStore, key: str, obj: Stored) -> None:
    store.put(key, CODEC.encode(obj))


def get(store: BlockStore, key: str, kind: type[S]) -> S | None:
    """The `kind` at key, or None if nothing is there (yet)."""
    data = store.get(key)
    if data is None:
        return None
    try:
        obj = CODEC.decode(data, kind)
    except WireError as exc:
        raise StorageFormatError(f"{key} in {store.slug or 'the storage block'} is not a "
                                 f"{kind.__name__} of this protocol: {exc}") from None
    if obj.version != PROTOCOL_VERSION:
        raise StorageFormatError(f"{key}: {kind.__name__} version {obj.version}, this code reads "
                                 f"version {PROTOCOL_VERSION}")
    return obj

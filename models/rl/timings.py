"""An actor's clock: when each phase began and how long it took, as the actor and its backend saw it.

The actor fills the first six fields (models/rl/rollout.py); the backend that ran it adds the
hand-off and the return, and what its infrastructure cost before the actor's body ran. The
round's figures (models/run/metrics.py) are computed from these fields only.

Times named `*_at` are wall-clock epoch seconds; times named `*_s` are durations in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ActorTimings:
    requested_at: float
    """The flow asked for this actor."""
    started_at: float
    """The actor's billed time begins: its body started, or the hand-off once start-up is billed."""
    startup_s: float
    """Building envs and the policy module (plus boot or infrastructure start-up when billed)."""
    weight_load_s: float
    """Loading the round's weights into the policy (plus their transfer where one is measured)."""
    sampling_s: float
    """Stepping the envs for the fragment."""
    sampled_at: float
    """Sampling ended."""
    dispatched_at: float | None = None
    """The backend handed the job off (None: at the request)."""
    sent_at: float | None = None
    """The batch left the actor's process."""
    received_at: float | None = None
    """The batch was back with the backend (None: at the end of sampling)."""
    cold_start: bool | None = None
    """The actor's process or infrastructure started for this job (reported by some backends)."""
    boot_s: float | None = None
    """A cold worker process's boot, billed as start-up (local and dask backends)."""
    infra_startup_s: float | None = None
    """Work pool: from the hand-off to the actor's flow body (worker poll, process or container)."""
    body_at: float | None = None
    """Work pool: the actor's flow body began."""
    job_read_s: float | None = None
    """Work pool: reading the job envelope from storage."""
    weight_transfer_s: float | None = None
    """Work pool: downloading the weights from storage."""
    worker_pid: int | None = None
    """The worker process that ran the actor (local and dask backends): a server cluster's
    actors are the same processes every round."""
    attempts: int = 1
    """Attempts this actor took (retries after a crash or timeout)."""
    failed_attempts_billed_s: float = 0.0
    """Billed seconds of this actor's failed attempts before the one that returned."""

    def count_boot_as_startup(self, handed_at: float) -> None:
        """The worker process booted after the hand-off and before the body: that wait is
        start-up the actor is billed for, not queueing, so its billed time starts at the hand-off."""
        self.boot_s = max(self.started_at - handed_at, 0.0)
        self.startup_s += self.boot_s
        self.started_at = handed_at

    def count_infra_as_startup(self, handed_at: float) -> None:
        """Work pool: everything between the hand-off and the actor's body (worker poll,
        process or container start, imports; for a warm server its inbox poll) is start-up,
        and the weights' download is part of loading them."""
        self.infra_startup_s = max((self.body_at or handed_at) - handed_at, 0.0)
        self.startup_s += self.infra_startup_s + (self.job_read_s or 0.0)
        self.weight_load_s += self.weight_transfer_s or 0.0
        self.started_at = handed_at


@dataclass(frozen=True)
class ActorPhases:
    """The parts of one actor's duration P^a, from the flow's request to its data back.

    Waiting for a free local core (queue_s) is not part of P^a: with one core per actor, as on
    serverless infrastructure, it would not exist.
    """

    dispatch_s: float
    queue_s: float
    startup_s: float
    weight_load_s: float
    sampling_s: float
    upload_s: float

    @property
    def duration_s(self) -> float:
        return self.dispatch_s + self.startup_s + self.weight_load_s + self.sampling_s + self.upload_s

    @classmethod
    def of(cls, t: ActorTimings) -> ActorPhases:
        dispatched = t.requested_at if t.dispatched_at is None else t.dispatched_at
        received = t.sampled_at if t.received_at is None else t.received_at
        return cls(dispatch_s=max(dispatched - t.requested_at, 0.0),
                   queue_s=max(t.started_at - dispatched, 0.0),
                   startup_s=t.startup_s, weight_load_s=t.weight_load_s, sampling_s=t.sampling_s,
                   upload_s=max(received - t.sampled_at, 0.0))


PHASE_NAMES = ("dispatch_s", "queue_s", "startup_s", "weight_load_s", "sampling_s", "upload_s")
OPTIONAL_FIGURES = ("cold_start", "weight_transfer_s", "infra_startup_s", "boot_s")

"""Ctrl-C stops a run the way SIGTERM does, within seconds, and a second one exits at once.

A terminal's Ctrl-C sends SIGINT to its whole process group. The servers the project starts run in
sessions of their own (deployments/processes.py), and actor workers ignore SIGINT, so the signal is
the training's to act on. The command lines install the handler explicitly (`stop_on_interrupt`),
because a process started in the background by a non-interactive shell begins with SIGINT ignored.

The first SIGINT asks the run to stop: the actors of the round in flight are abandoned (their
backend is closed, from a thread), and `Interrupted` is raised in the main thread, at once where
that is safe, or, inside the round loop (`deferred`), at the next point the loop checks: an
exception raised in the middle of Prefect's engine calls (a task run being created) breaks Prefect's
own crash handling. The run's checkpoint is its last finished round, the Prefect flow run ends
Crashed and the MLflow run KILLED, both saying why, and `--resume` continues it. A second SIGINT
exits at once (status 130).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C
MESSAGE = "interrupted by the user (Ctrl-C, SIGINT): the run stopped after its last finished round"


class Interrupted(KeyboardInterrupt):
    """The user pressed Ctrl-C (SIGINT): the run stops; its checkpoint is the last finished round."""


_requested = threading.Event()
_deferring = 0  # depth of `deferred` sections on the main thread
_abandon: list[Callable[[], None]] = []


def requested() -> bool:
    """Whether a Ctrl-C asked the run to stop."""
    return _requested.is_set()


def check() -> None:
    """Raise Interrupted if a Ctrl-C asked the run to stop (a safe point of a deferred section)."""
    if _requested.is_set():
        raise Interrupted(MESSAGE)


@contextlib.contextmanager
def deferred(abandon: Callable[[], None] | None = None) -> Iterator[None]:
    """A section (the round loop) where Ctrl-C is noted rather than raised on the main thread;
    `abandon` (closing the actor backend) runs from a thread when it comes, so that the round in
    flight ends at once. The section calls `check()` where stopping is safe."""
    global _deferring
    main = threading.current_thread() is threading.main_thread()
    if abandon is not None:
        _abandon.append(abandon)
    _deferring += main
    try:
        if _requested.is_set() and abandon is not None:
            abandon()
        yield
    finally:
        _deferring -= main
        if abandon is not None:
            _abandon.remove(abandon)


def _handler(signum: int, frame: object) -> None:
    if _requested.is_set():
        print("\ninterrupted again: exiting now", file=sys.stderr, flush=True)
        os._exit(EXIT_INTERRUPTED)
    _requested.set()
    print("\ninterrupted (Ctrl-C): stopping the run; its checkpoint is the last finished round, --resume "
          "continues it; Ctrl-C again to exit at once", file=sys.stderr, flush=True)
    for abandon in list(_abandon):
        threading.Thread(target=abandon, name="abandon-round", daemon=True).start()
    if not _deferring:
        raise Interrupted(MESSAGE)


@contextlib.contextmanager
def stop_on_interrupt() -> Iterator[None]:
    """While inside (a command line's runs): SIGINT stops the run as this module says."""
    _requested.clear()
    previous = signal.signal(signal.SIGINT, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

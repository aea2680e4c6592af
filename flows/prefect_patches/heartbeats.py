"""Prefect's flow-run heartbeats, without their wait at every sync flow's exit.

Prefect 3.9's sync flow engine runs the heartbeat thread (prefect/flow_engine.py
`_send_heartbeats`) with `join_on_exit=True`: at the flow's exit it joins a thread that sleeps
in 1 s steps, so every flow run with heartbeats on ends 0-1 s later than its work (measured in
`train`'s shut-down). The async engine passes `join_on_exit=False`: the thread sees the stop
event within a second and ends by itself (it is a daemon, and emits nothing once stopped).
`install()` makes the sync engine do the same. Heartbeats are still sent at the configured
frequency while the flow runs, so Prefect's crash detection is unchanged.

Pinned to prefect 3.9 (refused on another: flows/prefect_patches/__init__.py); tests/test_heartbeats.py checks that heartbeats are
still emitted and that the exit no longer waits.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Generator
from typing import Any

from flows.prefect_patches import check_prefect

_installed = False


def install() -> None:
    """Patch prefect.flow_engine once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from prefect import flow_engine

    original = flow_engine._send_heartbeats
    check_prefect("heartbeats", "join_on_exit" in inspect.signature(original).parameters)

    @contextlib.contextmanager
    def send_heartbeats_without_join(engine: Any, join_on_exit: bool = True) -> Generator[None, None, None]:
        with original(engine, join_on_exit=False):
            yield

    flow_engine._send_heartbeats = send_heartbeats_without_join
    _installed = True

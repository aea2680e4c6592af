"""flows/prefect_patches/heartbeats.py: sync flows still send heartbeats, and their exit no longer joins the
heartbeat thread (which sleeps in 1 s steps)."""

from __future__ import annotations

import threading
import time

from flows.prefect_patches import heartbeats


class HeldSleep:
    """prefect.flow_engine's `time`, except that sleep() in another thread waits for a gate:
    the heartbeat thread cannot end until the test lets it."""

    def __init__(self):
        self.gate = threading.Event()

    def __getattr__(self, name):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if threading.current_thread() is threading.main_thread():
            time.sleep(seconds)
        else:
            self.gate.wait(30)


def test_heartbeats_are_sent_and_the_flow_exit_does_not_wait_for_their_thread(prefect_api_url, monkeypatch):
    from prefect import flow, flow_engine
    from prefect.flow_engine import FlowRunEngine
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    heartbeats.install()  # idempotent
    sent: list[threading.Thread] = []
    original = FlowRunEngine._emit_flow_run_heartbeat

    def emit(self, *args, **kwargs):
        sent.append(threading.current_thread())
        return original(self, *args, **kwargs)

    held = HeldSleep()
    monkeypatch.setattr(FlowRunEngine, "_emit_flow_run_heartbeat", emit)
    monkeypatch.setattr(flow_engine, "time", held)
    body_done = []

    @flow(persist_result=False)
    def beating() -> int:
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:  # the first beat goes out at the start
            time.sleep(0.05)
        body_done.append(time.monotonic())
        return 7

    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):
            assert beating() == 7
        returned_at = time.monotonic()
        assert len(sent) == 1 and sent[0] is not threading.current_thread()  # a heartbeat was sent
        # The heartbeat thread is still in its sleep: Prefect's own exit would have joined it
        # (2 s timeout); this one returned at once and left the thread to end by itself.
        assert sent[0].is_alive()
        assert returned_at - body_done[0] < 1.5
    finally:
        held.gate.set()
    sent[0].join(timeout=5)
    assert not sent[0].is_alive()

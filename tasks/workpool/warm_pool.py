"""Warm actor servers: long-lived `actor-server` flow runs that take jobs through their inbox.

A warm server turns a job around in one storage write + one inbox poll. Measured here
(benchmarks/backends.py, quiet, the local_stack server): 0.015 / 0.028 / 0.047 s mean at
1 / 8 / 32 actors at once, inline. Under load on stock `prefect server start`, 0.53 s and 4.9 s
at 1 and 8 when each job is also an `actor` subflow (`warm_subflows=True`: every subflow is
several API writes, and SQLite serialises them).

Sizing is a pure function of the scheduler's recent choices (`warm_target`, `plan_resize`),
kept apart from the code that starts and stops servers (`WarmPool`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from models.rl.rollout import ActorJob
from tasks.storage import BlockStore
from tasks.workpool.launcher import Launcher
from tasks.workpool.monitor import StateMonitor
from tasks.workpool.protocol import RunKeys, new_token

READY_RECHECK_S = 0.5  # a server not yet ready is looked up in the block at most this often


# -- sizing: pure --------------------------------------------------------------------------
def warm_target(round_sizes: Mapping[int, int], last_round: int, window: int, most: int) -> int:
    """Warm servers wanted: the largest actor count of the `window` rounds before `last_round`
    (the one starting now is not complete yet), up to `most`; `most` before any such round."""
    recent = [n for r, n in round_sizes.items() if last_round - window <= r < last_round]
    return min(most, max(recent)) if recent else most


@dataclass(frozen=True)
class ServerInfo:
    """A warm server as the backend sees it (a snapshot)."""

    server_id: str
    flow_run_id: UUID | None
    seq: int  # next inbox message number
    ready: bool
    busy: bool
    dead: bool
    retiring: bool


@dataclass(frozen=True)
class ResizePlan:
    retire: tuple[str, ...]  # server ids to stop: idle ones only
    start: int  # servers to start


def plan_resize(target: int, live: Sequence[ServerInfo]) -> ResizePlan:
    """Move the live (not dead, not retiring) servers towards `target`: retire idle servers
    beyond it (a busy one finishes its job first), start the missing ones."""
    idle = [s.server_id for s in live if not s.busy]
    return ResizePlan(retire=tuple(idle[: max(len(live) - target, 0)]),
                      start=max(target - len(live), 0))


# -- the pool ------------------------------------------------------------------------------
@dataclass(eq=False)
class Server:
    server_id: str
    flow_run_id: UUID | None = None
    seq: int = 0
    ready: bool = False
    busy: bool = False
    dead: bool = False
    retiring: bool = False
    checked_at: float = 0.0
    idle_since: float | None = None
    """When this server last became free (its start, or its last job's end); None while busy."""

    def info(self) -> ServerInfo:
        return ServerInfo(self.server_id, self.flow_run_id, self.seq, self.ready, self.busy,
                          self.dead, self.retiring)


class WarmPool:
    """Up to `most` warm servers, following the largest actor count of the last `window` rounds.

    prewarm: the first `await_prewarm()` waits (up to ready_timeout_s) until the servers started
    with the pool are ready, so the first round starts warm.
    """

    def __init__(self, store: BlockStore, keys: RunKeys, launcher: Launcher,
                 monitor: StateMonitor, deployment_id: UUID | None, env_id: str, most: int,
                 window: int, idle_timeout_s: float, as_subflows: bool, prewarm: bool,
                 ready_timeout_s: float):
        self.store = store
        self.keys = keys
        self._idle_s = 0.0  # banked idle seconds of warm servers, taken by take_idle_s()
        self.launcher = launcher
        self.monitor = monitor
        self.deployment_id = deployment_id
        self.env_id = env_id
        self.most = most
        self.window = window
        self.idle_timeout_s = idle_timeout_s
        self.as_subflows = as_subflows
        self._lock = threading.Lock()
        self._servers: list[Server] = []
        self._round_sizes: dict[int, int] = {}
        self._last_round = -1
        self._closing = False  # set (under _lock) when close() begins: no new servers after it
        self._starts: list[threading.Thread] = []  # background server starts, joined by close()
        self._warming = prewarm and most > 0
        self._ready_timeout_s = ready_timeout_s
        self._warm_lock = threading.Lock()
        for _ in range(most):
            self._start_server()

    # -- readiness -----------------------------------------------------------------------
    def await_prewarm(self) -> None:
        """The first run() waits until the servers started with the pool are ready; they boot
        (as flow runs on the pool) while the caller builds its learner."""
        with self._warm_lock:
            if self._warming:
                self.wait_ready(self.most, self._ready_timeout_s)
                self._warming = False

    def wait_ready(self, count: int, timeout_s: float) -> int:
        """Wait until `count` warm servers said ready (or timeout); return how many are."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                servers = [s for s in self._servers if not s.dead]
            ready = sum(self._is_ready(s, force=True) for s in servers)
            if ready >= count or time.monotonic() > deadline:
                return ready
            time.sleep(0.1)

    def _is_ready(self, server: Server, force: bool = False) -> bool:
        if server.ready or server.dead:
            return server.ready and not server.dead
        now = time.monotonic()
        if force or now - server.checked_at > READY_RECHECK_S:
            server.checked_at = now
            server.ready = self.store.get(self.keys.ready(server.server_id)) is not None
        return server.ready

    # -- sizing from the scheduler's recent choices --------------------------------------
    def observe(self, job: ActorJob) -> None:
        """Count the job's round; the first job of a new round resizes the pool."""
        with self._lock:
            r = job.round_index
            self._round_sizes[r] = max(self._round_sizes.get(r, 0), job.actor_index + 1)
            new_round = r > self._last_round
            self._last_round = max(self._last_round, r)
        if new_round and self.most:
            self.resize()

    def target(self) -> int:
        with self._lock:
            return warm_target(self._round_sizes, self._last_round, self.window, self.most)

    def resize(self) -> None:
        target = self.target()
        with self._lock:
            live = [s for s in self._servers if not s.dead and not s.retiring]
            plan = plan_resize(target, [s.info() for s in live])
            extra = [s for s in live if s.server_id in plan.retire]
            for server in extra:
                server.retiring = True
        for server in extra:
            self._stop_server(server)
        for _ in range(plan.start):  # in the background: this round's actors do not wait for it
            self._start_in_background()

    # -- starting and stopping servers ---------------------------------------------------
    def _start_server(self) -> Server:
        server = Server(server_id=new_token(), idle_since=time.time())
        with self._lock:
            self._servers.append(server)
        server.flow_run_id = self.launcher.create_server_run(
            self.deployment_id, server.server_id, self.env_id, self.idle_timeout_s,
            self.as_subflows)
        self.monitor.watch(server.flow_run_id)
        return server

    def _start_in_background(self) -> None:
        """Start a warm server from a thread that close() waits for, so that no server flow run
        is created after close() looked at the servers (it would idle, billed, until its idle
        timeout) and no start is cut off by close() closing the API client under it."""
        with self._lock:
            if self._closing:
                return
            thread = threading.Thread(target=self._start_server, daemon=True)
            self._starts.append(thread)
            thread.start()

    def _stop_server(self, server: Server) -> None:
        self._bank_idle(server, time.time())  # billed until it is told to stop
        server.idle_since = None
        with contextlib.suppress(Exception):  # best effort: close() cancels one that stays up
            self.store.put(self.keys.inbox(server.server_id, server.seq), b"")
        server.seq += 1
        server.dead = True
        if server.flow_run_id:
            self.monitor.unwatch(server.flow_run_id)

    # -- jobs ----------------------------------------------------------------------------
    def take(self) -> Server | None:
        """An idle ready server, now marked busy; None if there is none."""
        with self._lock:
            candidates = [s for s in self._servers if not (s.busy or s.dead or s.retiring)]
            for server in candidates:
                if self.monitor.final_state(server.flow_run_id) is not None:
                    server.dead = True
                    continue
                if self._is_ready(server):
                    server.busy = True
                    self._bank_idle(server, time.time())
                    server.idle_since = None
                    return server
        return None

    def _bank_idle(self, server: Server, now: float) -> None:
        if server.idle_since is not None:
            self._idle_s += max(now - server.idle_since, 0.0)

    def take_idle_s(self) -> float:
        """Seconds the warm servers sat kept but idle (booting included) since the last call:
        a warm pool is billed while it waits, not only while it samples."""
        now = time.time()
        with self._lock:
            for server in self._servers:
                if not server.dead and server.idle_since is not None:
                    self._bank_idle(server, now)
                    server.idle_since = now
            idle, self._idle_s = self._idle_s, 0.0
        return idle

    def hand(self, server: Server, job_id: str) -> None:
        """Put the job id in the server's inbox (it is busy: nobody else writes there now)."""
        self.store.put(self.keys.inbox(server.server_id, server.seq), job_id.encode())
        server.seq += 1

    def release(self, server: Server) -> None:
        with self._lock:
            server.busy = False
            server.idle_since = time.time()

    def kill(self, server: Server, why: str, subflow_id: UUID | None) -> None:
        """A server running a job past its timeout is that job's process: cancel it (and the
        job's `actor` subflow, which would stay Running) and start another in the background."""
        with self._lock:
            server.dead = True
        self.launcher.cancel(server.flow_run_id, why)
        if subflow_id is not None and subflow_id != server.flow_run_id:
            self.launcher.crash(subflow_id, why)
        with self._lock:
            if self._closing:
                return
        threading.Thread(target=self.resize, daemon=True).start()

    def servers(self) -> list[ServerInfo]:
        with self._lock:
            return [s.info() for s in self._servers]

    # -- shutdown ------------------------------------------------------------------------
    def stop_all(self) -> tuple[list[Server], set[str]]:
        """Stop every live server (no new ones after this); return them and those still booting."""
        with self._lock:
            self._closing = True
            starts = list(self._starts)
        for thread in starts:  # a replacement being created now is stopped below with the rest
            thread.join(timeout=60)
        with self._lock:
            servers = [s for s in self._servers if not s.dead]
        # A server still booting reads its stop message only once up: cancel it right away.
        booting = {s.server_id for s in servers if not self._is_ready(s, force=True)}
        for server in servers:
            self._stop_server(server)
        return servers, booting

    def await_stopped(self, servers: list[Server], booting: set[str], timeout_s: float = 15.0,
                      why: str = "training run closed its actor backend") -> None:
        """Stopped servers exit within a poll; cancel any that do not (and those booting)."""
        deadline = time.monotonic() + timeout_s
        for server in servers:
            while (server.flow_run_id and server.server_id not in booting
                   and time.monotonic() < deadline):
                if self.launcher.read_state_is_final(server.flow_run_id):
                    break
                time.sleep(0.2)
            else:
                self.launcher.cancel(server.flow_run_id, why)

"""Every Prefect API call a process makes, timed on the client: issue 34's per-call profile of a round.

`record()` wraps httpx's send (sync and async, so every Prefect client in the process) and keeps
(method, path with ids as {id}, status, start, seconds). `per_round()` cuts the calls into rounds
at each round's first call (the tracking task run's POST /task_runs/, not counting its retries
after a busy 503: a round's task runs travel as events, not calls) and summarises the middle rounds (the first holds warm-up, the last the
run's end): calls a round, the median client-side time of each, and the busy 503s. On loopback
a call's client-side time is the server's time to answer it; through benchmarks/rtt_proxy.py it
is that plus the added round trip.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    status: int
    started: float
    seconds: float


ROUND_START = ("POST", "/api/task_runs/")


def _shape(path: str) -> str:
    def is_id(part: str) -> bool:
        try:
            uuid.UUID(part)
        except ValueError:
            return False
        return True

    return "/".join("{id}" if is_id(p) else p for p in path.split("/"))


def record() -> list[Call]:
    """Start recording this process's HTTP calls (logs and events left out); returns the list."""
    import httpx

    calls: list[Call] = []
    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

    def keep(request, response, started):
        path = request.url.path
        if "/logs" not in path and "/events" not in path:
            calls.append(Call(request.method, _shape(path), getattr(response, "status_code", 0), started,
                              time.perf_counter() - started))

    def send(client, request, *args, **kwargs):
        started = time.perf_counter()
        response = sync_send(client, request, *args, **kwargs)
        keep(request, response, started)
        return response

    async def asend(client, request, *args, **kwargs):
        started = time.perf_counter()
        response = await async_send(client, request, *args, **kwargs)
        keep(request, response, started)
        return response

    httpx.Client.send, httpx.AsyncClient.send = send, asend
    return calls


def per_round(calls: list[Call]) -> dict:
    """The middle rounds' calls: per call kind, how many a round and the median ms; busy 503s."""
    starts, last_start = [], None  # a POST again after its busy 503 is the same round's
    for i, c in enumerate(calls):
        if (c.method, c.path) == ROUND_START:
            if last_start is None or last_start.status != 503:
                starts.append(i)
            last_start = c
    rounds = [calls[a:b] for a, b in zip(starts, starts[1:], strict=False)][1:]  # drop round 0
    if not rounds:
        return {"rounds": 0, "calls": []}
    kinds: dict[str, list[float]] = {}
    for one in rounds:
        for c in one:
            kinds.setdefault(f"{c.method} {c.path}", []).append(c.seconds)
    busy = sum(1 for one in rounds for c in one if c.status == 503)
    table = [{"call": k, "per_round": len(v) / len(rounds), "median_ms": 1000 * statistics.median(v)}
             for k, v in kinds.items()]
    return {"rounds": len(rounds), "busy_503_per_round": busy / len(rounds),
            "api_s_per_round": sum(c.seconds for one in rounds for c in one) / len(rounds),
            "calls": sorted(table, key=lambda r: -r["per_round"] * r["median_ms"])}

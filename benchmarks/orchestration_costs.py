"""Issue 15: where orchestration time and CPU go, measured in one run (what each fix changed).

1. Actor processes: a 2-worker local pool until every worker is ready, and its close, started
   with `spawn` and with the preloaded fork server (tasks/worker_processes.py); this module
   imports flows.train as `python -m flows.train` does, so a spawned worker re-imports it.
2. The Prefect API on a quiet server: latency of create flow run, set Running, read, set
   Completed (60 of each).
3. A trivial subflow (no tasks) inside a flow: its wall time and its API calls' time (25, the
   first 5 left out).
4. CPU seconds per round of the temporary API's server process and of this process, at 8 and
   32 actors (CartPole-v1, 10 rounds of 512-step fragments), with the server's task-run
   recorder batched (deployments/local_api.py SERVER_DEFAULTS) and, given --unbatched, also
   with Prefect's default (a transaction per event) in a second server.
5. One round's timeline at 8 actors (round 3 of 5): when the subflow's body starts, when each
   rollout task's body starts and ends, the update, the subflow's return, the next schedule.

    .venv/bin/python -m benchmarks.orchestration_costs [--unbatched]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import flows.train  # noqa: F401  (what a spawned worker re-imports, as under `python -m flows.train`)
from flows import prefect_patches

prefect_patches.install()  # as the CLI's entry points do


def pool_boots(method: str | None, pools: int = 3) -> list[tuple[float, float]]:
    from tasks.local_pool import LocalActorPool

    out = []
    for _ in range(pools):
        started = time.perf_counter()
        pool = LocalActorPool(2, "CartPole-v1", start_method=method)
        pool.wait_ready()
        ready = time.perf_counter()
        pool.close()
        out.append((ready - started, time.perf_counter() - ready))
    return out


def api_latencies(n: int = 60) -> dict[str, float]:
    from prefect import flow, get_client
    from prefect.states import Completed, Pending, Running

    @flow
    def probe():
        pass

    times: dict[str, list[float]] = {"create flow run": [], "set Running": [], "read flow run": [],
                                     "set Completed": []}
    with get_client(sync_client=True) as client:
        for _ in range(n):
            t = time.perf_counter()
            run = client.create_flow_run(probe, state=Pending())
            times["create flow run"].append(time.perf_counter() - t)
            t = time.perf_counter()
            client.set_flow_run_state(run.id, Running())
            times["set Running"].append(time.perf_counter() - t)
            t = time.perf_counter()
            client.read_flow_run(run.id)
            times["read flow run"].append(time.perf_counter() - t)
            t = time.perf_counter()
            client.set_flow_run_state(run.id, Completed())
            times["set Completed"].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def trivial_subflows(n: int = 25) -> tuple[float, float, float]:
    """Median subflow wall s, median s inside its API calls, median number of calls."""
    import httpx
    from prefect import flow
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    calls: list[float] = []
    send = httpx.Client.send

    def timed_send(self, request, *args, **kwargs):
        started = time.perf_counter()
        try:
            return send(self, request, *args, **kwargs)
        finally:
            calls.append(time.perf_counter() - started)

    @flow(name="trivial-round", flow_run_name="trivial-{i}", persist_result=False, validate_parameters=False)
    def sub(i: int) -> int:
        return i

    @flow(persist_result=False)
    def parent() -> list[tuple[float, float, int]]:
        rows = []
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            for i in range(n):
                calls.clear()
                started = time.perf_counter()
                sub(i=i)
                rows.append((time.perf_counter() - started, sum(calls), len(calls)))
        return rows[5:]

    httpx.Client.send = timed_send
    try:
        rows = parent()
    finally:
        httpx.Client.send = send
    return tuple(statistics.median(r[k] for r in rows) for k in range(3))


def cpu_per_round(tracking_uri: str, actors: int, rounds: int = 10) -> dict[str, float]:
    import psutil

    from flows.train import train

    def cpu(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system

    me = psutil.Process()
    [server] = [c for c in me.children() if "deployments.local_api" in " ".join(c.cmdline())]
    s0, m0, t0 = cpu(server), cpu(me), time.perf_counter()
    train(env="CartPole-v1", scheduler=f"fixed:{actors}", max_rounds=rounds, fragment=512, target_return=1e9,
          budget_usd=100.0, seed=0, tracking_uri=tracking_uri, experiment="benchmark/orchestration-costs")
    wall = time.perf_counter() - t0
    time.sleep(3)  # the server records the last events
    return {"server_cpu_s": (cpu(server) - s0) / rounds, "main_cpu_s": (cpu(me) - m0) / rounds,
            "wall_s": wall / rounds}


def round_timeline(tracking_uri: str, actors: int = 8, rounds: int = 5, show: int = 3) -> list[tuple[float, str, str]]:
    """(ms from the call of round `show`, thread, event) up to the call of the next round."""
    import functools
    import threading

    from prefect.futures import PrefectFutureList
    from prefect.tasks import Task

    import flows.rounds as fr
    import flows.train as ft
    import tasks.rounds as tr

    events: list[tuple[float, str, str]] = []

    def mark(name: str) -> None:
        events.append((time.perf_counter(), threading.current_thread().name, name))

    def timed(fn, start: str, end: str):
        @functools.wraps(fn)  # keeps the signature: Prefect binds parameters by it
        def inner(*args, **kwargs):
            mark(start)
            try:
                return fn(*args, **kwargs)
            finally:
                mark(end)
        return inner

    saved = [(t, t.fn) for t in (tr.rollout, tr.update, tr.schedule)]
    saved_result, saved_round_flow = PrefectFutureList.result, fr.round_flow
    saved_call = Task.__call__
    for t, fn in saved:
        t.fn = timed(fn, f"{t.name} body start", f"{t.name} body end")
    PrefectFutureList.result = timed(saved_result, "rollout futures .result() start", "rollout futures .result() end")
    Task.__call__ = timed(saved_call, "task call", "task returned")

    def round_flow(*args, **kwargs):
        subflow = saved_round_flow(*args, **kwargs)
        subflow.fn = timed(subflow.fn, "subflow body start", "subflow body end")

        def call(**params):
            mark(f"ROUND {params['round_index']} call")
            try:
                return subflow(**params)
            finally:
                mark("round subflow returned")
        return call

    fr.round_flow = round_flow
    try:
        ft.train(env="CartPole-v1", scheduler=f"fixed:{actors}", max_rounds=rounds, fragment=512, target_return=1e9,
                 budget_usd=100.0, seed=0, tracking_uri=tracking_uri, experiment="benchmark/orchestration-costs")
    finally:
        for t, fn in saved:
            t.fn = fn
        PrefectFutureList.result, fr.round_flow, Task.__call__ = saved_result, saved_round_flow, saved_call
    names = [e[2] for e in events]
    first, last = names.index(f"ROUND {show} call"), names.index(f"ROUND {show + 1} call")
    t0 = events[first][0]
    return [(1000 * (t - t0), thread, name) for t, thread, name in events[first:last + 1]]


def server_part(tracking_uri: str, label: str) -> None:
    from deployments.local_api import prefect_api
    from flows.train import train

    with prefect_api():
        if label.startswith("batched"):
            lat = api_latencies()
            print("\nAPI latency, quiet server, median of 60 (ms): "
                  + ", ".join(f"{k} {1000 * v:.1f}" for k, v in lat.items()), flush=True)
            wall, api, n = trivial_subflows()
            print(f"trivial subflow: wall {1000 * wall:.1f} ms, of which {1000 * api:.1f} ms in its "
                  f"{n:.0f} API calls (median of 20)", flush=True)
        train(env="CartPole-v1", scheduler="fixed:8", max_rounds=2, fragment=512, target_return=1e9,
              budget_usd=100.0, seed=0, tracking_uri=tracking_uri, experiment="benchmark/orchestration-costs")
        if label.startswith("batched"):
            print("\none round's timeline, 8 actors (ms from the round's call):", flush=True)
            for ms, thread, name in round_timeline(tracking_uri):
                print(f"  {ms:7.1f}  {thread:22s} {name}", flush=True)
        for actors in (8, 32):
            r = cpu_per_round(tracking_uri, actors)
            print(f"{label}, {actors} actors: per round server CPU {r['server_cpu_s']:.3f} s, this process "
                  f"{r['main_cpu_s']:.3f} s, wall {r['wall_s']:.3f} s (the training's, start and end included)",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unbatched", action="store_true",
                        help="also measure the server with Prefect's default task-run recorder")
    args = parser.parse_args()
    from deployments.local_api import SERVER_DEFAULTS
    from flows.tracking import default_tracking_uri

    for method in ("spawn", None):
        boots = pool_boots(method)
        print(f"2-worker pool, {method or 'fork server'}: ready " + ", ".join(f"{r:.2f}" for r, _ in boots)
              + " s; close " + ", ".join(f"{c:.2f}" for _, c in boots) + " s", flush=True)
    uri = default_tracking_uri()
    server_part(uri, "batched task-run recorder")
    if args.unbatched:
        saved = {k: os.environ.get(k) for k in SERVER_DEFAULTS}
        os.environ.update({"PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "1",
                           "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "5"})  # Prefect's
        try:
            server_part(uri, "Prefect's default recorder")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


if __name__ == "__main__":
    main()

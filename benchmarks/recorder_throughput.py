"""Issue 34's server-side profile: how fast a Prefect server records task runs that arrive one
at a time. If its rate were the floor under a stock server's round, the round could not beat it;
measured on 2026-12-04 it was not (BENCHMARKS.md "Which Prefect server": the stock SQLite
recorder kept up), so a round's 2 s there is contention with the round's own calls.

In Prefect 3 a task run reaches the server only as events (its Pending, Running and Completed
states) that the server's task-run recorder writes to the database; a stock `prefect server
start` writes each event in its own transaction (batch size 1). A flow here runs --tasks trivial
tasks (so its events are sent within a fraction of a second); the figure is the time from the
flow's end until the server has recorded every one of them as Completed, per task run. A
`train` round at N actors has N + 1 task runs (its rollouts and the update), so on a server whose
recorder takes r s per task run a round cannot take less than about (N + 1) r of orchestration,
however the client sends them.

    .venv/bin/python -m benchmarks.recorder_throughput --kinds temporary stock-sqlite stock-postgres
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("temporary", "stock-sqlite", "stock-postgres")


def drive(api_url: str, tasks: int) -> tuple[float, float]:
    """In this process, against api_url: run the flow, then wait for the recorder.
    (seconds the flow took, seconds from its end until every task run was recorded Completed)."""
    from prefect import flow, get_client, task
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    os.environ["PREFECT_API_URL"] = api_url

    @task
    def tick(i: int) -> int:
        return i

    @flow(persist_result=False)
    def many_tasks(n: int) -> str:
        for i in range(n):
            tick(i)
        from prefect.runtime import flow_run

        return flow_run.id

    t0 = time.perf_counter()
    run_id = many_tasks(tasks)
    flow_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    done = TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.COMPLETED])))
    with get_client(sync_client=True) as client:
        while True:
            recorded = len(client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])),
                                                 task_run_filter=done, limit=tasks))
            if recorded >= tasks:
                return flow_s, time.perf_counter() - t1
            if time.perf_counter() - t1 > 600:
                raise RuntimeError(f"only {recorded} of {tasks} task runs recorded after 600 s")
            time.sleep(0.05)


def measure(kind: str, tasks: int, tmp: Path) -> dict:
    """A fresh server of this kind; the drive() in a child process (its own Prefect settings)."""
    from benchmarks.server_kinds import stock_server

    home = tmp / f"{kind}-home"
    code = (f"import json, sys; from benchmarks.recorder_throughput import drive; "
            f"print(json.dumps(drive(sys.argv[1], {tasks})))")
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    with contextlib.ExitStack() as stack:
        if kind == "temporary":
            from deployments.local_api import prefect_api

            os.environ["PREFECT_HOME"] = str(home)
            api = stack.enter_context(prefect_api())
        else:
            url = None
            if kind == "stock-postgres":
                from deployments.postgres import temporary_postgres

                url = stack.enter_context(temporary_postgres())
            api = stack.enter_context(stock_server(home, url))
        out = subprocess.run([sys.executable, "-c", code, api], env=env, cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    import json

    flow_s, record_s = json.loads(out.strip().splitlines()[-1])
    return {"kind": kind, "tasks": tasks, "flow_s": flow_s, "recorded_after_s": record_s,
            "per_task_run_s": (flow_s + record_s) / tasks}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--tasks", type=int, default=60)
    args = parser.parse_args(argv)
    saved_home = os.environ.get("PREFECT_HOME")
    rows = []
    with tempfile.TemporaryDirectory(prefix="minionsrl-recorder-") as tmp:
        for kind in args.kinds:
            rows.append(measure(kind, args.tasks, Path(tmp)))
            if saved_home is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = saved_home
            print(rows[-1], flush=True)
    print(f"\n{args.tasks} trivial task runs in one flow\n")
    print("| server | flow s | recorded after the flow's end, s | per task run, s | a round at 8 actors (9 task runs), s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['flow_s']:.2f} | {r['recorded_after_s']:.2f} | {r['per_task_run_s']:.3f} "
              f"| {9 * r['per_task_run_s']:.2f} |")


if __name__ == "__main__":
    main()

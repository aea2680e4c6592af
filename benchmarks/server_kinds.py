"""Issue 34: the round's orchestration on each kind of Prefect server a user runs, in one run.

Kinds (each from an empty database, its own PREFECT_HOME):

- `temporary`: the project's temporary API (deployments/local_api.py), the reference;
- `stock-sqlite`: `prefect server start` as a user starts it (SQLite in PREFECT_HOME, every
  service on, nothing patched);
- `stock-postgres`: the same on PostgreSQL (deployments/postgres.py's throwaway cluster);
- `stock-postgres-rtt`: the stock PostgreSQL server reached through a proxy that adds --rtt-ms of
  round trip (benchmarks/rtt_proxy.py): a remote server.

Each (repeat, kind) runs benchmarks/round_overhead.py --calls in a child process (CartPole-v1 Fixed(N),
the same definition of orchestration for every server: the round's wall less the union of the
actors' busy intervals and the learner's update; and the same for the whole loop's cycle, which
also holds what runs between round subflows), interleaved kind by kind so that a drift in
the machine's speed falls on all; the table gives medians over the repeats and the issue's goals:
PostgreSQL within 1.5x of the temporary API, SQLite under 0.4 s a round, the remote server under
4 round trips + 0.15 s; then, for each kind, the per-call profile of its median run
(benchmarks/api_calls.py: every API call of a round, timed on the client).

    .venv/bin/python -m benchmarks.server_kinds --actors 8 --rounds 10 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("temporary", "stock-sqlite", "stock-postgres", "stock-postgres-rtt")


@contextlib.contextmanager
def stock_server(home: Path, database_url: str | None, timeout_s: float = 180) -> Iterator[str]:
    """`prefect server start` on 127.0.0.1, as a user runs it; yields its API URL."""
    from deployments.local_api import _healthy
    from deployments.local_stack import free_port, kill_tree

    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    if database_url:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database_url
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "server.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host",
                               "127.0.0.1", "--port", str(port)], env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    api_url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(api_url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prefect server start did not come up: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield api_url
    finally:
        kill_tree(server)
        log.close()


def measure(kind: str, args: argparse.Namespace, tmp: Path, tag: str) -> dict:
    """One round_overhead child run on a fresh server of this kind."""
    out, home = tmp / f"{tag}.json", tmp / f"{tag}-home"
    command = [sys.executable, "-m", "benchmarks.round_overhead", "--actors", str(args.actors),
               "--rounds", str(args.rounds), "--json", str(out), "--calls"]
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    with contextlib.ExitStack() as stack:
        if kind != "temporary":
            url = None
            if "postgres" in kind:
                from deployments.postgres import temporary_postgres

                url = stack.enter_context(temporary_postgres())
            api = stack.enter_context(stock_server(home, url))
            command += ["--api-url", api] + (["--rtt-ms", str(args.rtt_ms)] if kind.endswith("rtt") else [])
        subprocess.run(command, check=True, env=env, cwd=ROOT)
    (row,) = json.loads(out.read_text())
    return row | {"kind": kind}


def goal(kind: str, overhead: float, reference: float, rtt_s: float) -> str:
    if kind == "stock-postgres":
        return f"within 1.5x of temporary: {overhead / reference:.2f}x {'met' if overhead <= 1.5 * reference else 'NOT met'}"
    if kind == "stock-sqlite":
        return f"under 0.4 s: {'met' if overhead < 0.4 else 'NOT met'}"
    if kind == "stock-postgres-rtt":
        bound = 4 * rtt_s + 0.15
        return f"under 4 RTT + 0.15 s = {bound:.2f} s: {'met' if overhead < bound else 'NOT met'}"
    return "reference"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="minionsrl-servers-") as tmp:
        for repeat in range(args.repeats):
            order = args.kinds if repeat % 2 == 0 else args.kinds[::-1]
            for kind in order:
                rows.append(measure(kind, args, Path(tmp), f"{repeat}-{kind}"))
                print(f"repeat {repeat} {kind}: orchestration {rows[-1]['overhead_s']:.3f} s a round", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    def median(key: str, kind: str) -> float:
        return statistics.median(r[key] for r in rows if r["kind"] == kind)

    med = {k: median("overhead_s", k) for k in args.kinds}
    cycle = {k: median("cycle_overhead_s", k) for k in args.kinds}
    reference, cycle_reference = med.get("temporary", float("nan")), cycle.get("temporary", float("nan"))
    rtt_s = args.rtt_ms / 1000
    print(f"\n{args.actors} actors, {args.rounds} rounds, median of {args.repeats} runs each\n")
    print("| server | orchestration per round (s): in the round subflow | in the whole loop | round wall (s) "
          "| goal (subflow; loop) |\n|---|---|---|---|---|")
    for k in args.kinds:
        print(f"| {k} | {med[k]:.3f} | {cycle[k]:.3f} | {median('round_wall_s', k):.3f} | "
              f"{goal(k, med[k], reference, rtt_s)}; {goal(k, cycle[k], cycle_reference, rtt_s)} |")
    from benchmarks.round_overhead import print_calls

    for k in args.kinds:  # where the time goes: the per-call profile of the median run of each kind
        runs = sorted((r for r in rows if r["kind"] == k), key=lambda r: r["overhead_s"])
        print(f"\n**{k}** (the median run)")
        print_calls(runs[len(runs) // 2]["calls"])


if __name__ == "__main__":
    main()

"""BENCHMARKS (b): orchestration overhead per round at 1, 8 and 32 actors (local backend).

Overhead = round wall time (measured around the `train-round` subflow call) minus the union
of the actors' busy intervals and the learner's update time inside it. Rounds 1.. are used
(round 0 includes first-call warm-up); median over rounds, one run per actor count.

    .venv/bin/python -m benchmarks.round_overhead --actors 1 8 32 --rounds 6

`--database postgres` runs the temporary API's server on a throwaway PostgreSQL cluster
(deployments/postgres.py) instead of SQLite. Given both (`--database sqlite postgres`) or
`--repeats R`, each (actor count, database) is its own child process with its own temporary
API, run interleaved (sqlite, postgres, then postgres, sqlite, ...) so a machine's load falls on
both alike, each from an empty database (its own PREFECT_HOME); the table gives medians over
the repeats.

    .venv/bin/python -m benchmarks.round_overhead --actors 8 32 --database sqlite postgres --repeats 3
    .venv/bin/python -m benchmarks.round_overhead --actors 8 --rounds 10 --api-url http://127.0.0.1:4200/api
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

from mlflow.tracking import MlflowClient


def measure(actors: int, rounds: int, fragment: int, tracking_uri: str) -> dict:
    from flows.train import train

    summary = train(env="CartPole-v1", scheduler=f"fixed:{actors}", max_rounds=rounds,
                    fragment=fragment, target_return=1e9, budget_usd=100.0, seed=0,
                    tracking_uri=tracking_uri, experiment="benchmark/round-overhead")
    return round_figures(tracking_uri, summary.run_id, actors)


def round_figures(tracking_uri: str, run_id: str, actors: int) -> dict:
    """A train run's per-round medians from MLflow, rounds 1.. (round 0 holds first-call warm-up)."""
    client = MlflowClient(tracking_uri)

    def series(key: str) -> list[float]:
        hist = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        return [m.value for m in hist][1:]

    wall, over = series("time/round_wall_s"), series("time/orchestration_s")
    learner, actor_max = series("time/learner_s"), series("time/actor_max_s")
    subflow, cycle = series("time/subflow_overhead_s"), series("time/round_cycle_wall_s")
    # the whole loop's orchestration: the subflow's plus what runs between subflows (schedule,
    # record, checkpoint, MLflow, and anything a round leaves to overlap with the next)
    cycle_over = [o + c - w for o, c, w in zip(over, cycle, wall, strict=True)]
    return {"subflow_s": statistics.median(subflow), "actors": actors, "round_wall_s": statistics.median(wall),
            "overhead_s": statistics.median(over), "cycle_overhead_s": statistics.median(cycle_over),
            "overhead_pct": 100 * statistics.median(o / w for o, w in zip(over, wall, strict=True)),
            "learner_s": statistics.median(learner), "actor_max_s": statistics.median(actor_max)}


def interleaved(args: argparse.Namespace) -> list[dict]:
    """Each (repeat, actor count, database) in a child process; medians over the repeats."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for n in args.actors:
                order = args.database if repeat % 2 == 0 else args.database[::-1]
                for db in order:
                    out = f"{tmp}/{repeat}-{n}-{db}.json"
                    home = f"{tmp}/{repeat}-{n}-{db}-home"  # both start from an empty database
                    subprocess.run([sys.executable, "-m", "benchmarks.round_overhead", "--actors", str(n),
                                    "--rounds", str(args.rounds), "--fragment", str(args.fragment),
                                    "--database", db, "--json", out], check=True,
                                   env={**os.environ, "PREFECT_HOME": home})
                    runs += json.loads(open(out).read())
    rows = []
    for n in args.actors:
        for db in args.database:
            mine = [r for r in runs if r["actors"] == n and r["database"] == db]
            rows.append({key: statistics.median(r[key] for r in mine) if isinstance(mine[0][key], float)
                         else mine[0][key] for key in mine[0]} | {"runs": len(mine)})
    return rows


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--fragment", type=int, default=512)
    parser.add_argument("--database", nargs="+", choices=["sqlite", "postgres"], default=["sqlite"],
                        help="the temporary API's database; two: interleaved child runs")
    parser.add_argument("--repeats", type=int, default=1, help="runs per (actors, database), interleaved")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--api-url", help="run against this Prefect API (a user's `prefect server start`, a "
                                          "PostgreSQL-backed or a remote one) instead of a temporary one")
    parser.add_argument("--calls", action="store_true",
                        help="also time every API call and give the per-call profile of a round (benchmarks/api_calls.py)")
    parser.add_argument("--rtt-ms", type=float, default=0.0,
                        help="with --api-url: reach it through a local proxy that adds this round-trip time "
                             "(benchmarks/rtt_proxy.py; a remote server, issue 34)")
    args = parser.parse_args()
    if args.rtt_ms and not args.api_url:
        parser.error("--rtt-ms delays the way to --api-url: give both")
    with contextlib.ExitStack() as stack:
        if args.rtt_ms:
            args.api_url = stack.enter_context(delayed_api(args.api_url, args.rtt_ms))
        run(args, parser)


def delayed_api(api_url: str, rtt_ms: float):
    """A context giving api_url's equivalent through an RttProxy that adds rtt_ms."""
    from urllib.parse import urlsplit, urlunsplit

    from benchmarks.rtt_proxy import RttProxy

    parts = urlsplit(api_url)
    if parts.scheme != "http" or parts.hostname is None:
        raise SystemExit(f"--rtt-ms needs a plain http:// API URL, got {api_url}")

    @contextlib.contextmanager
    def proxied():
        from deployments.local_api import drain_prefect_workers

        with RttProxy((parts.hostname, parts.port or 80), rtt_ms / 1000) as port:
            print(f"API through a +{rtt_ms:g} ms RTT proxy on 127.0.0.1:{port}", flush=True)
            yield urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
            drain_prefect_workers()  # the runs' queued logs and events, while the way is open

    return proxied()


def print_calls(profile: dict) -> None:
    print(f"\nAPI calls of {profile['rounds']} middle rounds (client side; busy 503s a round: "
          f"{profile.get('busy_503_per_round', 0):.1f}; API time a round {profile.get('api_s_per_round', 0):.3f} s)")
    print("| call | per round | median ms |\n|---|---|---|")
    for c in profile["calls"]:
        print(f"| {c['call']} | {c['per_round']:.1f} | {c['median_ms']:.1f} |")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    import json
    import os

    from benchmarks.api_calls import per_round, record

    if args.api_url:
        os.environ["PREFECT_API_URL"] = args.api_url
    if os.environ.get("PREFECT_API_URL") and args.database != ["sqlite"]:
        parser.error("--database picks the temporary API's database: unset PREFECT_API_URL")
    if len(args.database) > 1 or args.repeats > 1:
        rows = interleaved(args)
    else:
        from deployments.local_api import prefect_api
        from flows.cli import quiet_console
        from flows.tracking import default_tracking_uri

        quiet_console()  # the console as `python -m flows.train` has it (round chatter goes only to the API)
        uri = default_tracking_uri()
        calls = record() if args.calls else None
        with prefect_api(database=args.database[0]):
            served_by = args.api_url or os.environ.get("PREFECT_API_URL") or f"temporary ({args.database[0]})"
            served_by += f" +{args.rtt_ms:g} ms RTT" if args.rtt_ms else ""
            rows = []
            for n in args.actors:
                first = len(calls) if calls is not None else 0
                rows.append(measure(n, args.rounds, args.fragment, uri) | {"database": served_by})
                if calls is not None:
                    rows[-1]["calls"] = per_round(calls[first:])
                    print_calls(rows[-1]["calls"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| database | actors | round wall s | overhead s | of which subflow s | overhead % of wall "
          "| learner s | slowest actor s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        runs = r.get("runs", 1)
        print(f"| {r['database']}{f' (median of {runs})' if runs > 1 else ''} | {r['actors']} | {r['round_wall_s']:.3f} | {r['overhead_s']:.3f} | "
              f"{r['subflow_s']:.3f} | {r['overhead_pct']:.1f} | {r['learner_s']:.3f} | {r['actor_max_s']:.3f} |")


if __name__ == "__main__":
    main()

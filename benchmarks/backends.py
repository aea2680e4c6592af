"""Actor start-up (cold and warm) and orchestration overhead per round, per backend.

Start-up: `backend.run` directly, N actors at once (CartPole-v1, a short fragment), on a fresh
backend without pre-warming (cold), then again on the same backend (warm). An actor's
start-up is its `startup_s`: from the hand-off to the moment it is ready to load weights
(process/container boot, imports, env build; for warm work-pool servers: inbox poll + subflow).
Cold and warm figures are the means over the actors that really were cold / warm
(`cold_start` timing); with fewer workers than actors only the first ones boot.

Orchestration overhead per round: `train()` with Fixed(N) for --rounds rounds; overhead =
round wall time minus the union of actors' busy intervals minus the learner's update
(`time/orchestration_s`), median over rounds 1.. (round 0 includes first-call warm-up).

Work-pool runs start their own Prefect server, `minionsrl-process` pool, deployments and a
process worker (deployments/local_stack.py), limited to --pool-limit concurrent cold actor flow
runs plus --warm-actors warm servers (a warm server holds its slot while idle).

    .venv/bin/python -m benchmarks.backends --backends local dask work-pool --actors 1 8 32

`--database postgres` runs the Prefect server (the stack's, or the temporary API's) on a
throwaway PostgreSQL cluster (deployments/postgres.py); `--database sqlite postgres` runs the
whole set on each in turn, in this one process, each on a new server and an empty database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from models.envs.batch import env_spaces
from models.rl.policy import ActorCritic, weights_to_bytes
from models.rl.rollout import ActorJob

ROOT = Path(__file__).resolve().parents[1]


def jobs(n: int, round_index: int, steps: int) -> list[ActorJob]:
    weights = weights_to_bytes(ActorCritic(env_spaces("CartPole-v1"), (64, 64)))
    return [ActorJob(env_id="CartPole-v1", round_index=round_index, actor_index=i, seed=i,
                     steps_per_env=steps, envs_per_actor=1, hidden=(64, 64), weights=weights,
                     requested_at=time.time()) for i in range(n)]


def run_wave(backend, n: int, round_index: int, steps: int) -> list:
    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(lambda j: backend.run(j, timeout_s=900), jobs(n, round_index, steps)))


def split(batches: list) -> dict[str, float]:
    cold = [b.timings.startup_s for b in batches if b.timings.cold_start is True]
    warm = [b.timings.startup_s for b in batches if b.timings.cold_start is False]
    return {"cold_n": len(cold), "cold_s": statistics.mean(cold) if cold else float("nan"),
            "warm_n": len(warm), "warm_s": statistics.mean(warm) if warm else float("nan"),
            "warm_min_s": min(warm) if warm else float("nan")}


def startup(name: str, n: int, steps: int, workers: int, warm_actors: int,
            warm_modes: tuple[str, ...] = ("subflow", "inline")) -> dict[str, float]:
    """Cold: a fresh backend, nothing pre-warmed. Warm: the same pool again (local, Dask), or
    work-pool warm actor servers after each served one job (its first subflow's imports)."""
    from models.run.config import backend_spec
    from tasks.backends import make_backend

    def spec(**work_pool_options):  # make_backend takes a run's typed backend spec
        return backend_spec(name, work_pool_options if name == "work-pool" else {"workers": workers})

    out: dict[str, float] = {}
    cold_backend = make_backend(spec(), "CartPole-v1", prewarm=False)
    try:
        first = run_wave(cold_backend, n, 0, steps)
        if name != "work-pool":  # warm every worker (n may be fewer than workers), then measure
            run_wave(cold_backend, workers, 1, steps)
            second = run_wave(cold_backend, n, 2, steps)
    finally:
        cold_backend.close()
    a = split(first)
    out.update(cold_n=a["cold_n"], cold_s=a["cold_s"])
    variants = [(p, f) for p, f, m in (("", True, "subflow"), ("inline_", False, "inline"))
                if m in warm_modes] if name == "work-pool" else []
    for prefix, subflows in variants:
        servers = min(warm_actors, n)
        warm_backend = make_backend(spec(warm_actors=servers, warm_subflows=subflows), "CartPole-v1")
        try:
            warm_backend.wait_ready(servers, 600)
            run_wave(warm_backend, servers, 0, steps)
            second = run_wave(warm_backend, n, 1, steps)
        finally:
            warm_backend.close()
        b = split(second)
        out.update({f"{prefix}warm_n": b["warm_n"], f"{prefix}warm_s": b["warm_s"],
                    f"{prefix}warm_min_s": b["warm_min_s"]})
    if name != "work-pool":
        b = split(second)
        out.update(warm_n=b["warm_n"], warm_s=b["warm_s"], warm_min_s=b["warm_min_s"])
    return out


def rounds(name: str, n: int, rounds_: int, fragment: int, workers: int, warm_actors: int,
           tracking_uri: str, tmp: Path) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    from flows.train import train

    # work-pool: warm servers that run each actor inline (the actor is its `rollout` task run).
    warm = min(warm_actors, n) if name == "work-pool" else 0
    summary = train(
        env="CartPole-v1", scheduler=f"fixed:{n}", max_rounds=rounds_, fragment=fragment,
        target_return=1e9, budget_usd=100.0, seed=0, backend=name,
        local_workers=None if name == "work-pool" else workers,  # work-pool: not an option of it
        tracking_uri=tracking_uri, experiment=f"benchmark/backends/{name}",
        checkpoint_dir=str(tmp / "ckpt"), warm_actors=warm,
        backend_options={"warm_subflows": False} if warm else None)
    client = MlflowClient(tracking_uri)

    def series(key: str) -> list[float]:
        hist = sorted(client.get_metric_history(summary.run_id, key), key=lambda m: m.step)
        return [m.value for m in hist][1:]

    return {"round_wall_s": statistics.median(series("time/round_wall_s")),
            "overhead_s": statistics.median(series("time/orchestration_s")),
            "actor_startup_s": statistics.median(series("time/actor_startup_s"))}


def run_set(args: argparse.Namespace, database: str, tmp: Path, tracking_uri: str) -> list[dict]:
    """Every backend and actor count on one new Prefect server whose database is `database`."""
    from deployments.local_api import prefect_api
    from deployments.local_stack import prefect_stack

    rows = []
    with contextlib.ExitStack() as stack:
        if "work-pool" in args.backends:
            # Warm servers hold worker slots while idle: cold actors get --pool-limit besides.
            prefect = stack.enter_context(prefect_stack(
                tmp / "stack", tracking_uri, worker_limit=args.pool_limit + args.warm_actors,
                database=database))
            stack.enter_context(prefect.client_env())
        else:
            stack.enter_context(prefect_api(database=database))
        for name in args.backends:
            for n in args.actors:
                started = time.monotonic()
                row = {"database": database, "backend": name, "actors": n}
                row.update(startup(name, n, args.steps, args.workers, args.warm_actors,
                                   tuple(args.warm_modes)))
                if not args.skip_rounds:
                    row.update(rounds(name, n, args.rounds, args.fragment, args.workers,
                                      args.warm_actors, tracking_uri, tmp))
                row["bench_s"] = time.monotonic() - started
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        from deployments.local_api import drain_prefect_workers

        drain_prefect_workers()  # while this server is up: the next set has another
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["local", "dask", "work-pool"])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=64, help="env steps per actor (start-up runs)")
    parser.add_argument("--fragment", type=int, default=128, help="env steps per actor (rounds)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                        help="local / Dask worker processes")
    parser.add_argument("--warm-actors", type=int, default=8, help="most warm work-pool servers")
    parser.add_argument("--pool-limit", type=int, default=8,
                        help="cold actor flow runs the process worker runs at once, besides the "
                             "warm servers (memory: ~0.4 GB each)")
    parser.add_argument("--warm-modes", nargs="*", default=["subflow", "inline"],
                        help="work-pool warm servers to measure: subflow, inline (none: cold only)")
    parser.add_argument("--skip-rounds", action="store_true")
    parser.add_argument("--database", nargs="+", choices=["sqlite", "postgres"], default=["sqlite"],
                        help="the Prefect server's database; several: the whole set on each in turn")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    if os.environ.get("PREFECT_API_URL") and args.database != ["sqlite"] and "work-pool" not in args.backends:
        parser.error("--database picks the temporary API's database: unset PREFECT_API_URL")

    tmp = Path(tempfile.mkdtemp(prefix="minionsrl-bench-"))
    tracking_uri = f"sqlite:///{tmp / 'mlflow.db'}"
    rows = []
    for database in args.database:
        rows += run_set(args, database, tmp / database, tracking_uri)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\nCartPole-v1, {os.cpu_count()} cores, {args.workers} local/Dask workers, work-pool: "
          f"process worker limit {args.pool_limit} + {args.warm_actors}, at most {args.warm_actors} warm servers; "
          f"start-up fragment {args.steps} steps, rounds fragment {args.fragment} steps.\n")
    print("| database | backend | actors | cold start-up s (n) | warm start-up s (n) | warm min s "
          "| round wall s | orchestration overhead s / round | actor start-up in rounds s |")
    print("|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in rows:
        print(f"| {r['database']} "
              f"| {r['backend']}{' (warm: subflow per actor)' if r['backend'] == 'work-pool' and 'warm_s' in r else ''} "
              f"| {r['actors']} | {r['cold_s']:.2f} ({r['cold_n']}) | "
              f"{r.get('warm_s', nan):.3f} ({r.get('warm_n', 0)}) | {r.get('warm_min_s', nan):.3f} | "
              f"{r.get('round_wall_s', nan):.2f} | {r.get('overhead_s', nan):.3f} | "
              f"{r.get('actor_startup_s', nan):.3f} |")
        if "inline_warm_s" in r:
            print(f"| {r['database']} | {r['backend']} (warm: inline) | {r['actors']} | | "
                  f"{r['inline_warm_s']:.3f} ({r['inline_warm_n']}) | {r['inline_warm_min_s']:.3f} | | | |")


if __name__ == "__main__":
    main()

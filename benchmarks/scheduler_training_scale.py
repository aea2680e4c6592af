"""Scheduler training scaled out: wall time of N episodes with 1 and with more at once (issue 13).

Each configuration is one `train-scheduler` flow from scratch (same seed, same workload:
CartPole-v1 by default), in its own process with its own temporary Prefect API and MLflow store:

- `local-1`: one episode at a time, actors on the local backend (the default training);
- `local-2`: `--concurrency 2`, each episode with its own local worker processes;
- `dask-2`: `--concurrency 2`, every episode's actors on one running Dask cluster
  (a LocalCluster of `--dask-workers` single-threaded processes, started here and passed by
  address, as a user passes theirs).

The episode's reward is its measured round times (sum of P_k), so episodes that share cores
slow each other down and change what the scheduler learns from: the table gives the mean
episode time and the mean actors beside the wall time.

    .venv/bin/python -m benchmarks.scheduler_training_scale --episodes 20

Resumable: benchmarks/results/scheduler_training_scale_<env>.json is written after every
configuration, and a configuration already there is skipped (--fresh starts over).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = ("local-1", "local-2", "dask-2")


def one_config(config: str, env: str, episodes: int, batch: int, seed: int, dask_workers: int) -> dict:
    """One configuration's training, in this (new) process."""
    import contextlib

    from deployments.local_api import prefect_api
    from flows.cli import quiet_console
    from flows.scheduler_flows import train_scheduler
    from models.run.workload import Placement, Workload

    backend, concurrency = config.split("-")
    quiet_console(False)
    with tempfile.TemporaryDirectory() as tmp, prefect_api(), contextlib.ExitStack() as stack:
        placement = Placement()
        if backend == "dask":
            from distributed import LocalCluster

            cluster = stack.enter_context(LocalCluster(n_workers=dask_workers, threads_per_worker=1,
                                                       processes=True, dashboard_address=None))
            placement = Placement(backend="dask", backend_options={"dask_address": cluster.scheduler_address})
        started = time.perf_counter()
        result = train_scheduler(workload=Workload(env=env), placement=placement, episodes=episodes,
                                 batch_episodes=batch, concurrency=int(concurrency), seed=seed,
                                 tracking_uri=f"sqlite:///{tmp}/mlflow.db", checkpoint_dir=f"{tmp}/checkpoints")
        wall = time.perf_counter() - started
    eps = result.episodes
    return {"config": config, "episodes": len(eps), "wall_s": round(wall, 1),
            "wall_per_episode_s": round(wall / len(eps), 2),
            "episode_time_mean_s": round(statistics.mean(e.time_to_stop_s for e in eps), 3),
            "episode_wall_mean_s": round(statistics.mean(e.wall_time_s for e in eps), 2),
            "actors_mean": round(statistics.mean(e.actors_mean for e in eps), 2),
            "reached": sum(e.target_reached for e in eps),
            "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--batch-episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dask-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration here
    args = parser.parse_args()
    if args.one:
        row = one_config(args.one, args.env, args.episodes, args.batch_episodes, args.seed, args.dask_workers)
        print("ROW " + json.dumps(row), flush=True)
        return
    out = RESULTS / f"scheduler_training_scale_{args.env}.json"
    settings = {"env": args.env, "episodes": args.episodes, "batch_episodes": args.batch_episodes,
                "seed": args.seed, "dask_workers": args.dask_workers}
    saved = json.loads(out.read_text()) if out.exists() and not args.fresh else {}
    rows = saved.get("rows", []) if saved.get("settings") == settings else []
    for config in args.configs:
        if any(r["config"] == config for r in rows):
            print(f"{config}: done, skipped")
            continue
        cmd = [sys.executable, "-m", "benchmarks.scheduler_training_scale", "--one", config,
               *[f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = [line[4:] for line in proc.stdout.splitlines() if line.startswith("ROW ")]
        if proc.returncode != 0 or not found:
            sys.exit(f"{config} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        rows.append(json.loads(found[0]))
        print(rows[-1], flush=True)
        out.write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))
    print(f"\n{args.env}, {args.episodes} episodes from scratch, batches of {args.batch_episodes}, seed {args.seed}\n")
    print("| configuration | wall s | wall s per episode | episode time to stop, mean s (sum of P_k) "
          "| episode wall, mean s | actors, mean | reached J |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['wall_s']} | {r['wall_per_episode_s']} | {r['episode_time_mean_s']} | "
              f"{r['episode_wall_mean_s']} | {r['actors_mean']} | {r['reached']}/{r['episodes']} |")
    base = next((r for r in rows if r["config"] == "local-1"), None)
    for r in rows:
        if base and r is not base:
            print(f"{r['config']}: {r['wall_s'] / base['wall_s']:.2f}x local-1's wall time")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()

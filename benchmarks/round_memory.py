"""BENCHMARKS: does a long run's memory stay flat? The `train` process's resident memory per round,
before and after a change, in one run.

Each side is a `train` run in its own fresh process started in that commit's checkout
(benchmarks/before_after.py); this process samples the child's resident memory (VmRSS) every
0.2 s, and MLflow's per-round records place each round on that timeline. The figure is the slope
of memory against rounds over the run's last three quarters (the first quarter holds imports,
the actor pool and allocator warm-up), beside what one round's observations take.

    .venv/bin/python -m benchmarks.round_memory --before b2edac6 --env Humanoid-v5 --preset locomotion \
        --scheduler fixed:8 --rounds 60
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.before_after import ROOT, checkout, head_commit

RUN_CODE = ("import json, sys, pathlib; from flows.train import train; "
            "pathlib.Path(sys.argv[2]).write_text(train(**json.loads(sys.argv[1])).run_id)")


def rss_mb(pid: int) -> float | None:
    """A process's resident memory in MB (None once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_side(checkout_dir: Path, train_kwargs: dict, tracking_uri: str, run_id_file: Path
             ) -> tuple[list[tuple[float, float]], str]:
    """A train run in checkout_dir: its memory samples (unix time, MB) and its MLflow run id (written
    to run_id_file, not a pipe: the run's own output could fill it)."""
    child = subprocess.Popen([sys.executable, "-c", RUN_CODE, json.dumps({**train_kwargs, "tracking_uri": tracking_uri}),
                              str(run_id_file)], cwd=checkout_dir, env={**os.environ, "PYTHONPATH": str(checkout_dir)})
    samples = []
    while child.poll() is None:
        if (mb := rss_mb(child.pid)) is not None:
            samples.append((time.time(), mb))
        time.sleep(0.2)
    if child.returncode != 0:
        raise SystemExit(f"the train run in {checkout_dir} failed (exit {child.returncode})")
    return samples, run_id_file.read_text()


def per_round(samples: list[tuple[float, float]], tracking_uri: str, run_id: str) -> list[float]:
    """Memory (MB) when each round's record reached MLflow: the first sample at or after it."""
    from mlflow.tracking import MlflowClient

    history = sorted(MlflowClient(tracking_uri).get_metric_history(run_id, "time/round_wall_s"), key=lambda m: m.step)
    marks = []
    for metric in history:
        at = metric.timestamp / 1000
        marks.append(next((mb for t, mb in samples if t >= at), samples[-1][1]))
    return marks


def slope(values: list[float]) -> float:
    """Least-squares growth per step."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


def observation_mb(env_id: str, actors: int, fragment: int) -> float:
    """One round's observations alone (float32), the bulk of its batches."""
    import gymnasium as gym

    env = gym.make(env_id)
    size = math.prod(env.observation_space.shape)
    env.close()
    return actors * fragment * size * 4 / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a commit to measure beside the working tree")
    parser.add_argument("--env", default="Humanoid-v5")
    parser.add_argument("--preset", default="locomotion", help="'' for the env's own preset")
    parser.add_argument("--scheduler", default="fixed:8")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    if not args.scheduler.startswith("fixed:"):
        raise SystemExit("--scheduler: a fixed:N count, so every round has the same batch")
    actors = int(args.scheduler.split(":")[1])
    kwargs = {"env": args.env, "preset": args.preset or None, "scheduler": args.scheduler, "max_rounds": args.rounds,
              "target_return": 1e9, "eval_every": 0, "stop_at_eval": False, "budget_usd": 100.0, "seed": 0,
              "experiment": "benchmark/round-memory"}
    sides = ([("before", *checkout(args.before))] if args.before else []) + [("after", ROOT, head_commit())]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, where, commit in sides:
            uri = f"sqlite:///{tmp}/{name}.db"
            samples, run_id = run_side(where, {**kwargs, "checkpoint_dir": f"{tmp}/{name}-ckpt"}, uri,
                                       Path(tmp) / f"{name}-run-id")
            marks = per_round(samples, uri, run_id)
            tail = marks[len(marks) // 4:]
            rows.append({"side": name, "commit": commit, "rounds": len(marks), "rss_mb_round_1": marks[1],
                         "rss_mb_last": marks[-1], "peak_mb": max(mb for _, mb in samples),
                         "growth_mb_per_round": slope(tail)})
    fragment = _fragment(args.env, args.preset or None)
    batch = observation_mb(args.env, actors, fragment)
    print(f"{args.env} ({args.preset or 'its preset'}), {args.scheduler}, fragment {fragment}: one round's observations "
          f"{batch:.1f} MB")
    print("| side | commit | rounds | RSS at round 1 (MB) | RSS at the last (MB) | peak (MB) | growth (MB/round) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        commit = r["commit"][:12] + ("+changes" if r["commit"].endswith("+changes") else "")  # a dirty tree says so
        print(f"| {r['side']} | {commit} | {r['rounds']} | {r['rss_mb_round_1']:.0f} | "
              f"{r['rss_mb_last']:.0f} | {r['peak_mb']:.0f} | {r['growth_mb_per_round']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"observations_mb_per_round": batch, "settings": kwargs,
                                               "sides": rows}, indent=1))


def _fragment(env_id: str, preset: str | None) -> int:
    from models.run.presets import resolve_parameters

    return resolve_parameters({"env": env_id, "preset": preset}).fragment


if __name__ == "__main__":
    main()

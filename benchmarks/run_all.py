"""`make bench`: run the quick benchmarks one after another, each in its own process.

Quick ones, run in this order (each expected to take a few minutes at most on the 2-core
machine of BENCHMARKS.md; seen there at load average 3-5 from other jobs, 2026-11-30: the
CartPole actor rate 27 s, the three Atari games 51 + 70 + 73 s, round_overhead with just
`--actors 1 --rounds 2` 70 s, gpu_learner_step on the CPU at `--steps 3` 17 s):

    actor-rate-cartpole   python -m benchmarks.actor_rate --env CartPole-v1 --envs 1 8 --steps 8192
    actor-rate-atari      python -m benchmarks.actor_rate --env GravitarNoFrameskip-v4 SpaceInvadersNoFrameskip-v4 QbertNoFrameskip-v4
    round-overhead        python -m benchmarks.round_overhead --actors 1 8 32 --rounds 6
    cartpole-vs-sb3       python -m benchmarks.cartpole_vs_sb3 --seeds 0 1 2
    gpu-learner-step      python -m benchmarks.gpu_learner_step --batch 256 --steps 50
    scheduler-surrogate   python -m benchmarks.scheduler_surrogate --workload hopper --episodes 100 --seeds 0 1 2

Not run here, because each is expected to take well over 10 minutes (not timed as a whole;
run them by hand):

    python -m benchmarks.backends --backends local dask work-pool --actors 1 8 32
        starts a Prefect server, work pool and process worker; in BENCHMARKS.md the cold
        work-pool start-ups alone took 152 s (32 actors) and 51-57 s (8 actors)
    python -m benchmarks.mujoco_curves --envs HalfCheetah-v5 Humanoid-v5 --seed 0
        two 200k-step trainings through the `train` flow plus evaluation
    python -m benchmarks.mujoco_vs_sb3 --seeds 0 1 2
        Hopper-v5, ours and SB3 for 150k env steps each, three seeds

Each benchmark prints its own table (and the actor-rate one writes benchmarks/results/
actor_rate_<env>.json). At the end this prints each one's exit status and duration and writes
them to benchmarks/results/run_all.json; the exit status is non-zero if any failed.

    .venv/bin/python -m benchmarks.run_all                        # all quick ones
    .venv/bin/python -m benchmarks.run_all --only actor-rate-atari
    .venv/bin/python -m benchmarks.run_all --list
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
ATARI = ["GravitarNoFrameskip-v4", "SpaceInvadersNoFrameskip-v4", "QbertNoFrameskip-v4"]

QUICK: dict[str, list[str]] = {
    "actor-rate-cartpole": ["benchmarks.actor_rate", "--env", "CartPole-v1", "--envs", "1", "8",
                            "--steps", "8192"],
    "actor-rate-atari": ["benchmarks.actor_rate", "--env", *ATARI],
    "round-overhead": ["benchmarks.round_overhead", "--actors", "1", "8", "32", "--rounds", "6"],
    "cartpole-vs-sb3": ["benchmarks.cartpole_vs_sb3", "--seeds", "0", "1", "2"],
    "gpu-learner-step": ["benchmarks.gpu_learner_step", "--batch", "256", "--steps", "50"],
    "scheduler-surrogate": ["benchmarks.scheduler_surrogate", "--workload", "hopper", "--episodes", "100",
                            "--seeds", "0", "1", "2"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(QUICK), help="run just these")
    parser.add_argument("--skip", nargs="+", choices=list(QUICK), default=[], help="leave these out")
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    args = parser.parse_args()
    names = [n for n in (args.only or QUICK) if n not in args.skip]
    if args.list:
        for name in names:
            print(f"{name:22} python -m {' '.join(QUICK[name])}")
        return

    summary = []
    for name in names:
        cmd = [sys.executable, "-m", *QUICK[name]]
        print(f"\n===== {name}: python {' '.join(cmd[1:])}", flush=True)
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=ROOT)
        summary.append({"name": name, "command": cmd, "rc": rc,
                        "started_utc": started.isoformat(timespec="seconds"),
                        "wall_s": round(time.perf_counter() - t0, 1)})

    print("\n| benchmark | exit status | wall s |\n|---|---|---|")
    for row in summary:
        print(f"| {row['name']} | {row['rc']} | {row['wall_s']:.1f} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "run_all.json").write_text(json.dumps(summary, indent=1))
    sys.exit(1 if any(row["rc"] for row in summary) else 0)


if __name__ == "__main__":
    main()

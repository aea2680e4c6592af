"""Seconds per env step, ours (the `train` flow) against SB3's PPO, in alternating fresh processes.

The MuJoCo comparison (benchmarks/mujoco_vs_sb3.py) runs each side for 1M steps, 10-45 minutes
each, and this machine's speed drifts by up to 1.7x within an hour (BENCHMARKS.md, "A faster
round"): a ratio of two runs half an hour apart measures the drift as much as the code. Both
sides learn deterministically from their seed (env steps to J are the same on every run), so
wall time to J = env steps to J x seconds per env step, and the second factor is what this
measures, robustly: the first `--rounds` rounds of each side (ours: `train` with the preset;
SB3: `learn` for as many env steps), end to end (start-up, every round, shut-down; no
evaluations), each in a new process, alternating the order, `--repeats` times.

    .venv/bin/python -m benchmarks.speed_vs_sb3 --env Hopper-v5 --variant locomotion --rounds 40 --repeats 3

Prints every segment, the median seconds per 1,000 env steps of each side and the ratio of the
medians, and the ratio within each adjacent pair; writes benchmarks/results/<env>[-variant]_speed_vs_sb3.json.
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


def one_segment(who: str, env_id: str, variant: str | None, rounds: int, seed: int) -> dict:
    """One side's first `rounds` rounds, timed end to end in this (new) process."""
    import torch

    from models.run.presets import preset_for

    torch.set_num_threads(1)
    preset = preset_for(env_id, variant)
    window = int(str(preset["scheduler"]).partition(":")[2]) * int(preset["fragment"])
    if who == "ours":
        from flows.train import train

        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            summary = train(env=env_id, preset=variant, seed=seed, max_rounds=rounds,
                            tracking_uri=f"sqlite:///{tmp}/mlflow.db", checkpoint_dir=f"{tmp}/checkpoints",
                            log_model=False)
            wall = time.perf_counter() - started
        rounds_wall = [h.wall_s for h in summary.history[1:]]
        return {"who": who, "wall_s": wall, "env_steps": summary.env_steps,
                "round_wall_median_s": statistics.median(rounds_wall),
                "learner_median_s": statistics.median(h.learner_s for h in summary.history[1:])}
    from benchmarks.mujoco_vs_sb3 import sb3_model

    started = time.perf_counter()
    model, _ = sb3_model(who, env_id, seed, 1_000_000)
    model.learn(total_timesteps=rounds * window)
    wall = time.perf_counter() - started
    return {"who": who, "wall_s": wall, "env_steps": int(model.num_timesteps)}


def run_segment(who: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.speed_vs_sb3", "--one", who, "--env", args.env,
           "--rounds", str(args.rounds), "--seed", str(args.seed)]
    if args.variant:
        cmd += ["--variant", args.variant]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(),
                          cwd=Path(__file__).resolve().parents[1])
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{who} segment failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    row = json.loads(lines[-1])
    row["per_1k_steps_s"] = 1000 * row["wall_s"] / row["env_steps"]
    row["finished_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--variant", default="locomotion")
    parser.add_argument("--peer", default="cleanrl", choices=["cleanrl", "rlzoo"])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a segment, in its own process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_segment(args.one, args.env, args.variant, args.rounds, args.seed)), flush=True)
        return

    from deployments.local_api import prefect_api

    rows: list[dict] = []
    with prefect_api():  # shared by ours' segments through PREFECT_API_URL, started before any clock
        for repeat in range(args.repeats):
            order = ["ours", args.peer] if repeat % 2 == 0 else [args.peer, "ours"]
            for who in order:
                row = run_segment(who, args) | {"repeat": repeat}
                rows.append(row)
                print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)

    def per_step(who: str) -> list[float]:
        return [r["per_1k_steps_s"] for r in rows if r["who"] == who]

    ours, peer = per_step("ours"), per_step(args.peer)
    ratio = statistics.median(ours) / statistics.median(peer)
    pairs = [o / p for o, p in zip(ours, peer, strict=True)]
    label = f"{args.env}-{args.variant}" if args.variant else args.env
    print(f"\n{label}, first {args.rounds} rounds ({rows[0]['env_steps']} env steps), seed {args.seed}, "
          f"{args.repeats} alternating pairs, each segment a new process:")
    print(f"  ours: {', '.join(f'{v:.2f}' for v in ours)} s per 1k steps (median {statistics.median(ours):.2f})")
    print(f"  {args.peer}: {', '.join(f'{v:.2f}' for v in peer)} s per 1k steps (median {statistics.median(peer):.2f})")
    print(f"  ratio ours/{args.peer}: {ratio:.2f} (medians); per pair {', '.join(f'{r:.2f}' for r in pairs)}")
    out = RESULTS / f"{label}_speed_vs_sb3.json"
    out.write_text(json.dumps({"env": args.env, "variant": args.variant, "peer": args.peer,
                               "rounds": args.rounds, "seed": args.seed, "rows": rows,
                               "ratio_of_medians": ratio, "pair_ratios": pairs}, indent=1))
    print(f"written: {out}")


if __name__ == "__main__":
    main()

"""IMPACT's virtual-time executor against real actors, where this machine can run both.

With 1 actor, actor and learner each have a core here (2 cores), so a real run's wall is what a
cluster would see: the executor's cloud time and policy lags should match it. The same learner
loop (tasks/impact/learn_chunk.py) runs `--steps` learner steps with real actors (local
processes) and with the executor, alternated `--repeats` times; then, for scale, the executor
with `--many` actors (the paper's 32), whose cloud time a 2-core machine cannot show for real.

    .venv/bin/python -m benchmarks.impact_cloud_clock --steps 200 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import time

import numpy as np

from models.envs.batch import env_spaces
from models.impact.config import ImpactConfig
from models.impact.learner import ImpactLearner
from models.impact.progress import ImpactProgress
from tasks.impact.learn_chunk import ChunkClock, learn_chunk
from tasks.impact.local_pool import ImpactActorPool
from tasks.impact.virtual_pool import VirtualImpactActorPool


def run(env_id: str, cfg: ImpactConfig, steps: int, virtual: bool) -> dict[str, float | str]:
    learner = ImpactLearner(env_spaces(env_id), cfg, seed=0, device="cpu")
    clock = ChunkClock(started_at=time.time())
    pool_class = VirtualImpactActorPool if virtual else ImpactActorPool
    with pool_class(env_id, cfg, len(learner.weights_vector()), 0) as pool:
        if isinstance(pool, VirtualImpactActorPool):
            clock.cloud = pool.cloud_s
        pool.publish(learner.weights_vector(), learner.version, learner.norm_state())
        progress = ImpactProgress(1e9, 10**9, 1e9, 10)
        lags = [learn_chunk(learner, pool, progress, clock, 1)["impact/policy_lag_mean"] for _ in range(steps)]
        cloud_s, wall_s = clock.cloud_s(), clock.wall_s()
    hist = np.bincount(np.round(lags).astype(int)) / len(lags)
    return {"mode": "virtual" if virtual else "real", "actors": cfg.actors, "cloud_s": cloud_s, "wall_s": wall_s,
            "first_fragment_s": clock.first_fragment_s or float("nan"), "env_steps": progress.env_steps,
            "lag_mean": float(np.mean(lags)), "lag_share": " ".join(f"{h:.2f}" for h in hist)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=200, help="learner steps per run")
    parser.add_argument("--fragment", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="real/virtual pairs, alternated")
    parser.add_argument("--many", type=int, default=32, help="actors of the executor-only run (0: none)")
    args = parser.parse_args()
    cfg = ImpactConfig(actors=1, fragment=args.fragment, envs_per_actor=1, batch_fragments=4,
                       buffer_fragments=16, max_reuse=2)
    rows = []
    for _ in range(args.repeats):
        rows += [run(args.env, cfg, args.steps, virtual=False), run(args.env, cfg, args.steps, virtual=True)]
    if args.many:
        many = ImpactConfig(**{**cfg.__dict__, "actors": args.many})  # the same learner, more actors
        rows.append(run(args.env, many, args.steps, virtual=True))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{args.env}, fragment {args.fragment}, {args.steps} learner steps per run; commit {commit}, "
          f"{platform.processor() or platform.machine()}")
    print("| mode | actors | cloud (s) | wall (s) | first fragment (s) | env steps | lag mean | lag 0/1/2/... share |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['actors']} | {r['cloud_s']:.2f} | {r['wall_s']:.2f} | {r['first_fragment_s']:.2f} "
              f"| {r['env_steps']} | {r['lag_mean']:.2f} | {r['lag_share']} |")
    for mode in ("real", "virtual"):
        times = [r["cloud_s"] for r in rows if r["mode"] == mode and r["actors"] == 1]
        print(f"{mode}, 1 actor: median time {np.median(times):.2f} s over {len(times)} runs")


if __name__ == "__main__":
    main()

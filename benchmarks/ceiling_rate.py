"""Issue 37, point 2: one actor with its policy against the environment's ceiling, on one core.

    .venv/bin/python -m benchmarks.ceiling_rate            # CartPole, Hopper, HalfCheetah, Humanoid, Qbert

The ceiling: EnvPool's bare rate (C++ pool, one thread, random actions drawn before the clock
starts) with the workload's envs per actor. Ours: `run_actor` on the job a training's round would
send (the workload's preset: envs per actor, fragment, observation normalisation; a fresh
policy's weights), its sampling rate, with env_backend gymnasium and, where EnvPool has the env
with gymnasium's dynamics, env_backend envpool. Interleaved, median of --repeats, pinned to one
core with one torch thread, in one run. Writes benchmarks/results/ceiling_rate.json.

    .venv/bin/python -m benchmarks.ceiling_rate --env Hopper-v5 HalfCheetah-v5 --envs 1 2 4 8 \
        --out benchmarks/results/ceiling_rate_envs.json

--envs: the same with N envs per actor instead of the preset's (its fragment divided by N, so an
actor samples as many steps): does batching more envs in one actor close the gap?
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.actor_rate import load_average, machine
from models.envs.batch import close_idle_envs, env_spaces
from models.envs.envpool_batch import ENVPOOL, GYMNASIUM, envpool_task
from models.rl.ppo import Learner
from models.rl.rollout import ActorJob, run_actor
from models.run.presets import resolve_parameters

WORKLOADS = (("CartPole-v1", None, "CartPole-v1"), ("Hopper-v5", "locomotion", "Hopper-v5"),
             ("HalfCheetah-v5", "locomotion", "HalfCheetah-v5"), ("Humanoid-v5", None, "Humanoid-v5"),
             ("QbertNoFrameskip-v4", None, "Qbert-v5"))
"""(gymnasium id, preset variant, EnvPool id of the ceiling)."""
RESULTS = Path(__file__).resolve().parent / "results"


def ceiling(envpool_id: str, n: int, steps: int, seed: int) -> float:
    import envpool

    pool = envpool.make(envpool_id, env_type="gymnasium", num_envs=n, seed=seed, num_threads=1)
    pool.reset()
    space = pool.action_space
    rng = np.random.default_rng(seed)
    actions = (rng.integers(0, space.n, (steps // n, n)) if hasattr(space, "n")
               else rng.uniform(space.low, space.high, (steps // n, n, *space.shape)).astype(np.float32))
    started = time.perf_counter()
    for a in actions:
        pool.step(a)  # EnvPool resets an ended env on its next step by itself
    elapsed = time.perf_counter() - started
    pool.close()
    return n * (steps // n) / elapsed


def ours(cfg, backend: str, seed: int) -> float:
    learner = Learner(env_spaces(cfg.env_id), cfg.ppo, seed=0, device="cpu")
    job = ActorJob(env_id=cfg.env_id, round_index=0, actor_index=0, seed=seed, steps_per_env=cfg.steps_per_env,
                   envs_per_actor=cfg.envs_per_actor, hidden=cfg.ppo.hidden, weights=learner.weights(),
                   norm=learner.norm_state(), env_backend=backend)
    close_idle_envs()
    run_actor(job)  # the envs built and kept, as in a warm worker
    batch = run_actor(job)
    return batch.steps / batch.timings.sampling_s


def measure(env_id: str, variant: str | None, pool_id: str, repeats: int, envs: int | None = None) -> dict:
    """One workload's three sides, interleaved, `repeats` times; medians and ratios to the ceiling.
    envs: that many envs per actor (the preset's fragment / envs steps each) instead of the preset's."""
    given = {"env": env_id, **({"preset": variant} if variant else {})}
    if envs is not None:
        given.update(envs_per_actor=envs, fragment=resolve_parameters(given).fragment // envs)
    cfg = resolve_parameters(given)
    sides = {"ceiling": lambda r: ceiling(pool_id, cfg.envs_per_actor, cfg.fragment, r),
             GYMNASIUM: lambda r: ours(cfg, GYMNASIUM, r)}
    if envpool_task(env_id) is not None:
        cfg_pool = resolve_parameters({**given, "env_backend": ENVPOOL, "carry_episodes": False})
        sides[ENVPOOL] = lambda r: ours(cfg_pool, ENVPOOL, r)
    runs: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(repeats):
        for name, side in sides.items():
            runs[name].append(side(r))
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"env": env_id, "preset": variant, "ceiling_env": pool_id, "envs_per_actor": cfg.envs_per_actor,
            "fragment": cfg.fragment, "runs_steps_per_s": runs, "median_steps_per_s": med,
            **{f"{k}_over_ceiling": med[k] / med["ceiling"] for k in med if k != "ceiling"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", nargs="*", help="gymnasium ids among the default workloads (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--envs", type=int, nargs="*", help="envs per actor to measure instead of the preset's")
    parser.add_argument("--out", default=str(RESULTS / "ceiling_rate.json"))
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    started, load_before, rows = dt.datetime.now(dt.UTC), load_average(), []
    for env_id, variant, pool_id in WORKLOADS:
        if args.env and env_id not in args.env:
            continue
        for envs in args.envs or [None]:
            row = measure(env_id, variant, pool_id, args.repeats, envs)
            rows.append(row)
            med = row["median_steps_per_s"]
            print(f"{env_id}{'-' + variant if variant else ''} ({row['envs_per_actor']} envs, {row['fragment']} steps): "
                  f"ceiling {med['ceiling']:,.0f} steps/s; ours, gymnasium {med[GYMNASIUM]:,.0f} "
                  f"({row['gymnasium_over_ceiling']:.2f})"
                  + (f"; ours, envpool {med[ENVPOOL]:,.0f} ({row['envpool_over_ceiling']:.2f})" if ENVPOOL in med
                     else ""), flush=True)
    result = {"started_utc": started.isoformat(timespec="seconds"), "core": args.core, "repeats": args.repeats,
              "load_average_before": load_before, "load_average_after": load_average(), "machine": machine(),
              "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()

"""BENCHMARKS (c): an actor's sampling rate against a bare env + policy loop on one core.

Same env, same batch of envs, same network weights, one process pinned to one core with one
torch thread. Peers measured in the same run:
- bare loop, torch policy: env.step per env + a torch forward and torch.multinomial per step;
- bare loop, numpy policy: the same loop calling the same numpy sampler our actors use.
Ours: `run_actor` (fresh envs, weight load, buffers, episode bookkeeping), rate over its
sampling phase and over its whole duration. Median of `--repeats`.

    .venv/bin/python -m benchmarks.actor_rate --env CartPole-v1 --envs 1 8 --steps 8192
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from models.envs import env_spaces
from models.policy import ActorCritic, weights_to_bytes
from models.rollout import ActorJob, run_actor


def bare_loop(env_id: str, n_envs: int, steps_per_env: int, act) -> float:
    envs = [gym.make(env_id) for _ in range(n_envs)]
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    started = time.perf_counter()
    for _ in range(steps_per_env):
        actions, _ = act(obs)
        for i, env in enumerate(envs):
            o, _, term, trunc, _ = env.step(actions[i])
            if term or trunc:
                o, _ = env.reset()
            obs[i] = o
    elapsed = time.perf_counter() - started
    return n_envs * steps_per_env / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=8192, help="env steps per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    policy = ActorCritic(env_spaces(args.env))
    weights = weights_to_bytes(policy)
    torch_act = policy.act
    numpy_act = policy.sampler(seed=0)

    print(f"{args.env}, {args.steps} env steps per measurement, median of {args.repeats}, "
          f"pinned to core {args.core}\n")
    print("| envs per actor | bare loop + torch policy | bare loop + numpy policy | our actor, sampling | our actor, whole job | ours / bare torch | ours / bare numpy |")
    print("|---|---|---|---|---|---|---|")
    for n in args.envs:
        steps_per_env = args.steps // n
        torch_rates, numpy_rates, ours_sampling, ours_total = [], [], [], []
        for r in range(args.repeats):
            torch_rates.append(bare_loop(args.env, n, steps_per_env, torch_act))
            numpy_rates.append(bare_loop(args.env, n, steps_per_env, numpy_act))
            job = ActorJob(args.env, 0, 0, r, steps_per_env, n, policy.hidden, weights)
            t0 = time.perf_counter()
            batch = run_actor(job)
            total = time.perf_counter() - t0
            ours_sampling.append(batch.steps / batch.timings["sampling_s"])
            ours_total.append(batch.steps / total)
        t, npy = statistics.median(torch_rates), statistics.median(numpy_rates)
        s, w = statistics.median(ours_sampling), statistics.median(ours_total)
        print(f"| {n} | {t:,.0f} | {npy:,.0f} | {s:,.0f} | {w:,.0f} | {s / t:.2f} | {s / npy:.2f} |")


if __name__ == "__main__":
    main()

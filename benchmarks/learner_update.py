"""Seconds per PPO update of the learner (models/rl/ppo.py `Learner.update`) on one CPU thread, for
an MLP workload's round: real fragments sampled once from the env, then the same update timed
again and again from the same starting state.

    .venv/bin/python -m benchmarks.learner_update --env Hopper-v5 --preset locomotion --repeats 5

Prints the median update time, the gradient steps per update and the milliseconds per gradient
step, and with --profile the torch operators that take the most time.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from models.envs.batch import EnvBatch, env_spaces
from models.rl.ppo import Learner
from models.rl.rollout import sample_fragment
from models.run.config import PPOConfig
from models.run.presets import preset_for
from models.run.session import actor_seed


def round_batches(env_id: str, learner: Learner, actors: int, fragment: int) -> list:
    policy = learner.policy_on_cpu()
    return [sample_fragment(policy.sampler(actor_seed(0, 0, i, 32)),
                            EnvBatch(env_id, 1, actor_seed(0, 0, i, 32)), fragment, learner.norm_state())
            for i in range(actors)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--preset", default="locomotion")
    parser.add_argument("--actors", type=int, default=None, help="default: the preset's fixed:N")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for the update (the Learner sets 1; more: the cores idle actors leave)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    preset = preset_for(args.env, args.preset)
    cfg = PPOConfig().replace(preset["ppo"])
    actors = args.actors or int(str(preset["scheduler"]).partition(":")[2] or 8)
    learner = Learner(env_spaces(args.env), cfg, seed=0, max_rounds=int(preset["max_rounds"]))
    batches = round_batches(args.env, learner, actors, int(preset["fragment"]))
    torch.set_num_threads(args.threads)
    start = copy.deepcopy(learner.state_dict())
    times, steps = [], 0
    for _ in range(args.repeats + 1):  # the first is a warm-up
        learner.load_state_dict(copy.deepcopy(start))
        t0 = time.perf_counter()
        stats = learner.update(batches, round_index=1)
        times.append(time.perf_counter() - t0)
        steps = int(stats["train/grad_steps"])
    median = statistics.median(times[1:])
    print(f"{args.env} ({args.preset or 'preset'}): {actors} x {preset['fragment']} steps, torch "
          f"{torch.__version__}, {args.threads} thread(s): update {median:.3f} s (median of {args.repeats}; "
          f"{', '.join(f'{t:.3f}' for t in times[1:])}), {steps} gradient steps, "
          f"{1000 * median / steps:.2f} ms per step")
    if args.profile:
        learner.load_state_dict(copy.deepcopy(start))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            learner.update(batches, round_index=1)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()

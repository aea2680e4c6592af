"""The round loop without Prefect, MLflow or worker processes: for finding out why a PPO setting
learns as it does, one factor at a time (issue 17: the Hopper-v5 locomotion preset).

Each round: `actors` fragments of `fragment` steps sampled in this process, one after another,
with the learner's current weights and normaliser statistics (models/rollout.py
sample_fragment, exactly what an actor runs), then one `Learner.update` (models/ppo.py). Seeds
follow models/session.py actor_seed, so `--envs fresh` samples what the `train` flow's actors
sample. `--envs continued` keeps each actor index's envs (and their episodes) from round to
round, as CleanRL's vector env does, instead of resetting them every round.

Every --eval-every env steps: a deterministic evaluation (models/evaluation.py) with return and
forward displacement. One JSON line per evaluation goes to stdout and, with --out, to a file.

    .venv/bin/python -m benchmarks.ppo_diagnosis --env Hopper-v5 --variant locomotion \\
        --actors 8 --fragment 1024 --steps 200000 --ppo '{"init_log_std": 0.0}'
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from models.config import PPOConfig
from models.envs import EnvBatch, env_spaces
from models.evaluation import evaluate_policy
from models.policy import weights_from_bytes
from models.ppo import Learner
from models.presets import preset_for
from models.rollout import sample_fragment
from models.session import actor_seed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--variant", default="locomotion")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", choices=("fresh", "continued"), default="fresh")
    parser.add_argument("--anneal-over", type=int, default=1_000_000,
                        help="env steps over which anneal_lr decays the step size (CleanRL: 1M)")
    parser.add_argument("--ppo", type=json.loads, default={}, help="PPO overrides (JSON)")
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    preset = preset_for(args.env, args.variant)
    cfg = PPOConfig().replace(preset.get("ppo")).replace(args.ppo)
    per_round = args.actors * args.fragment
    rounds = args.steps // per_round
    learner = Learner(env_spaces(args.env), cfg, seed=args.seed,
                      max_rounds=max(args.anneal_over // per_round, 1))
    policy = learner.policy_on_cpu()
    kept: dict[int, EnvBatch] = {}
    steps = 0
    next_eval = args.eval_every
    started = time.perf_counter()
    eval_s = 0.0
    sink = open(args.out, "a") if args.out else None
    for k in range(rounds):
        weights, norm = learner.weights(), learner.norm_state()
        weights_from_bytes(policy, weights)
        batches, returns = [], []
        for i in range(args.actors):
            seed = actor_seed(args.seed, k, i, 32)
            if args.envs == "continued" and i in kept:
                envs = kept[i]
            else:
                envs = EnvBatch(args.env, 1, seed)
                kept[i] = envs
            first = len(envs.completed_returns)
            batch = sample_fragment(policy.sampler(seed), envs, args.fragment, norm)
            returns += envs.completed_returns[first:]
            batches.append(batch)
        stats = learner.update(batches, round_index=k)
        steps += per_round
        if steps >= next_eval or k == rounds - 1:
            next_eval += args.eval_every
            ev = evaluate_policy(learner.policy_on_cpu(), args.env, args.eval_episodes, seed=10_000 + args.seed,
                                 obs_rms=learner.obs_rms)
            eval_s += ev.wall_s
            motion = ev.motion
            row = {"label": args.label, "round": k + 1, "env_steps": steps,
                   "wall_s": round(time.perf_counter() - started - eval_s, 1),
                   "train_return": round(sum(returns) / len(returns), 1) if returns else None,
                   "eval_return": round(ev.return_mean, 1),
                   "displacement": round(motion.forward_displacement_mean, 2) if motion else None,
                   "kl": round(stats["train/policy_kl"], 4), "clipfrac": round(stats["train/clipfrac"], 3),
                   "log_std": round(float(learner.policy.log_std.detach().mean()), 3)
                   if hasattr(learner.policy, "log_std") else None}
            line = json.dumps(row)
            print(line, flush=True)
            if sink:
                sink.write(line + "\n")
                sink.flush()


if __name__ == "__main__":
    main()

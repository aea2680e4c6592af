"""The round loop without Prefect, MLflow or worker processes: for finding out why a PPO setting
learns as it does, one factor at a time (issue 17: the Hopper-v5 locomotion preset).

Each round: `actors` fragments of `fragment` steps sampled in this process, one after another,
with the learner's current weights and normaliser statistics (models/rl/rollout.py
sample_fragment, exactly what an actor runs), then one `Learner.update` (models/rl/ppo.py). Seeds
follow models/run/session.py actor_seed, so `--envs fresh` samples what the `train` flow's actors
sample. `--envs continued` keeps each actor index's envs (and their episodes) from round to
round, as CleanRL's vector env does, instead of resetting them every round. `--envs carried`
builds new envs every round that continue the episodes the round before left (models/envs/snapshot.py),
as the `train` flow's actors do with carry_episodes.

Every --eval-every env steps: a deterministic evaluation (models/rl/evaluation.py) with return and
forward displacement. One JSON line per evaluation goes to stdout and, with --out, to a file.

`--peer sb3-cleanrl` runs SB3's PPO with CleanRL's settings instead (benchmarks/mujoco_vs_sb3.py's
`cleanrl` peer), evaluated by the same loop on the same evaluation episodes: a per-sample
comparison of the two PPOs without any orchestration. With --out, a label whose last evaluation
is already in the file is skipped (resumable seed sweeps); `--summary FILE` prints, per label, the
first evaluation at or above --target with every episode moving forward.

    .venv/bin/python -m benchmarks.ppo_diagnosis --env Hopper-v5 --variant locomotion \\
        --actors 8 --fragment 1024 --steps 200000 --ppo '{"init_log_std": 0.0}'
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import torch

from models.envs.batch import EnvBatch, env_spaces
from models.rl.evaluation import evaluate_policy
from models.rl.policy import weights_from_bytes
from models.rl.ppo import Learner
from models.rl.rollout import sample_fragment
from models.run.config import PPOConfig
from models.run.presets import preset_for
from models.run.session import actor_seed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--variant", default="locomotion")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", choices=("fresh", "continued", "carried"), default="fresh")
    parser.add_argument("--anneal-over", type=int, default=1_000_000,
                        help="env steps over which anneal_lr decays the step size (CleanRL: 1M)")
    parser.add_argument("--ppo", type=json.loads, default={}, help="PPO overrides (JSON)")
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default=None)
    parser.add_argument("--peer", choices=("ours", "sb3-cleanrl"), default="ours")
    parser.add_argument("--target", type=float, default=2000.0, help="J for --summary")
    parser.add_argument("--summary", default=None, help="print steps to --target per label of this file")
    args = parser.parse_args(argv)
    if args.summary:
        print_summary(args.summary, args.target)
        return
    if args.out and finished(args.out, args.label, args.steps):
        print(f"{args.label}: already in {args.out}, skipped")
        return
    torch.set_num_threads(1)
    sink = open(args.out, "a") if args.out else None

    def emit(row: dict) -> None:
        line = json.dumps({"label": args.label, **row})
        print(line, flush=True)
        if sink:
            sink.write(line + "\n")
            sink.flush()

    (run_sb3 if args.peer == "sb3-cleanrl" else run_ours)(args, emit)


def eval_row(ev) -> dict:
    motion = ev.motion
    return {"eval_return": round(ev.return_mean, 1), "eval_length": round(ev.length_mean, 1),
            "displacement": round(motion.forward_displacement_mean, 2) if motion else None,
            "displacement_min": round(motion.forward_displacement_min, 2) if motion else None}


def run_ours(args, emit: Callable[[dict], None]) -> None:
    preset = preset_for(args.env, args.variant)
    cfg = PPOConfig().replace(preset.get("ppo")).replace(args.ppo)
    per_round = args.actors * args.fragment
    rounds = args.steps // per_round
    learner = Learner(env_spaces(args.env), cfg, seed=args.seed,
                      max_rounds=max(args.anneal_over // per_round, 1))
    policy = learner.policy_on_cpu()
    kept: dict[int, EnvBatch] = {}
    carried: dict[int, tuple] = {}
    steps = 0
    next_eval = args.eval_every
    started = time.perf_counter()
    eval_s = 0.0
    for k in range(rounds):
        weights, norm = learner.weights(), learner.norm_state()
        weights_from_bytes(policy, weights)
        batches, returns = [], []
        for i in range(args.actors):
            seed = actor_seed(args.seed, k, i, 32)
            if args.envs == "continued" and i in kept:
                envs = kept[i]
            else:  # "carried": new envs that continue the episodes of round k-1's actor i
                envs = EnvBatch(args.env, 1, seed, resume=carried.get(i, ()) if args.envs == "carried" else ())
                kept[i] = envs
            first = len(envs.completed_returns)
            batch = sample_fragment(policy.sampler(seed), envs, args.fragment, norm,
                                    carry=args.envs == "carried")
            carried[i] = batch.carry
            returns += envs.completed_returns[first:]
            batches.append(batch)
        stats = learner.update(batches, round_index=k)
        steps += per_round
        if steps >= next_eval or k == rounds - 1:
            next_eval += args.eval_every
            ev = evaluate_policy(learner.policy_on_cpu(), args.env, args.eval_episodes, seed=10_000 + args.seed,
                                 obs_rms=learner.obs_rms)
            eval_s += ev.wall_s
            emit({"round": k + 1, "env_steps": steps,
                  "wall_s": round(time.perf_counter() - started - eval_s, 1),
                  "train_return": round(sum(returns) / len(returns), 1) if returns else None,
                  **eval_row(ev),
                  "kl": round(stats["train/policy_kl"], 4), "clipfrac": round(stats["train/clipfrac"], 3),
                  "approx_kl": round(stats["train/approx_kl"], 4),
                  "explained_variance": round(stats["train/explained_variance"], 3),
                  "log_std": round(float(learner.policy.log_std.detach().mean()), 3)
                  if hasattr(learner.policy, "log_std") else None})


def run_sb3(args, emit: Callable[[dict], None]) -> None:
    """SB3 PPO with CleanRL's settings (one env, 2048 steps a rollout), evaluated every
    --eval-every steps on the same episodes as ours (seed 10,000 + seed)."""
    from stable_baselines3.common.callbacks import BaseCallback

    from benchmarks.mujoco_vs_sb3 import sb3_evaluate, sb3_model

    model, env = sb3_model("cleanrl", args.env, args.seed, args.steps)
    started = time.perf_counter()

    class Evaluate(BaseCallback):
        eval_s = 0.0
        done_at = 0

        def _on_step(self) -> bool:
            return True

        def _on_rollout_start(self) -> None:  # after each update
            self.maybe_evaluate()

        def maybe_evaluate(self) -> None:
            n = self.num_timesteps
            if n < self.done_at + args.eval_every and n < args.steps:
                return
            self.done_at = n
            ev = sb3_evaluate(model, env, args.env, args.eval_episodes, 10_000 + args.seed)
            self.eval_s += ev.wall_s
            logged = model.logger.name_to_value  # the last update's train/ figures
            emit({"round": n // 2048, "env_steps": n,
                  "wall_s": round(time.perf_counter() - started - self.eval_s, 1), **eval_row(ev),
                  "clipfrac": round(float(logged.get("train/clip_fraction", math.nan)), 3),
                  "approx_kl": round(float(logged.get("train/approx_kl", math.nan)), 4),
                  "explained_variance": round(float(logged.get("train/explained_variance", math.nan)), 3),
                  "log_std": round(float(model.policy.log_std.detach().mean()), 3)})

    callback = Evaluate()
    model.learn(total_timesteps=args.steps, callback=callback)
    callback.maybe_evaluate()


def finished(path: str, label: str, steps: int) -> bool:
    """The file already holds this label's evaluation at (or past) its last whole round."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return False
    return any(r.get("label") == label and r["env_steps"] >= steps - 2048 for r in rows)


def print_summary(path: str, target: float) -> None:
    """Per label: the first evaluation >= target with every episode moving forward."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    labels = dict.fromkeys(r["label"] for r in rows)
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        hit = next((r for r in mine if r["eval_return"] >= target
                    and (r.get("displacement_min") if r.get("displacement_min") is not None
                         else r.get("displacement") or -math.inf) > 0), None)
        print(f"{label:40s} last {mine[-1]['env_steps']:>8d} steps R {mine[-1]['eval_return']:>7.1f}   "
              f"J at {hit['env_steps'] if hit else '-':>8}")

if __name__ == "__main__":
    main()

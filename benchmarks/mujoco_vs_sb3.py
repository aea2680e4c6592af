"""Issue 5 acceptance: Hopper-v5, ours (Fixed(8), through the `train` flow) vs Stable-Baselines3
PPO with RL-Zoo's tuned Hopper hyperparameters, for the same number of env steps, in one run.

Both sides use one torch thread and train for exactly the same number of env steps (our
preset's max_rounds x 8 actors x fragment unless --steps is given; rounded down to whole
rounds of ours and whole 512-step rollouts of SB3). Figures per seed:

- wall_s: ours, the whole `train` flow call (actor processes, MLflow, checkpoints, rounds;
  the temporary Prefect API's start-up is not counted); SB3, model construction + learn().
- last_return: ours, R_k of the last round (mean return of the episodes that finished inside
  it); SB3, the same statistic over its last 8 x fragment env steps (Monitor episodes), and
  also SB3's usual rollout/ep_rew_mean (its last <= 100 episodes).
- best_return: ours, the best R_k; SB3, the best window of the same size.
- first_1000: env steps at the end of the first window (round) whose mean return >= 1000.
- eval_return: deterministic actions, 5 whole episodes, frozen observation statistics
  (evaluation is not in wall_s).

RL-Zoo's Hopper hyperparameters (rl-baselines3-zoo hyperparams/ppo.yml, Hopper): VecNormalize
(obs and reward, gamma = PPO's gamma as RL-Zoo passes it), n_envs 1, n_steps 512, batch 32,
gamma 0.999, lr 9.80828e-05, ent_coef 0.00229519, clip 0.2, n_epochs 5, gae_lambda 0.99,
max_grad_norm 0.7, vf_coef 0.835671, log_std_init -2, ortho_init False, ReLU, pi/vf [256, 256].

    .venv/bin/python -m benchmarks.mujoco_vs_sb3 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
N_ACTORS = 8


def window_means(ends: list[int], returns: list[float], window: int, total: int) -> list[float]:
    """Mean return of the episodes ending inside each consecutive window of `window` steps."""
    out = []
    for start in range(0, total - window + 1, window):
        inside = [r for e, r in zip(ends, returns, strict=True) if start < e <= start + window]
        out.append(float(np.mean(inside)) if inside else math.nan)
    return out


def first_reaching(means: list[float], window: int, target: float) -> int | None:
    for k, m in enumerate(means):
        if not math.isnan(m) and m >= target:
            return (k + 1) * window
    return None


def episode_log():
    """An SB3 callback that records (env step, return) of every finished episode."""
    from stable_baselines3.common.callbacks import BaseCallback

    class EpisodeLog(BaseCallback):
        def __init__(self):
            super().__init__()
            self.ends: list[int] = []
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.ends.append(self.num_timesteps)
                    self.returns.append(float(info["episode"]["r"]))
            return True

    return EpisodeLog()


def sb3_run(env_id: str, seed: int, steps: int, window: int, eval_episodes: int,
            target: float) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    gamma = 0.999
    started = time.perf_counter()
    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=gamma)
    model = PPO("MlpPolicy", env, n_steps=512, batch_size=32, gamma=gamma,
                learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2, n_epochs=5,
                gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
                policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                   net_arch=dict(pi=[256, 256], vf=[256, 256])),
                seed=seed, device="cpu", verbose=0)
    log = episode_log()
    model.learn(total_timesteps=steps, callback=log)
    wall = time.perf_counter() - started

    eval_env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=10_000 + seed), training=False,
                            norm_reward=False, gamma=gamma)
    eval_env.obs_rms = env.obs_rms
    eval_mean, eval_std = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes,
                                          deterministic=True)
    means = window_means(log.ends, log.returns, window, model.num_timesteps)
    finite = [m for m in means if not math.isnan(m)]
    return {"who": "sb3", "seed": seed, "wall_s": wall, "env_steps": int(model.num_timesteps),
            "last_return": means[-1] if means else math.nan,
            "ep_rew_mean_100": float(np.mean(log.returns[-100:])) if log.returns else math.nan,
            "best_return": max(finite) if finite else math.nan,
            "first_target_steps": first_reaching(means, window, target),
            "eval_return": float(eval_mean), "eval_std": float(eval_std),
            "curve": means}


def evaluate_final_policy(env_id: str, summary, episodes: int, seed: int) -> dict:
    """A `train` run's final policy, deterministic, on whole episodes with frozen obs statistics
    (eval seeds 10,000 + seed: never the training seeds)."""
    from models.checkpoint import load_policy
    from models.envs import env_spaces
    from models.evaluation import evaluate_policy
    from models.normalization import RunningMeanStd
    from models.policy import ActorCritic

    artifact = load_policy(Path(summary.checkpoint).with_name("final_policy.pt"))
    policy = ActorCritic(env_spaces(env_id), artifact.hidden, init_weights=False)
    policy.load_state_dict(artifact.policy)
    obs_rms = RunningMeanStd.from_moments(artifact.obs_rms) if artifact.obs_rms else None
    return evaluate_policy(policy, env_id, episodes, seed=10_000 + seed, obs_rms=obs_rms)


def ours_run(env_id: str, seed: int, rounds: int, tracking_uri: str, eval_episodes: int,
             target: float) -> dict:
    from flows.train import train

    torch.set_num_threads(1)
    started = time.perf_counter()
    # Run the full step budget (target far away) so that both sides train equally long.
    summary = train(env=env_id, scheduler=f"fixed:{N_ACTORS}", seed=seed, max_rounds=rounds,
                    target_return=1e9, budget_usd=1e6, tracking_uri=tracking_uri,
                    experiment=f"benchmark/{env_id}-vs-sb3")
    wall = time.perf_counter() - started

    ev = evaluate_final_policy(env_id, summary, eval_episodes, seed)
    curve = [h.mean_return for h in summary.history]
    steps = np.cumsum([h.env_steps for h in summary.history]).tolist()
    finite = [m for m in curve if not math.isnan(m)]
    first = next((s for s, m in zip(steps, curve, strict=True)
                  if not math.isnan(m) and m >= target), None)
    return {"who": "ours", "seed": seed, "wall_s": wall, "env_steps": summary.env_steps,
            "round_wall_s": summary.wall_time_s, "sum_round_s": summary.time_to_stop_s,
            "last_return": summary.final_return, "best_return": max(finite) if finite else math.nan,
            "first_target_steps": first, "eval_return": ev["eval/return_mean"],
            "eval_std": ev["eval/return_std"], "curve": curve}


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return statistics.median(values) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=150_000,
                        help="env steps for both (rounded down to whole rounds of ours)")
    parser.add_argument("--target", type=float, default=1000.0)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--out", default=str(RESULTS / "hopper_vs_sb3.json"))
    args = parser.parse_args()

    from deployments.local_api import prefect_api
    from flows.tracking import default_tracking_uri
    from models.presets import preset_for

    fragment = int(preset_for(args.env)["fragment"])
    window = N_ACTORS * fragment
    rounds = args.steps // window
    steps = rounds * window
    tracking_uri = args.tracking_uri or default_tracking_uri()
    print(f"{args.env}: {rounds} rounds x {N_ACTORS} actors x {fragment} steps = {steps} env steps "
          f"each; SB3 window for R_k-like figures: {window} steps", flush=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    with prefect_api():
        print(f"temporary Prefect API up in {time.perf_counter() - t0:.1f} s (not counted)", flush=True)
        for seed in args.seeds:  # alternate, so machine load drifts hit both sides alike
            for run, run_args in ((sb3_run, (steps, window)), (ours_run, (rounds, tracking_uri))):
                row = run(args.env, seed, *run_args, args.eval_episodes, args.target)
                rows.append(row)
                brief = {k: (round(v, 1) if isinstance(v, float) else v)
                         for k, v in row.items() if k != "curve"}
                print(brief, flush=True)

    ours = [r for r in rows if r["who"] == "ours"]
    sb3 = [r for r in rows if r["who"] == "sb3"]
    lines = [
        f"{args.env}, {steps} env steps each, seeds {args.seeds}: medians over seeds",
        "",
        f"| | wall s | last R (last window) | best R | eval (det., 5 ep.) | steps to R>={args.target:g} "
        "| reached |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, group in (("MinionsRL Fixed(8), train flow", ours), ("SB3 PPO, RL-Zoo Hopper", sb3)):
        reached = sum(r["first_target_steps"] is not None for r in group)
        firsts = [r["first_target_steps"] for r in group if r["first_target_steps"] is not None]
        lines.append(f"| {name} | {_median(group, 'wall_s'):.1f} | {_median(group, 'last_return'):.0f} "
                     f"| {_median(group, 'best_return'):.0f} | {_median(group, 'eval_return'):.0f} "
                     f"| {statistics.median(firsts) if firsts else 'n/a'} | {reached}/{len(group)} |")
    ratio = _median(ours, "wall_s") / _median(sb3, "wall_s")
    lines += ["", f"wall-time ratio ours/SB3 (medians): {ratio:.2f} (goal <= 0.6 at equal or better return)",
              f"SB3 rollout/ep_rew_mean (last <= 100 episodes), median: {_median(sb3, 'ep_rew_mean_100'):.0f}"]
    table = "\n".join(lines)
    print("\n" + table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"env": args.env, "steps": steps, "seeds": args.seeds, "rows": rows},
                              indent=1))
    out.with_suffix(".md").write_text(table + "\n")
    print(f"\nwritten: {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

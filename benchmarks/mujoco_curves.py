"""Return curves (R_k against env steps) of HalfCheetah-v5 and Humanoid-v5 with Fixed(8), through
the `train` flow, for comparison with CleanRL's published PPO (ppo_continuous_action.py).

Each run goes to the step budget (the preset's target is set out of reach so that the curve is
complete), then its final policy is evaluated with deterministic actions on whole episodes.
Writes benchmarks/results/<env>_seed<seed>_curve.csv (round, env_steps, R_k, round wall s)
and one PNG with all curves.

CleanRL publishes its curves as plots (and its 1M-step result as a number); the values at 200k
steps are not published as numbers we could read here. So, with --peer, the same run also trains
the peer that those curves come from, measured in this run: Stable-Baselines3 PPO configured
exactly as CleanRL's ppo_continuous_action.py (1 env, 2048 steps per rollout, minibatch 64,
10 epochs, lr 3e-4 annealed linearly over CleanRL's 1M steps, gamma 0.99, lambda 0.95, clip 0.2,
value clipping 0.2, ent 0, vf 0.5, grad norm 0.5, obs and reward normalisation clipped at 10,
64x64 tanh, log-std 0), and reports its mean return over the same 8 x fragment windows.
Both final policies are evaluated by the same loop (models/rl/evaluation.py run_episodes), which
also says what the body did: forward displacement (metres) and forward-reward sum per episode.

    .venv/bin/python -m benchmarks.mujoco_curves --envs HalfCheetah-v5 Humanoid-v5 --seed 0 --peer

R_k is the mean return of the episodes that finished inside round k. HalfCheetah never ends an
episode early (always 1000 steps), so its fragment must be >= 1000 for R_k to exist at all.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
N_ACTORS = 8

# CleanRL ppo_continuous_action.py, 1M steps, -v4 ids (docs.cleanrl.dev, rl-algorithms/ppo).
CLEANRL_1M = {"HalfCheetah-v5": "1443 +- 46", "Humanoid-v5": "716 +- 49"}


def run_one(env_id: str, seed: int, steps: int, tracking_uri: str, eval_episodes: int) -> dict:
    from benchmarks.mujoco_vs_sb3 import eval_fields, evaluate_final_policy
    from flows.train import train
    from models.run.presets import preset_for

    fragment = int(preset_for(env_id)["fragment"])
    rounds = steps // (N_ACTORS * fragment)
    started = time.perf_counter()
    summary = train(env=env_id, scheduler=f"fixed:{N_ACTORS}", seed=seed, max_rounds=rounds,
                    target_return=1e9, budget_usd=1e6, tracking_uri=tracking_uri,
                    experiment=f"benchmark/{env_id}-curve")
    wall = time.perf_counter() - started
    ev = evaluate_final_policy(env_id, summary, eval_episodes, seed)
    hist = summary.history
    steps_total = np.cumsum([h.env_steps for h in hist]).astype(int).tolist()
    rows = [{"round": k, "env_steps": s, "return": h.mean_return, "round_wall_s": h.round_s}
            for k, (s, h) in enumerate(zip(steps_total, hist, strict=True))]
    path = RESULTS / f"{env_id}_seed{seed}_curve.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    finite = [r["return"] for r in rows if not math.isnan(r["return"])]
    last3 = [r["return"] for r in rows[-3:] if not math.isnan(r["return"])]
    return {"env": env_id, "who": "ours", "seed": seed, "fragment": fragment, "rounds": len(rows),
            "env_steps": summary.env_steps, "wall_s": wall,
            "final_return": summary.final_return,
            "last3_mean": float(np.mean(last3)) if last3 else math.nan,
            "best_return": max(finite) if finite else math.nan,
            **eval_fields(ev), "csv": str(path), "rows": rows}


def cleanrl_peer(env_id: str, seed: int, steps: int, window: int, eval_episodes: int) -> dict:
    """SB3 PPO with CleanRL ppo_continuous_action.py's settings; R over windows of `window` steps."""
    from benchmarks.mujoco_vs_sb3 import episode_log, eval_fields, sb3_evaluate, sb3_model, window_means

    torch.set_num_threads(1)
    started = time.perf_counter()
    model, env = sb3_model("cleanrl", env_id, seed, steps)
    log = episode_log()
    model.learn(total_timesteps=steps, callback=log)
    wall = time.perf_counter() - started
    ev = sb3_evaluate(model, env, env_id, eval_episodes, 10_000 + seed)
    means = window_means(log.ends, log.returns, window, model.num_timesteps)
    rows = [{"round": k, "env_steps": (k + 1) * window, "return": m, "round_wall_s": math.nan}
            for k, m in enumerate(means)]
    finite = [m for m in means if not math.isnan(m)]
    last3 = [m for m in means[-3:] if not math.isnan(m)]
    return {"env": env_id, "who": "sb3-cleanrl", "seed": seed, "env_steps": int(model.num_timesteps),
            "wall_s": wall, "final_return": means[-1] if means else math.nan,
            "last3_mean": float(np.mean(last3)) if last3 else math.nan,
            "best_return": max(finite) if finite else math.nan, **eval_fields(ev), "rows": rows}


def save(result: dict) -> None:
    path = RESULTS / f"{result['env']}_{result['who']}_seed{result['seed']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in result.items()
           if k != "rows" and not isinstance(v, list)}, flush=True)


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({r["env"] for r in results})
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
    for ax, env_id in zip(axes[0], envs, strict=True):
        for r in (r for r in results if r["env"] == env_id):
            xs = [row["env_steps"] for row in r["rows"]]
            ys = [row["return"] for row in r["rows"]]
            name = ("MinionsRL Fixed(8)" if r["who"] == "ours"
                    else "SB3 PPO, CleanRL's settings")
            ax.plot(xs, ys, marker=".", label=f"{name}, seed {r['seed']}")
        ax.set_title(f"{env_id}  (CleanRL PPO at 1M steps: {CLEANRL_1M.get(env_id, 'n/a')})",
                     fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("mean return of finished episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Humanoid-v5"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--peer", action="store_true",
                        help="also train SB3 PPO with CleanRL's settings for the same steps")
    parser.add_argument("--plot-only", action="store_true",
                        help="no training: table and plot from the results saved before")
    args = parser.parse_args()
    from deployments.local_api import prefect_api
    from flows.tracking import default_tracking_uri

    tracking_uri = args.tracking_uri or default_tracking_uri()
    with contextlib.nullcontext() if args.plot_only else prefect_api():
        for env_id in [] if args.plot_only else args.envs:
            r = run_one(env_id, args.seed, args.steps, tracking_uri, args.eval_episodes)
            save(r)
            if args.peer:
                window = N_ACTORS * r["fragment"]
                save(cleanrl_peer(env_id, args.seed, r["env_steps"], window, args.eval_episodes))
    # Every result is kept as it finishes; the table and plot take the latest of each
    # (env, who) for this seed, so a peer measured in an earlier run still shows.
    results = [json.loads(f.read_text()) for env_id in args.envs
               for f in sorted(RESULTS.glob(f"{env_id}_*_seed{args.seed}.json"))]
    png = RESULTS / f"mujoco_curves_seed{args.seed}.png"
    plot(results, png)
    summary = RESULTS / f"mujoco_curves_seed{args.seed}.json"
    summary.write_text(json.dumps([{k: v for k, v in r.items() if k != "rows"} for r in results],
                                  indent=1))
    print("\n| env | who | env steps | final R | mean R last 3 windows | best R | eval (det., "
          f"{args.eval_episodes} ep.) | eval displacement m: mean; min | wall s | CleanRL PPO @1M (published) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ev = f"{r['eval_return']:.0f} +- {r['eval_std']:.0f}" if "eval_return" in r else "-"
        moved = (f"{r['eval_displacement_mean']:.2f}; {r['eval_displacement_min']:.2f}"
                 if "eval_displacement_mean" in r else "-")  # results saved before issue 17 lack it
        print(f"| {r['env']} | {r['who']} | {r['env_steps']} | {r['final_return']:.0f} "
              f"| {r['last3_mean']:.0f} | {r['best_return']:.0f} | {ev} | {moved} | {r['wall_s']:.0f} "
              f"| {CLEANRL_1M.get(r['env'], 'n/a')} |")
    print(f"\nwritten: {png}, {summary}, " + ", ".join(r["csv"] for r in results if "csv" in r))


if __name__ == "__main__":
    main()

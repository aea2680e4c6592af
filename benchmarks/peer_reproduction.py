"""Does a peer reproduce its own published score? Issue 33: a peer counts in a comparison only
once it does, on one seed, at the published step count; otherwise its settings are fixed or it
is dropped, and the results page says which.

Each (peer, env, seed) trains SB3's PPO with the peer's settings (benchmarks/mujoco_vs_sb3.py
sb3_model) for the published env steps, then reports the statistic the peer publishes:

- CleanRL (docs/benchmark/ppo_continuous_action.md, tag pr-424, MuJoCo v4, 1M steps): the mean
  episodic return of training episodes at the end, mean +- std over its seeds. Ours: the mean of
  the last 100 training episodes (SB3's ep_rew_mean window); "reproduced" when it is at least the
  published mean - 2 std (the seed-to-seed spread of a 3-seed figure; above the band counts).
- RL-Zoo (benchmark.md, v3 envs, 1M steps, one run): the deterministic policy's mean return over
  150k evaluation steps. Ours: 10 deterministic episodes with frozen normalisation statistics;
  "reproduced" when at least the published mean - 2 std, the std being that of the episodes, or
  10% of the mean where the published std is below it (one trained agent, not a spread over seeds).

Our envs are gymnasium's v5 (the project's); the published figures are v4 (CleanRL) and v3
(RL-Zoo), whose dynamics v5 keeps (v5 fixes bugs in observations and the contact cost).

    .venv/bin/python -m benchmarks.peer_reproduction --peer cleanrl --env Hopper-v5 --seed 0

Resumable: benchmarks/results/peer_reproduction.json keeps every finished run; a run already
there is not run again (--fresh redoes it).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "peer_reproduction.json"


@dataclass(frozen=True)
class Published:
    """A peer's own figure for one env: what it reports, over what, and where it is written."""

    mean: float
    std: float
    steps: int
    statistic: str
    source: str
    env_version: str

    def band(self) -> tuple[float, float]:
        spread = 2 * max(self.std, 0.1 * abs(self.mean) if self.statistic == "deterministic eval" else 0.0)
        return self.mean - spread, self.mean + spread


CLEANRL_SOURCE = "CleanRL docs/benchmark/ppo_continuous_action.md (openrlbenchmark, tag pr-424)"
RLZOO_SOURCE = "rl-baselines3-zoo benchmark.md (one trained agent)"
PUBLISHED = {
    ("cleanrl", "Hopper-v5"): Published(2382.86, 271.74, 1_000_000, "training episodes", CLEANRL_SOURCE, "Hopper-v4"),
    ("cleanrl", "HalfCheetah-v5"): Published(1442.64, 46.03, 1_000_000, "training episodes", CLEANRL_SOURCE,
                                             "HalfCheetah-v4"),
    ("cleanrl", "Humanoid-v5"): Published(716.11, 49.08, 1_000_000, "training episodes", CLEANRL_SOURCE,
                                          "Humanoid-v4"),
    ("rlzoo", "Hopper-v5"): Published(2410.435, 10.026, 1_000_000, "deterministic eval", RLZOO_SOURCE, "Hopper-v3"),
    ("rlzoo", "HalfCheetah-v5"): Published(5819.099, 663.530, 1_000_000, "deterministic eval", RLZOO_SOURCE,
                                           "HalfCheetah-v3"),
}


def verdict(published: Published, training_mean: float, eval_mean: float) -> tuple[float, bool]:
    """The figure comparable with the published one, and whether the peer reproduces it: at or
    above the band's low end (a peer that learns more than it published is not a broken peer;
    the table says when it lies above the band)."""
    ours = training_mean if published.statistic == "training episodes" else eval_mean
    return ours, (not math.isnan(ours)) and ours >= published.band()[0]


def run_one(peer: str, env_id: str, seed: int, eval_episodes: int) -> dict:
    from benchmarks.mujoco_vs_sb3 import sb3_run

    published = PUBLISHED[(peer, env_id)]
    started = time.time()
    row = sb3_run(peer, env_id, seed, published.steps, window=2048, eval_episodes=eval_episodes,
                  target=math.inf, eval_every=0)
    figure, reproduced = verdict(published, row["ep_rew_mean_100"], row["eval_return"])
    return {"peer": peer, "env": env_id, "seed": seed, "env_steps": row["env_steps"], "wall_s": row["wall_s"],
            "cpu_s_per_1k_steps": row["cpu_s_per_1k_steps"], "load_at_start": row["load_at_start"],
            "training_mean_last_100": row["ep_rew_mean_100"], "eval_return": row["eval_return"],
            "eval_std": row["eval_std"], "eval_displacement_mean": row.get("eval_displacement_mean"),
            "figure": figure, "published": asdict(published), "band": list(published.band()),
            "reproduced": reproduced, "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started))}


def line(r: dict) -> str:
    p = r["published"]
    low, high = r["band"]
    return (f"| {r['peer']} | {r['env']} (published on {p['env_version']}) | {r['seed']} | {r['env_steps']:,} "
            f"| {p['statistic']}: {r['figure']:.0f} | {p['mean']:.0f} +- {p['std']:.0f} (band {low:.0f}-{high:.0f}) "
            f"| {reproduced_words(r['figure'], r['reproduced'], high)} | {r['wall_s']:.0f} |")


def reproduced_words(figure: float, reproduced: bool, high: float) -> str:
    if not reproduced:
        return "NO"
    return "yes, above the band" if figure > high else "yes"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", choices=sorted({p for p, _ in PUBLISHED}), required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--fresh", action="store_true", help="run again even if this run is in --out")
    args = parser.parse_args(argv)
    if (args.peer, args.env) not in PUBLISHED:
        parser.error(f"no published figure for {args.peer} on {args.env}; known: {sorted(PUBLISHED)}")

    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    key = (args.peer, args.env, args.seed)
    done = [r for r in rows if (r["peer"], r["env"], r["seed"]) == key]
    if done and not args.fresh:
        print(f"already in {args.out} (--fresh to run again)")
    else:
        row = run_one(args.peer, args.env, args.seed, args.eval_episodes)
        # re-read: another reproduction may have finished meanwhile (they run side by side)
        rows = [r for r in (json.loads(args.out.read_text()) if args.out.exists() else [])
                if (r["peer"], r["env"], r["seed"]) != key] + [row]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    print("| peer | env | seed | env steps | ours | published | reproduced | wall s |\n|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["peer"], r["env"], r["seed"])):
        published = PUBLISHED[(r["peer"], r["env"])]  # the current rule, for runs judged by an older one
        r["figure"], r["reproduced"] = verdict(published, r["training_mean_last_100"], r["eval_return"])
        print(line(r))


if __name__ == "__main__":
    main()

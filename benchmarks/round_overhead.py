"""BENCHMARKS (b): orchestration overhead per round at 1, 8 and 32 actors (local backend).

Overhead = round wall time (measured around the `train-round` subflow call) minus the union
of the actors' busy intervals and the learner's update time inside it. Rounds 1.. are used
(round 0 includes first-call warm-up); median over rounds, one run per actor count.

    .venv/bin/python -m benchmarks.round_overhead --actors 1 8 32 --rounds 6
"""

from __future__ import annotations

import argparse
import statistics

from mlflow.tracking import MlflowClient


def measure(actors: int, rounds: int, fragment: int, tracking_uri: str) -> dict:
    from flows.train import train

    summary = train(env="CartPole-v1", scheduler=f"fixed:{actors}", max_rounds=rounds,
                    fragment=fragment, target_return=1e9, budget_usd=100.0, seed=0,
                    tracking_uri=tracking_uri, experiment="benchmark/round-overhead")
    client = MlflowClient(tracking_uri)

    def series(key: str) -> list[float]:
        hist = sorted(client.get_metric_history(summary.run_id, key), key=lambda m: m.step)
        return [m.value for m in hist][1:]

    wall, over = series("time/round_wall_s"), series("time/orchestration_s")
    learner, actor_max = series("time/learner_s"), series("time/actor_max_s")
    subflow = series("time/subflow_overhead_s")
    return {"subflow_s": statistics.median(subflow), "actors": actors, "round_wall_s": statistics.median(wall),
            "overhead_s": statistics.median(over),
            "overhead_pct": 100 * statistics.median(o / w for o, w in zip(over, wall, strict=True)),
            "learner_s": statistics.median(learner), "actor_max_s": statistics.median(actor_max)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--fragment", type=int, default=512)
    args = parser.parse_args()
    from deployments.local_api import prefect_api
    from flows.tracking import default_tracking_uri

    uri = default_tracking_uri()
    with prefect_api():
        rows = [measure(n, args.rounds, args.fragment, uri) for n in args.actors]
    print("\n| actors | round wall s | overhead s | of which subflow s | overhead % of wall | learner s | slowest actor s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['actors']} | {r['round_wall_s']:.3f} | {r['overhead_s']:.3f} | "
              f"{r['subflow_s']:.3f} | {r['overhead_pct']:.1f} | {r['learner_s']:.3f} | {r['actor_max_s']:.3f} |")


if __name__ == "__main__":
    main()

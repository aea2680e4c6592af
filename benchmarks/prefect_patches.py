"""What each client-side Prefect patch (flows/prefect_patches/) saves: a CartPole-v1 Fixed(8) training
with every patch, and with each one left out, on the project's temporary API, one after another
and then in the reverse order (the machine's drift falls on every setting alike).

Per setting, medians over its runs of: the round's orchestration (benchmarks/round_overhead.py:
round wall minus the actors' busy union and the update) and the subflow's own overhead (round wall
minus the round body), rounds 1.. of each run; and the shut-down (last round recorded to `train`'s
return). Each run is its own child process, so a patch left out is never installed there.

    .venv/bin/python -m benchmarks.prefect_patches --rounds 15 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SETTINGS = ("all", "no-heartbeats", "no-tls_context", "no-lean_subflow", "no-shared_task_runner")


def one_run(setting: str, rounds: int, tracking_uri: str) -> dict:
    """In this (child) process: install the patches but the one left out, train, measure."""
    from flows import prefect_patches
    from flows.prefect_patches import heartbeats, lean_subflow, tls_context

    left_out = setting.removeprefix("no-")
    for name, module in (("heartbeats", heartbeats), ("tls_context", tls_context), ("lean_subflow", lean_subflow)):
        if name == left_out:
            module.install = lambda: None  # never installed in this process
    if left_out == "lean_subflow":
        import flows.rounds

        flows.rounds.lean_start = lambda flow_obj: flow_obj
    if left_out == "shared_task_runner":
        from prefect.task_runners import ThreadPoolTaskRunner

        import flows.rounds

        class PerRoundRunner(ThreadPoolTaskRunner):  # Prefect's own: new threads every round
            def close(self) -> None:
                pass

        flows.rounds.SharedThreadPoolTaskRunner = PerRoundRunner
    prefect_patches.install()
    from benchmarks.round_overhead import measure

    called = time.time()
    figures = measure(8, rounds, 512, tracking_uri)
    return {"setting": setting, **figures, "call_s": time.time() - called}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from deployments.local_api import prefect_api

        with tempfile.TemporaryDirectory() as tmp, prefect_api():
            out = one_run(args.child, args.rounds, f"sqlite:///{tmp}/mlflow.db")
        with open(args.json, "w") as f:
            json.dump(out, f)
        return
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for setting in SETTINGS if repeat % 2 == 0 else SETTINGS[::-1]:
                out = f"{tmp}/{repeat}-{setting}.json"
                subprocess.run([sys.executable, "-m", "benchmarks.prefect_patches", "--child", setting,
                                "--rounds", str(args.rounds), "--json", out], check=True,
                               env={**os.environ, "PREFECT_HOME": f"{tmp}/{repeat}-{setting}-home"})
                runs.append(json.loads(open(out).read()))
                print(f"{setting}: {runs[-1]['overhead_s']:.3f} s orchestration a round", flush=True)
    print("\n| setting | round wall (s) | orchestration a round (s) | subflow overhead (s) | runs |")
    print("|---|---|---|---|---|")
    for setting in SETTINGS:
        mine = [r for r in runs if r["setting"] == setting]
        med = {k: statistics.median(r[k] for r in mine) for k in ("round_wall_s", "overhead_s", "subflow_s")}
        print(f"| {setting} | {med['round_wall_s']:.3f} | {med['overhead_s']:.3f} | {med['subflow_s']:.3f} | {len(mine)} |")


if __name__ == "__main__":
    main()

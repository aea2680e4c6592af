"""What a learned scheduler thinks of every actor count at the states its runs visited (issue 13,
point 2: why a schedule is constant, or not).

For each round of each run of `--label` that an experiment (compare, actors-curve) finished, the
policy's probability of every count at the features that round's decision saw, the count taken,
and the value estimate V(s) in reward units (-beta x the time still to go, roughly). The runs
are read from the experiment's parent MLflow run (its finished_runs records), the scheduler from
its checkpoint (a path or a packaged name); the two must be the same scheduler for the table to
mean anything (the count taken is checked against the greedy one).

    .venv/bin/python -m benchmarks.scheduler_probe --scheduler hopper --label learned \\
        --experiment-run <compare's parent run id> --tracking-uri sqlite:////tmp/sched/eval.db
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def finished_runs(tracking_uri: str, run_id: str, label: str) -> list:
    from mlflow.tracking import MlflowClient

    from flows.experiments.common import FINISHED_DIR
    from models.report.experiment_resume import decode_finished

    client = MlflowClient(tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(client.download_artifacts(run_id, FINISHED_DIR, tmp))
        runs = [decode_finished(p.read_bytes(), p.name) for p in sorted(local.glob("*.mrlw"))]
    return sorted((r for r in runs if r.label == label and r.summary is not None), key=lambda r: r.seed)


def main(argv: list[str] | None = None) -> int:
    from models.scheduling.learned import load_scheduler, resolve_checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scheduler", required=True, help="checkpoint path or packaged name")
    p.add_argument("--experiment-run", required=True, help="the experiment's parent MLflow run id")
    p.add_argument("--label", default="learned", help="the experiment's row of this scheduler")
    p.add_argument("--tracking-uri", required=True)
    p.add_argument("--top", type=int, default=3)
    args = p.parse_args(argv)

    agent, _, _ = load_scheduler(resolve_checkpoint(args.scheduler))
    runs = finished_runs(args.tracking_uri, args.experiment_run, args.label)
    if not runs:
        raise SystemExit(f"no finished runs labelled {args.label!r} in run {args.experiment_run}")
    mass = np.zeros(agent.i_max)
    visited = 0
    for run in runs:
        trace = run.summary.scheduler_trace
        if trace is None:
            raise SystemExit(f"{args.label} seed {run.seed} has no learned-scheduler trace")
        print(f"\n{args.label}, seed {run.seed}: {run.summary.stop_reason} after {run.summary.rounds} rounds")
        print("| round | features | count taken | p(taken) | most probable counts | V(s) |")
        print("|---|---|---|---|---|---|")
        obs = np.asarray([s.obs for s in trace.steps], dtype=np.float32)
        probs = agent.probabilities(obs)
        for step, pr in zip(trace.steps, probs, strict=True):
            if trace.mode == "greedy" and int(pr.argmax()) != step.action:
                raise SystemExit(f"seed {run.seed} round {step.round}: the run took {step.actors} actors, this "
                                 f"checkpoint's greedy count is {int(pr.argmax()) + 1}: not the same scheduler")
            top = np.argsort(pr)[::-1][:args.top]
            feats = ", ".join(f"{x:.2f}" for x in step.obs)
            best = ", ".join(f"{a + 1}: {pr[a]:.2f}" for a in top)
            print(f"| {step.round} | {feats} | {step.actors} | {pr[step.action]:.2f} | {best} | {step.value:.3f} |")
        mass += probs.sum(axis=0)
        visited += len(probs)
    mass /= max(visited, 1)
    order = np.argsort(mass)[::-1][:8]
    print(f"\nmean probability over the {visited} visited states: "
          + ", ".join(f"{a + 1} actors {mass[a]:.3f}" for a in order))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The CartPole-v1 motivation: Fixed vs Increase vs Decrease at an equal actor budget.

    python -m flows.experiments motivation
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import Experiment, actor_steps, bars
from flows.experiments.results import MotivationResult
from flows.served_flow import served_flow
from models.report.experiment_stats import (
    DEFAULT_HELD_OUT_SEEDS,
    actor_rounds,
    aggregate,
    mean_std,
    row_metrics,
    seeds_note,
    stripped,
)
from models.run.workload import Placement, Workload, workload_env

MOTIVATION_ROUNDS = 12
"""K of the motivation's runs unless the workload sets one: the rounds of equal actor budget."""


def motivation_run_name() -> str:
    p = flow_run_context.parameters
    return f"motivation-{workload_env(p)}-n{p.get('n', 8)}"


@served_flow(name="motivation", flow_run_name=motivation_run_name, persist_result=False, validate_parameters=True)
def motivation(
    workload: Workload | None = None,
    placement: Placement | None = None,
    seeds: list[int] | None = None,
    n: int = 8,
    step: int = 2,
    every: int = 2,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    resume_run_id: str | None = None,
) -> MotivationResult:
    """Fixed(n) vs Increase vs Decrease (step actors every `every` rounds) at the same total
    actor budget over max_rounds rounds (the schedulers of models/scheduling/schedulers.py). A run that
    reaches J stops early, so the table also reports the actor-rounds each actually used.

    Args:
        workload: what every run is asked to do (default CartPole-v1 with its preset); its
            max_rounds, K, is the rounds over which the actor budgets are equal (default 12).
        placement: where the runs' actors run (default local).
        seeds: the seeds every schedule runs on (default the held-out 100, 101, 102).
        n: Fixed(n)'s actor count; Increase and Decrease average n over max_rounds.
        step: actors added (Increase) or removed (Decrease) at each change.
        every: rounds between two changes of the actor count.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested runs; default
            minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
        resume_run_id: the MLflow parent run of this experiment stopped before it finished
            (a crash, Ctrl-C): continue it with the same parameters; its finished runs are kept,
            not run again.
    """
    seeds = list(DEFAULT_HELD_OUT_SEEDS[:3]) if seeds is None else seeds
    specs = {"fixed": f"fixed:{n}", "increase": f"increase:{n}:{step}:{every}",
             "decrease": f"decrease:{n}:{step}:{every}"}
    workload = workload or Workload()
    workload = workload.with_values(max_rounds=workload.max_rounds or MOTIVATION_ROUNDS)
    max_rounds = workload.max_rounds
    with Experiment("motivation", workload, placement, {"seeds": seeds, "specs": specs}, tracking_uri, experiment,
                    checkpoint_dir, resume_run_id) as exp:
        exp.plan(len(specs) * len(seeds))
        runs = {label: [exp.train(spec, seed, label) for seed in seeds] for label, spec in specs.items()}
        rows = [aggregate(label, summaries).with_columns(
                    actor_rounds_mean=mean_std([actor_rounds(s) for s in summaries])[0])
                for label, summaries in runs.items()]
        exp.tracker.log_metrics(row_metrics(rows, ("time_s_mean", "cost_usd_mean", "actor_rounds_mean")), step=0)
        fig, (ax_r, ax_a, ax_t) = plt.subplots(1, 3, figsize=(15, 4))
        for i, (label, summaries) in enumerate(runs.items()):
            for j, s in enumerate(summaries):
                t = np.cumsum([h.round_s for h in s.history])
                ax_r.plot(t, [h.mean_return for h in s.history], color=f"C{i}",
                          alpha=0.7, label=label if j == 0 else None)
            actor_steps(ax_a, summaries[0], color=f"C{i}", label=label)
        ax_r.set_xlabel("sum of P_k (s)")
        ax_r.set_ylabel("mean episode return")
        ax_r.legend()
        ax_a.set_xlabel("round")
        ax_a.set_ylabel(f"actors (seed {seeds[0]})")
        ax_a.legend()
        bars(ax_t, rows, "time_s", "time to stop, cloud clock (s)")
        fig.suptitle(f"{workload.env}: Fixed({n}) vs Increase vs Decrease (±{step} every {every} rounds, "
                     f"equal actor budget over {max_rounds} rounds)", fontsize=9)
        md = f"Equal total actor budget over max_rounds; runs stop at J, see actor_rounds_mean. {seeds_note(seeds)}"
        plot = exp.publish(fig, rows, md, {"runs": stripped(runs)})
        return MotivationResult(exp.run_id, plot, [r.as_dict() for r in rows], runs)

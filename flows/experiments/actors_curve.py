"""The learned scheduler's actor count I_k per round.

    python -m flows.experiments actors-curve
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import LEARNED, Experiment, actor_steps, learned_spec
from flows.experiments.results import ActorsCurveResult
from flows.served_flow import served_flow
from models.report.experiment_stats import (
    DEFAULT_HELD_OUT_SEEDS,
    mean_curve,
    mean_phases,
    phase_row,
    summary_record,
)
from models.run.workload import Placement, Workload, workload_env


def actors_curve_run_name() -> str:
    return f"actors-curve-{workload_env(flow_run_context.parameters)}"


@served_flow(name="actors-curve", flow_run_name=actors_curve_run_name, persist_result=False, validate_parameters=True)
def actors_curve(
    workload: Workload | None = None,
    placement: Placement | None = None,
    seeds: list[int] | None = None,
    learned: str = LEARNED,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    resume_run_id: str | None = None,
) -> ActorsCurveResult:
    """I_k per round of the learned scheduler (greedy), with the return it drove.

    Reports the mean actor count over the first, middle and last third of each run: the paper
    saw many, fewer, more; this reports what appears, it does not force a shape
    (models/report/experiment_stats.py `phase_shape`).

    Args:
        workload: what every run is asked to do (default CartPole-v1 with its preset).
        placement: where the runs' actors run (default local).
        seeds: the seeds the learned scheduler runs on (default the held-out 100-104).
        learned: the learned scheduler: a file path, a packaged name (cartpole) or an MLflow URI.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested runs; default
            minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
        resume_run_id: the MLflow parent run of this experiment stopped before it finished
            (a crash, Ctrl-C): continue it with the same parameters; its finished runs are kept,
            not run again.
    """
    seeds = list(DEFAULT_HELD_OUT_SEEDS) if seeds is None else seeds
    workload = workload or Workload()
    with Experiment("actors_curve", workload, placement, {"seeds": seeds, "learned": learned}, tracking_uri,
                    experiment, checkpoint_dir, resume_run_id) as exp:
        exp.plan(len(seeds))
        runs = [exp.train(learned_spec(learned), seed, "learned") for seed in seeds]
        rows = [phase_row(seed, s) for seed, s in zip(seeds, runs, strict=True)]
        phase_means = list(mean_phases(rows))
        exp.tracker.log_metrics({"phase/early_mean": phase_means[0], "phase/middle_mean": phase_means[1],
                                 "phase/late_mean": phase_means[2]}, step=0)
        fig, (ax_a, ax_r) = plt.subplots(1, 2, figsize=(12, 4))
        for i, (seed, s) in enumerate(zip(seeds, runs, strict=True)):
            actor_steps(ax_a, s, color=f"C{i}", alpha=0.8, label=f"seed {seed}")
            ax_r.plot([h.mean_return for h in s.history], color=f"C{i}", alpha=0.8)
        curve = mean_curve([[h.actors for h in s.history] for s in runs])
        if curve:
            ax_a.plot(range(len(curve)), curve, "k--", label="mean")
        ax_a.set_xlabel("round k")
        ax_a.set_ylabel("actors I_k")
        ax_a.set_ylim(0, exp.setting("i_max") + 1)
        ax_a.legend(fontsize=7)
        ax_r.set_xlabel("round k")
        ax_r.set_ylabel("mean episode return")
        fig.suptitle(f"{workload.env}: learned scheduler ({learned}); mean I over thirds of the run: "
                     f"{phase_means[0]:.1f} / {phase_means[1]:.1f} / {phase_means[2]:.1f}", fontsize=9)
        md = (f"Mean actors over the first/middle/last third of the runs: {phase_means[0]:.2f} / "
              f"{phase_means[1]:.2f} / {phase_means[2]:.2f}. Shapes: "
              + ", ".join(f"seed {r.seed}: {r.shape}" for r in rows))
        plot = exp.publish(fig, rows, md, {"runs": [summary_record(s) for s in runs]})
        return ActorsCurveResult(exp.run_id, plot, [r.as_dict() for r in rows], phase_means)

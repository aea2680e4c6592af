"""The scalability figure: a round's latency, split into its parts, against the actor count.

    python -m flows.experiments scalability --env CartPole-v1 --actors 1 2 4 8 16 32
    python -m flows.experiments scalability --env QbertNoFrameskip-v4 --backend work-pool
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import Experiment
from flows.experiments.results import ScalabilityResult
from flows.served_flow import served_flow
from models.errors import ConfigError
from models.report.scalability import METRICS, PARTS, LatencyRow, latency_row
from models.run.workload import Placement, Workload, workload_env

UNREACHABLE_J = 1e12
NO_BUDGET_USD = 1e6
"""Every run plays all its rounds: no J ends it early, no budget holds back a wide round."""


def scalability_run_name() -> str:
    return f"scalability-{workload_env(flow_run_context.parameters)}"


@served_flow(name="scalability", flow_run_name=scalability_run_name, persist_result=False, validate_parameters=True)
def scalability(
    workload: Workload | None = None, placement: Placement | None = None, actors: list[int] | None = None,
    rounds: int = 4, seed: int = 100, tracking_uri: str | None = None, experiment: str | None = None,
    checkpoint_dir: str | None = None, resume_run_id: str | None = None,
) -> ScalabilityResult:
    """Round latency on the cloud clock split into dispatch, start-up, weight load, sampling, upload,
    the wait for the slowest actor, the learner and the orchestration, against the actor count
    (the paper's scalability figure): one Fixed(N) run per N, `rounds` rounds each, the rounds
    after the first averaged (the first pays the learner's and the pool's start-up).

    Args:
        workload: what every run does (default CartPole-v1 with its preset); J and the budget do
            not apply (every run plays its rounds).
        placement: where the actors run: the local pool (default) or a work pool (--backend work-pool).
        actors: the actor counts (default 1, 2, 4, 8, 16, 32).
        rounds: rounds per run (at least 2).
        seed: the runs' seed (default 100, held out).
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment; default minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
        resume_run_id: the MLflow parent run of this experiment stopped before it finished:
            continue it with the same parameters; its finished runs are kept.
    """
    counts = list(actors or (1, 2, 4, 8, 16, 32))
    if rounds < 2 or not counts or min(counts) < 1:
        raise ConfigError("scalability needs rounds >= 2 and actor counts >= 1")
    workload = (workload or Workload()).with_values(target_return=UNREACHABLE_J, budget_usd=NO_BUDGET_USD,
                                                    max_rounds=rounds, i_max=max(counts))
    with Experiment("scalability", workload, placement, {"actors": counts, "rounds": rounds, "seed": seed},
                    tracking_uri, experiment, checkpoint_dir, resume_run_id) as exp:
        exp.plan(len(counts))
        rows: list[LatencyRow] = []
        for n in counts:
            summary = exp.train(f"fixed:{n}", seed)
            history = {m: [x.value for x in sorted(exp.tracker.client.get_metric_history(summary.run_id, m),
                                                   key=lambda x: x.step)] for m in METRICS}
            rows.append(latency_row(n, history))
        fig, ax = plt.subplots(figsize=(9, 4.5))
        bottom = [0.0] * len(rows)
        for i, part in enumerate(PARTS):
            heights = [r.part(part) for r in rows]
            ax.bar([str(r.actors) for r in rows], heights, bottom=bottom, label=part.removesuffix("_s"),
                   color=f"C{i}")
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_xlabel("actors per round")
        ax.set_ylabel("mean round latency, cloud clock (s)")
        ax.legend(fontsize=7, ncol=2)
        backend = exp.placement.backend or "local"
        ax.set_title(f"{workload.env}, {backend} backend: a round's parts against its actors (rounds 2-{rounds})",
                     fontsize=9)
        md = (f"{workload.env} on the {backend} backend, seed {seed}: each N a Fixed(N) run of {rounds} rounds, "
              "rounds after the first averaged; the parts add up to the round's cloud time.")
        plot = exp.publish(fig, rows, md, {"parts": list(PARTS)})
        return ScalabilityResult(exp.run_id, plot, [r.as_dict() for r in rows])

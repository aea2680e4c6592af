"""The paper's Table 2: the learned scheduler vs Max vs Adapt vs the server-based fixed cluster,
and vs the best Fixed(N) in hindsight (a sweep of N, same seeds).

    python -m flows.experiments compare --seeds 100 101 102 103 104
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from prefect import get_run_logger
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import LEARNED, Experiment, actor_steps, bars, learned_spec
from flows.experiments.results import CompareResult
from flows.impact import prepare_impact
from flows.served_flow import served_flow
from models.billing.cost import PriceTable
from models.errors import ConfigError
from models.impact.progress import ImpactSummary
from models.report.experiment_stats import (
    DEFAULT_HELD_OUT_SEEDS,
    FIXED_SWEEP,
    AggregateRow,
    aggregate,
    aggregate_impact,
    best_fixed,
    fixed_sweep,
    judge_against_best_fixed,
    metric_label,
    row_metrics,
    same_schedule_as,
    seeds_note,
    stripped,
)
from models.run.config import SYSTEM_CLUSTER
from models.run.records import RunSummary
from models.run.workload import Placement, Workload, workload_env

CLUSTER_BUDGET_USD = 1e6
"""The cluster baseline is priced, not held to B (its start-up alone exceeds CartPole's B)."""


@dataclass
class CompareRuns:
    """What a compare ran: each row's scheduler spec and its summaries, one per seed."""

    specs: dict[str, str]
    runs: dict[str, list[RunSummary]] = field(default_factory=dict)
    cluster: list[RunSummary] = field(default_factory=list)
    impact: list[ImpactSummary] = field(default_factory=list)
    same_as_max: str | None = None
    """Max is Fixed(i_max): its runs stand for that count of the sweep, run once."""
    with_impact: bool = False


def compare_run_name() -> str:
    return f"compare-{workload_env(flow_run_context.parameters)}"


@served_flow(name="compare-schedulers", flow_run_name=compare_run_name, persist_result=False, validate_parameters=True)
def compare_schedulers(
    workload: Workload | None = None, placement: Placement | None = None, seeds: list[int] | None = None,
    learned: str = LEARNED, more_learned: dict[str, str] | None = None, baselines: list[str] | None = None,
    sweep: list[int] | None = None, tracking_uri: str | None = None, experiment: str | None = None,
    checkpoint_dir: str | None = None, resume_run_id: str | None = None,
) -> CompareResult:
    """Time and cost to J for the learned scheduler, Max, Adapt, the server-based fixed cluster
    and IMPACT, mean and std over seeds (the paper's Table 2; BENCHMARKS.md). Time is the cloud
    clock for every row (one core per actor: P_k plus each round's orchestration), this machine's
    wall beside it (CLOCK_LEGEND).

    IMPACT (the `impact` flow, nested) has no rounds: its cloud time comes from the virtual-time
    executor with the price table's actor cores, and it is billed as the server cluster it needs
    (with and without start-up). The server-based rows are real `system=server-cluster` runs on
    the same seeds (the price table's cluster, its actor_cores every round), billed for their
    cloud time with and without the cluster's start-up, not held to B. The best Fixed(N) of the sweep in hindsight (cheapest that reached J on every seed) is a
    row of its own, and each learned scheduler is judged against it: cost within 5% at no more time.

    Args:
        workload: what every run is asked to do (default CartPole-v1 with its preset).
        placement: where the runs' actors run (default local).
        seeds: the seeds every scheduler runs on (default the held-out 100-104).
        learned: the learned scheduler: a file path, a packaged name (cartpole) or an MLflow URI.
        more_learned: other learned schedulers, each a row of its own judged as `learned` is:
            label -> checkpoint, e.g. {"scratch": "hopper-scratch.pt", "zero-shot": "cartpole-v2"}.
        baselines: the other systems (default max, adapt and impact): `train` scheduler specs, and
            impact for the IMPACT baseline (flows/impact.py, its preset for env, the same J).
        sweep: the N of the Fixed(N) runs (default 1, 2, 4, 8, 16, 32 up to i_max; [] for none).
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested runs; default minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
        resume_run_id: the MLflow parent run of a compare stopped before it finished: continue it
            with the same parameters; its finished runs are kept, not run again.
    """
    workload = workload or Workload()
    seeds = list(DEFAULT_HELD_OUT_SEEDS) if seeds is None else seeds
    baselines = ["max", "adapt", "impact"] if baselines is None else baselines
    more_learned = dict(more_learned or {})
    clash = sorted(label for label in more_learned
                   if label in {"learned", *baselines, "server cluster"} or label.startswith("fixed:"))
    if clash:
        raise ConfigError(f"more_learned labels {clash} are taken by other rows; choose other labels")
    if "impact" in baselines:  # bad IMPACT input (an image env, a price file) is refused before any run
        for seed in seeds:
            prepare_impact({**workload.for_impact(), "seed": seed})
    params = {"seeds": seeds, "learned": learned, "more_learned": more_learned, "baselines": baselines,
              "sweep": sweep}
    with Experiment("compare_schedulers", workload, placement, params, tracking_uri, experiment, checkpoint_dir,
                    resume_run_id) as exp:
        done = run_compare(exp, seeds, plan_specs(exp, learned, more_learned, baselines, sweep))
        rows = table_rows(done, prepare_impact(exp.impact_parameters(seeds[0])).impact.actors if done.impact else 0)
        return publish_compare(exp, done, rows, ("learned", *more_learned), seeds)


def plan_specs(exp: Experiment, learned: str, more_learned: dict[str, str], baselines: list[str],
               sweep: list[int] | None) -> CompareRuns:
    """Each row's scheduler: the learned ones, the baselines, the Fixed(N) sweep (Max's count once)."""
    i_max = exp.setting("i_max")
    specs = {"learned": learned_spec(learned)}
    specs.update({label: learned_spec(ref) for label, ref in more_learned.items()})
    specs.update({b: b for b in baselines if b != "impact"})
    sweep_specs = fixed_sweep(i_max, FIXED_SWEEP if sweep is None else sweep)
    same_as_max = f"fixed:{i_max}" if "max" in specs and f"fixed:{i_max}" in sweep_specs else None
    for spec in sweep_specs:
        if spec != same_as_max:
            specs.setdefault(spec, spec)
    return CompareRuns(specs, same_as_max=same_as_max, with_impact="impact" in baselines)


def run_compare(exp: Experiment, seeds: list[int], done: CompareRuns) -> CompareRuns:
    """Every row on every seed, then the server cluster's run and IMPACT's."""
    logger = get_run_logger()
    with_impact = done.with_impact
    done.runs = {label: [] for label in done.specs}
    cluster, cluster_placement = cluster_workload(exp.workload, exp.placement)
    exp.plan(len(seeds) * (len(done.specs) + 1 + with_impact))  # + the server cluster's (and IMPACT's) run per seed
    for seed in seeds:
        for label, spec in done.specs.items():
            s = exp.train(spec, seed, label)
            done.runs[label].append(s)
            logger.info("%s seed %d: %s in %d rounds, time %.2fs, cost $%.5f", label, seed,
                        s.stop_reason, s.rounds, s.time_to_stop_s, s.cost_usd)
        done.cluster.append(exp.train(f"fixed:{cluster.i_max}", seed, "server cluster", workload=cluster,
                                      placement=cluster_placement, system=SYSTEM_CLUSTER))
        if with_impact:
            done.impact.append(exp.impact(seed))
    if done.same_as_max:
        done.runs[done.same_as_max] = done.runs["max"]
        done.specs[done.same_as_max] = done.same_as_max
    return done


def table_rows(done: CompareRuns, impact_actors: int) -> list[AggregateRow]:
    """One row per scheduler, the server cluster with and without start-up, IMPACT, the best fixed."""
    rows = [aggregate(label, done.runs[label]) for label in done.specs]
    rows.append(aggregate("server cluster", done.cluster, cost_key="server_cluster_cost_usd"))
    # the cluster's start-up is an assumed price-table value: report the cluster without it too
    rows.append(aggregate("server cluster without start-up", done.cluster,
                          cost_key="server_cluster_cost_no_startup_usd"))
    if done.impact:  # IMPACT has no rounds, so no P_k: its cloud time is its executor's
        for label, key in (("impact", "server_cluster_cost_usd"),
                           ("impact without start-up", "server_cluster_cost_no_startup_usd")):
            rows.append(aggregate_impact(label, done.impact, impact_actors, cost_key=key))
    best = best_fixed(rows)
    if best is not None:
        rows.append(dataclasses.replace(best, label=f"best fixed ({best.label})"))
    return rows


def publish_compare(exp: Experiment, done: CompareRuns, rows: list[AggregateRow], learned_labels: tuple[str, ...],
                    seeds: list[int]) -> CompareResult:
    """The judged figures as metrics, the plot, the table and results.json."""
    by = {r.label: r for r in rows}
    best = best_fixed([r for r in rows if not r.label.startswith("best fixed (")])
    metrics = row_metrics(rows, ("time_s_mean", "time_s_std", "cost_usd_mean", "cost_usd_std"))
    metrics.update({f"{metric_label(r.label)}/reached_frac": r.reached_frac for r in rows})
    checks = {}
    for label in learned_labels:
        judged_metrics, judged_checks = judge_learned(label, by, best)
        metrics.update(judged_metrics)
        checks.update(judged_checks)
    # a learned scheduler that is a constant Fixed(N): its gap to that row is the machine's noise
    twins = {label: same_schedule_as(done.runs[label], done.runs) for label in learned_labels}
    twins = {label: fixed for label, fixed in twins.items() if fixed is not None}
    for label, fixed in twins.items():
        get_run_logger().info("%s chose the same actors in every round as %s on every seed", label, fixed)
    exp.tracker.log_metrics(metrics, step=0)
    fig, (ax_t, ax_c, ax_a) = plt.subplots(1, 3, figsize=(16, 4))
    bars(ax_t, rows, "time_s", "time to stop, cloud clock (s)")
    bars(ax_c, rows, "cost_usd", "cost (USD)")
    ax_c.set_yscale("log")
    learned_schedules(ax_a, {label: done.runs[label] for label in learned_labels}, exp.setting("i_max"))
    fig.suptitle(f"{exp.env}: schedulers over seeds {seeds} (mean ± std; reached J: "
                 + ", ".join(f"{r.label} {r.reached}/{r.runs}" for r in rows) + ")", fontsize=9)
    md = ("Every row's time is on the cloud clock (IMPACT's from its virtual-time executor: it has "
          "no rounds, so no P_k). Serverless cost bills execution seconds (actors, the learner on its "
          "own device per round, start-up); cost_resident_learner_usd_mean is the same runs with the "
          "learner's container resident for the run. The server cluster, and IMPACT on it, are billed "
          "for all their cloud time, their learner VM the one for the learner's device, shown with "
          f"and without the cluster's assumed start-up. {seeds_note(seeds)}\n\n"
          + "\n".join(f"- {k}: {'yes' if v else 'no'}" for k, v in checks.items())
          + "".join(f"\n- {label} chose the same actors in every round as {fixed} on every seed: "
                    "the same training, so their cost and time differ only by this machine's noise"
                    for label, fixed in twins.items()))
    runs = {**done.runs, "server cluster": done.cluster}
    results = {"metrics": metrics, "checks": checks, "same_schedule_as": twins, "runs": stripped(runs),
               "impact_runs": [dataclasses.asdict(s) for s in done.impact]}
    plot = exp.publish(fig, rows, md, results)
    return CompareResult(exp.run_id, plot, [r.as_dict() for r in rows], metrics, checks, twins, runs, done.impact)


def learned_schedules(ax, runs: dict[str, list[RunSummary]], i_max: int) -> None:
    """Issue 13's point 2: each learned scheduler's actors per round, one line per seed."""
    for i, (label, summaries) in enumerate(runs.items()):
        for j, s in enumerate(summaries):
            actor_steps(ax, s, color=f"C{i}", alpha=0.7, label=label if j == 0 else None)
    ax.set_xlabel("round k")
    ax.set_ylabel("actors I_k (learned, every seed)")
    ax.set_ylim(0, i_max + 1)
    ax.legend(fontsize=7)


def judge_learned(label: str, by: dict[str, AggregateRow], best: AggregateRow | None
                  ) -> tuple[dict[str, float], dict[str, bool]]:
    """Issue 13's figures of the learned scheduler `label` against Max, Adapt and the best fixed
    count: metrics `<label>_vs_<row>/<cost|time>_ratio` and yes/no checks. The primary learned
    scheduler keeps the plain names (`learned_vs_max/...`; checks without a prefix)."""
    mine, prefix = by[label], "" if label == "learned" else f"{label}: "
    name = metric_label(label)
    metrics: dict[str, float] = {}
    checks: dict[str, bool] = {}
    if "max" in by:
        metrics[f"{name}_vs_max/cost_ratio"] = mine.cost_usd_mean / by["max"].cost_usd_mean
        metrics[f"{name}_vs_max/time_ratio"] = mine.time_s_mean / by["max"].time_s_mean
        checks[f"{prefix}cost <= 0.56 x Max"] = metrics[f"{name}_vs_max/cost_ratio"] <= 0.56
        checks[f"{prefix}time <= 1.1 x Max"] = metrics[f"{name}_vs_max/time_ratio"] <= 1.1
    if "adapt" in by:
        metrics[f"{name}_vs_adapt/time_ratio"] = mine.time_s_mean / by["adapt"].time_s_mean
        checks[f"{prefix}time <= 0.6 x Adapt"] = metrics[f"{name}_vs_adapt/time_ratio"] <= 0.6
    if best is not None:
        metrics[f"{name}_vs_best_fixed/cost_ratio"] = mine.cost_usd_mean / best.cost_usd_mean
        metrics[f"{name}_vs_best_fixed/time_ratio"] = mine.time_s_mean / best.time_s_mean
        checks.update({f"{prefix}{k}": v for k, v in judge_against_best_fixed(mine, best).items()})
    return metrics, checks


def cluster_workload(workload: Workload, placement: Placement) -> tuple[Workload, Placement]:
    """A workload run as the server cluster: Fixed(actor cores) on the local backend's persistent
    workers (the workload's actor range and placement do not apply to it; its learner device
    does); its i_max is the cluster's actor cores, its budget unbounded."""
    cores = PriceTable.load(workload.prices_file).server_actor_cores
    return (workload.with_values(i_max=cores, budget_usd=CLUSTER_BUDGET_USD),
            Placement(learner_device=placement.learner_device))

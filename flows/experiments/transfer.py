"""Scheduler transfer: fine-tune the packaged CartPole-v1 scheduler on another env vs train one
there from scratch (flows/scheduler_flows.py), then evaluate both.

    python -m flows.experiments transfer --env Acrobot-v1
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import matplotlib.pyplot as plt
from prefect import get_run_logger
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import LEARNED, Experiment, bars, learned_spec
from flows.experiments.results import TransferResult
from flows.scheduler_flows import DEFAULT_I_MAX, finetune_scheduler, scheduler_target, train_scheduler
from flows.served_flow import served_flow
from models.report.experiment_stats import aggregate, row_metrics, stripped
from models.run.workload import Placement, Workload, workload_env
from models.scheduling.training import SchedulerTrainingResult

TRANSFER_ENV = "Acrobot-v1"


def transfer_run_name() -> str:
    return f"transfer-to-{workload_env(flow_run_context.parameters, TRANSFER_ENV)}"


@served_flow(name="scheduler-transfer", flow_run_name=transfer_run_name, persist_result=False, validate_parameters=True)
def scheduler_transfer(
    workload: Workload | None = None, placement: Placement | None = None, source: str = LEARNED,
    finetune_episodes: int = 10, scratch_episodes: int | None = None, batch_episodes: int = 2,
    eval_seeds: list[int] | None = None, seed: int = 0, tracking_uri: str | None = None,
    experiment: str | None = None, checkpoint_dir: str | None = None,
) -> TransferResult:
    """Fine-tune `source` (default the packaged CartPole-v1 scheduler) on the workload for
    `finetune_episodes` against a scheduler trained there from scratch for `scratch_episodes`
    (default: as many; the paper: 10 vs 100), then evaluate both greedy, and the untouched
    source zero-shot, on the held-out eval_seeds. Reports scheduler-training wall time.

    Both trainings see the same workload seeds (seed + episode); J is the workload's
    target_return, else the env's preset target, else gymnasium's reward_threshold (Acrobot-v1:
    -100), for the training episodes and the evaluation alike.

    Args:
        workload: the target workload (default Acrobot-v1 with its preset).
        placement: where the runs' actors run (default local).
        source: the scheduler to fine-tune: a file path, a packaged name (cartpole) or an MLflow URI.
        finetune_episodes: fine-tuning episodes on the workload (the paper: 10).
        scratch_episodes: episodes of the scheduler trained there from scratch (default as many
            as finetune_episodes; the paper: 100).
        batch_episodes: episodes per PPO update of either scheduler.
        eval_seeds: held-out workload seeds the schedulers are evaluated on (default 1000-1002).
        seed: first workload seed of the training episodes (episode e uses seed + e).
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment of the parent run and its nested runs; default minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
    """
    eval_seeds = [1000, 1001, 1002] if eval_seeds is None else eval_seeds
    scratch_episodes = finetune_episodes if scratch_episodes is None else scratch_episodes
    workload = workload or Workload(env=TRANSFER_ENV)
    workload = workload.with_values(i_max=workload.i_max or DEFAULT_I_MAX)
    workload = workload.with_values(target_return=scheduler_target(workload, placement))
    params = {"source": source, "finetune_episodes": finetune_episodes, "scratch_episodes": scratch_episodes,
              "eval_seeds": eval_seeds}
    with Experiment("scheduler_transfer", workload, placement, params, tracking_uri, experiment,
                    checkpoint_dir) as exp:
        # each scheduler-training episode is one training run (inside its flow), then three evaluated
        # schedulers (fine-tuned, scratch, zero-shot) on every eval seed
        exp.plan(finetune_episodes + scratch_episodes + 3 * len(eval_seeds))
        common = {"workload": workload, "placement": placement, "batch_episodes": batch_episodes, "seed": seed,
                  "tracking_uri": exp.tracker.tracking_uri, "checkpoint_dir": checkpoint_dir}
        trained = {"finetuned": finetune_scheduler(source=source, episodes=finetune_episodes, **common),
                   "scratch": train_scheduler(episodes=scratch_episodes, **common)}
        for label, result in trained.items():
            exp.count_done(result.episodes_done, f"{label} scheduler trained, "
                           f"{result.episodes_done} episodes in {result.wall_s:.0f} s")
        get_run_logger().info("scheduler training wall time: fine-tune %.0fs, scratch %.0fs",
                              trained["finetuned"].wall_s, trained["scratch"].wall_s)
        candidates = {"finetuned": trained["finetuned"].checkpoint, "scratch": trained["scratch"].checkpoint,
                      "zero-shot": source}
        evals = {label: [exp.train(learned_spec(ref), s, label) for s in eval_seeds]
                 for label, ref in candidates.items()}
        return publish_transfer(exp, trained, evals, source, finetune_episodes, scratch_episodes, eval_seeds)


def publish_transfer(exp: Experiment, trained: dict[str, SchedulerTrainingResult], evals: dict[str, list],
                     source: str, finetune_episodes: int, scratch_episodes: int,
                     eval_seeds: list[int]) -> TransferResult:
    """The table (each scheduler's evaluation with its training wall time), the plot, results.json."""
    rows = [aggregate(label, summaries).with_columns(
                scheduler_training_wall_s=trained[label].wall_s if label in trained else 0.0,
                scheduler_episodes=trained[label].episodes_done if label in trained else 0)
            for label, summaries in evals.items()]
    exp.tracker.log_metrics(row_metrics(rows, ("time_s_mean", "cost_usd_mean", "scheduler_training_wall_s")), step=0)
    fig, (ax_l, ax_t, ax_c) = plt.subplots(1, 3, figsize=(15, 4))
    for i, (label, res) in enumerate(trained.items()):
        ax_l.plot([e.episode for e in res.episodes], [e.reward for e in res.episodes],
                  "o-", color=f"C{i}", label=f"{label} ({res.wall_s:.0f}s)")
    ax_l.set_xlabel("scheduler episode")
    ax_l.set_ylabel("episode reward")
    ax_l.legend()
    bars(ax_t, rows, "time_s", "time to stop, cloud clock (s)")
    bars(ax_c, rows, "cost_usd", "cost (USD)")
    fig.suptitle(f"{exp.env} (J = {exp.workload.target_return}): fine-tune {Path(source).name} for "
                 f"{finetune_episodes} episodes vs {scratch_episodes} from scratch; evaluated greedy on seeds "
                 f"{eval_seeds}", fontsize=9)
    tuned, scratch = trained["finetuned"], trained["scratch"]
    saved = 1 - tuned.wall_s / scratch.wall_s if scratch.wall_s > 0 else math.nan
    md = (f"Scheduler training wall time: fine-tune {tuned.wall_s:.0f}s vs scratch "
          f"{scratch.wall_s:.0f}s ({saved:.0%} less).")
    plot = exp.publish(fig, rows, md, {"finetune": dataclasses.asdict(tuned),
                                       "scratch": dataclasses.asdict(scratch), "evals": stripped(evals)})
    return TransferResult(exp.run_id, plot, [r.as_dict() for r in rows], tuned, scratch)

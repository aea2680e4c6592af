"""The paper's experiments as flows, one module each.

Each flow owns one MLflow parent run in one experiment (default `minionsrl-experiments`); every
training run it starts is nested under it, so the runs compare side by side in the MLflow UI.
Each ends with a plot saved as an MLflow artifact (plots/<name>.png) and as Prefect artifacts
(a table, a markdown summary and the image).

    python -m flows.experiments compare --seeds 100 101 102 103 104  # learned vs Max vs Adapt vs cluster vs IMPACT
    python -m flows.experiments motivation                    # Fixed vs Increase vs Decrease
    python -m flows.experiments actors-curve                  # the learned scheduler's I_k
    python -m flows.experiments transfer --env Acrobot-v1     # fine-tune the packaged CartPole
                                                              # scheduler vs from scratch, 10 episodes each
    python -m flows.experiments table2                        # Table 2 over workloads x systems x seeds, cached
    python -m flows.experiments scalability --env Hopper-v5   # a round's parts against 1-32 actors

- common.py: the `Experiment` context (parent MLflow run, nested `train` runs, publishing), plots
- compare.py `compare_schedulers`, motivation.py `motivation`, actors_curve.py `actors_curve`,
  transfer.py `scheduler_transfer`, table2.py `table2`, scalability.py `scalability`: the flows (Prefect entrypoints
  `flows/experiments/<module>.py:<flow>`)
- results.py: what each flow returns (`CompareResult`, `MotivationResult`, `ActorsCurveResult`,
  `TransferResult`: the table, the parent run and plot, the runs behind them)
- cli.py (and __main__.py): the command line
- the statistics and tables they publish: models/report/experiment_stats.py (pure)

Times are on the cloud clock (each round's P_k, one core per actor, plus its measured
orchestration; IMPACT's from its virtual-time executor), this machine's wall beside them.
"""

from flows.experiments.actors_curve import actors_curve
from flows.experiments.cli import main
from flows.experiments.common import DEFAULT_EXPERIMENT, LEARNED, Experiment, learned_spec
from flows.experiments.compare import compare_schedulers
from flows.experiments.motivation import motivation
from flows.experiments.transfer import scheduler_transfer

__all__ = ["DEFAULT_EXPERIMENT", "LEARNED", "Experiment", "actors_curve", "compare_schedulers", "learned_spec",
           "main", "motivation", "scheduler_transfer"]

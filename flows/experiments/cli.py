"""The experiments' command line: `python -m flows.experiments compare|motivation|actors-curve|transfer`.

The workload options (--i-max, --target-return, ..., --tracking-uri) are flows/scheduler_flows.py's.
"""

from __future__ import annotations

import argparse

from deployments.local_api import prefect_api
from flows import prefect_patches
from flows.cli import quiet_console
from flows.experiments.actors_curve import actors_curve
from flows.experiments.common import LEARNED
from flows.experiments.compare import compare_schedulers
from flows.experiments.motivation import motivation
from flows.experiments.transfer import scheduler_transfer
from flows.scheduler_flows import add_workload_arguments, workload_arguments
from models.report.experiment_stats import markdown_table

COMMANDS = ("compare", "motivation", "actors-curve", "transfer")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.experiments",
                                description="Run one of the paper's experiments (BENCHMARKS.md).")
    p.add_argument("experiment", choices=COMMANDS)
    p.add_argument("--env", help="default: CartPole-v1 (transfer: Acrobot-v1)")
    p.add_argument("--seeds", type=int, nargs="*", help="the runs' seeds (transfer: evaluation seeds)")
    p.add_argument("--learned", default=LEARNED,
                   help="scheduler checkpoint (path, packaged name or MLflow URI); transfer: the source")
    p.add_argument("--finetune-episodes", type=int, default=10)
    p.add_argument("--scratch-episodes", type=int, help="default: as many as --finetune-episodes")
    p.add_argument("--batch-episodes", type=int, help="transfer: episodes per scheduler update (2)")
    p.add_argument("--baselines", nargs="*",
                   help="compare: the other systems (default max adapt impact; none: --baselines)")
    p.add_argument("--sweep", type=int, nargs="*",
                   help="compare: the N of the Fixed(N) sweep (default 1 2 4 8 16 32; none: --sweep)")
    p.add_argument("--more-learned", nargs="*", metavar="LABEL=CHECKPOINT", type=labelled,
                   help="compare: more learned schedulers, each a row judged as --learned is "
                        "(e.g. scratch=hopper-scratch.pt zero-shot=cartpole-v2)")
    p.add_argument("--resume-run-id", help="compare, motivation, actors-curve: the MLflow parent run of "
                                           "the same command stopped before it finished; its finished runs are kept")
    p.add_argument("--experiment-name")
    p.add_argument("--verbose", action="store_true", help="show every task run's and round's log lines too")
    add_workload_arguments(p)
    return p


def labelled(text: str) -> tuple[str, str]:
    """'label=checkpoint' -> (label, checkpoint)."""
    label, sep, ref = text.partition("=")
    if not sep or not label.strip() or not ref.strip():
        raise argparse.ArgumentTypeError(f"expected LABEL=CHECKPOINT, got {text!r}")
    return label.strip(), ref.strip()


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.resume_run_id and args.experiment == "transfer":
        cli.error("transfer cannot be resumed as a whole: resume its scheduler trainings with "
                  "`python -m flows.scheduler_flows train --resume-run-id`")
    if args.more_learned and args.experiment != "compare":
        cli.error("--more-learned is for compare")
    prefect_patches.install()
    quiet_console(args.verbose)  # one line per round and per run; everything still reaches Prefect
    more = ("env", "batch_episodes") if args.experiment == "transfer" else ("env",)
    options = {"experiment": args.experiment_name, **workload_arguments(args, *more)}
    with prefect_api():
        if args.experiment == "compare":
            result = compare_schedulers(seeds=args.seeds, learned=args.learned,
                                        more_learned=dict(args.more_learned or []), baselines=args.baselines,
                                        sweep=args.sweep, resume_run_id=args.resume_run_id, **options)
        elif args.experiment == "motivation":
            result = motivation(seeds=args.seeds, resume_run_id=args.resume_run_id, **options)
        elif args.experiment == "actors-curve":
            result = actors_curve(seeds=args.seeds, learned=args.learned, resume_run_id=args.resume_run_id,
                                  **options)
        else:
            result = scheduler_transfer(source=args.learned, finetune_episodes=args.finetune_episodes,
                                        scratch_episodes=args.scratch_episodes, eval_seeds=args.seeds,
                                        **options)
    print(markdown_table(result.rows))
    print(f"\nplot: {result.plot} (MLflow parent run {result.run_id})")
    return 0

"""The experiments' command line: `python -m flows.experiments compare|motivation|actors-curve|transfer|table2|scalability`.

Each command's options are its flow's parameters, generated (flows/cli.py): the workload's and the
placement's fields (--env, --target-return, ..., --backend) and the flow's own (--seeds, ...).
"""

from __future__ import annotations

import argparse
import sys

from deployments.local_api import prefect_api
from flows import interrupts, prefect_patches
from flows.cli import flow_arguments, flow_call, quiet_console
from flows.experiments.actors_curve import actors_curve
from flows.experiments.compare import compare_schedulers
from flows.experiments.motivation import motivation
from flows.experiments.scalability import scalability
from flows.experiments.table2 import table2
from flows.experiments.transfer import scheduler_transfer
from models.report.experiment_stats import CLOCK_LEGEND, markdown_table

FLOWS = {"compare": compare_schedulers, "motivation": motivation, "actors-curve": actors_curve,
         "transfer": scheduler_transfer, "table2": table2, "scalability": scalability}
COMMANDS = tuple(FLOWS)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.experiments",
                                description="Run one of the paper's experiments (BENCHMARKS.md).")
    commands = p.add_subparsers(dest="command", required=True)
    for name, experiment_flow in FLOWS.items():
        sub = commands.add_parser(name, description=(experiment_flow.fn.__doc__ or "").split("\n\n", 1)[0])
        flow_arguments(sub, experiment_flow.fn)
        sub.add_argument("--verbose", action="store_true", help="show every task run's and round's log lines too")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    prefect_patches.install()
    quiet_console(args.pop("verbose"))  # one line per round and per run; everything still reaches Prefect
    experiment_flow = FLOWS[args.pop("command")]
    with interrupts.stop_on_interrupt():
        try:
            with prefect_api():
                result = experiment_flow(**flow_call(args, experiment_flow.fn))
        except KeyboardInterrupt as exc:  # Ctrl-C: the run in flight stopped; resume with --resume-run-id
            print(f"stopped: {exc or 'interrupted (Ctrl-C)'}; continue with --resume-run-id", file=sys.stderr)
            return interrupts.EXIT_INTERRUPTED
    print(f"{CLOCK_LEGEND}\n")
    print(markdown_table(result.rows))
    print(f"\nplot: {result.plot} (MLflow parent run {result.run_id})")
    return 0

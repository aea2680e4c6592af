"""The train command line: generated from the flow, and quiet on the console by default."""

from __future__ import annotations

import argparse
import logging

from flows.cli import _RoundChatter, flow_arguments


def test_every_flow_parameter_is_an_option_with_its_docstring_help():
    import inspect

    from flows.train import train

    parser = argparse.ArgumentParser()
    flow_arguments(parser, train.fn)
    options = {a.dest: a for a in parser._actions if a.dest != "help"}
    assert set(options) == set(inspect.signature(train.fn).parameters)
    # each help is the docstring of the field the parameter fills: written once, where the field is
    from flows.cli import field_docs
    from models.run.config import RunConfig
    from models.run.workload import Placement, Workload

    assert options["target_return"].help == field_docs(Workload)["target_return"].replace("%", "%%")
    assert options["local_workers"].help == field_docs(Placement)["local_workers"]
    assert options["quorum"].help == field_docs(RunConfig)["quorum"]
    args = parser.parse_args(["--max-rounds", "3", "--ppo", '{"gamma": 0.9}', "--quorum", "0.5"])
    assert (args.max_rounds, args.ppo, args.quorum, args.env) == (3, {"gamma": 0.9}, 0.5, None)


def record(name: str, level: int, flow_run_name: str | None = None) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 1, "Finished in state Completed()", None, None)
    if flow_run_name:
        rec.flow_run_name = flow_run_name
    return rec


def test_round_chatter_stays_off_the_console_but_warnings_and_the_round_line_do_not():
    chatter = _RoundChatter()
    assert not chatter.filter(record("prefect.task_runs", logging.INFO))
    assert not chatter.filter(record("prefect.flow_runs", logging.INFO, "round-3-x8"))
    assert chatter.filter(record("prefect.flow_runs", logging.INFO, "CartPole-v1-fixed8-seed0"))
    assert chatter.filter(record("prefect.task_runs", logging.WARNING))
    assert chatter.filter(record("prefect.flow_runs", logging.ERROR, "round-3-x8"))

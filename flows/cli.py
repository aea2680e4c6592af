"""Command lines generated from a flow's signature, so a flow's parameters and its CLI cannot drift.

Each parameter becomes `--name-with-dashes`, typed from its annotation (a dict is JSON, a list
takes several values, a bool is a switch), with the help text of its `Args:` entry in the flow's
docstring; a dataclass parameter (Workload, Placement) becomes one option per field, helped by the
field's docstring. Unset options stay None, so the flow's own defaults apply.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any


def flow_arguments(parser: argparse.ArgumentParser, fn: Callable[..., Any], exclude: tuple[str, ...] = ()) -> None:
    """Add one option per parameter of `fn` (a flow's function: `flow.fn`), but `exclude`d ones. A
    parameter typed as a dataclass (a Workload, a Placement) gets one option per field instead,
    with its field's docstring as help; `flow_call` puts them back together."""
    hints = typing.get_type_hints(fn)
    helps = docstring_args(fn.__doc__ or "")
    for name in inspect.signature(fn).parameters:
        if name in exclude:
            continue
        group = _dataclass_of(hints.get(name, str))
        if group is None:
            _add_option(parser, name, hints.get(name, str), helps.get(name))
            continue
        field_hints, field_helps = typing.get_type_hints(group), field_docs(group)
        for field in dataclasses.fields(group):
            _add_option(parser, field.name, field_hints[field.name],
                        field_helps.get(field.name, "").replace("%", "%%"))


def flow_call(args: Mapping[str, Any], fn: Callable[..., Any]) -> dict[str, object]:
    """The keyword arguments of `fn` from parsed options (flow_arguments'): the set ones, with a
    dataclass parameter's fields gathered into its instance (None when none of them was given)."""
    hints = typing.get_type_hints(fn)
    call: dict[str, object] = {}
    for name in inspect.signature(fn).parameters:
        group = _dataclass_of(hints.get(name, str))
        if group is None:
            if args.get(name) is not None:
                call[name] = args[name]
            continue
        values = {f.name: args[f.name] for f in dataclasses.fields(group) if args.get(f.name) is not None}
        if values:
            call[name] = group(**values)
    return call


def _add_option(parser: argparse.ArgumentParser, name: str, hint: Any, help_text: str | None) -> None:
    flag = f"--{name.replace('_', '-')}"
    hint = _without_none(hint)
    if hint is bool:  # `--flag` alone is true; `--flag false` says so
        parser.add_argument(flag, dest=name, default=None, nargs="?", const=True,
                            type=_parser_for(name, bool), help=help_text)
    elif typing.get_origin(hint) is dict and typing.get_args(hint) == (str, str):  # LABEL=VALUE pairs
        parser.add_argument(flag, dest=name, default=None, nargs="*", metavar="KEY=VALUE", action=_Pairs,
                            help=help_text)
    elif typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        parser.add_argument(flag, dest=name, default=None, nargs="*", type=_parser_for(name, item), help=help_text)
    else:
        parser.add_argument(flag, dest=name, default=None, type=_parser_for(name, hint), help=help_text)


class _Pairs(argparse.Action):
    """KEY=VALUE words as a dict (a `dict[str, str]` parameter)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        pairs = {}
        for text in values or []:
            key, sep, value = text.partition("=")
            if not sep or not key.strip() or not value.strip():
                parser.error(f"{option_string}: expected KEY=VALUE, got {text!r}")
            pairs[key.strip()] = value.strip()
        setattr(namespace, self.dest, pairs)


def _without_none(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _dataclass_of(hint: Any) -> type | None:
    hint = _without_none(hint)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def given_arguments(values: Mapping[str, object], exclude: tuple[str, ...] = ()) -> dict[str, object]:
    """The parameters a flow was called with that are set (not None): call with locals()."""
    return {k: v for k, v in values.items() if v is not None and k not in exclude}


def docstring_args(doc: str) -> dict[str, str]:
    """{name: help} from a Google-style `Args:` section."""
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    out: dict[str, str] = {}
    for match in re.finditer(r"^\s{8}(\w+): (.*?)(?=^\s{8}\w+: |\Z)", section, re.S | re.M):
        out[match.group(1)] = " ".join(match.group(2).split()).replace("%", "%%")
    return out


def _parser_for(name: str, hint: Any) -> Callable[[str], Any]:
    hint = _without_none(hint)
    if typing.get_origin(hint) is dict or hint is dict:
        def parse_json(text: str) -> Any:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise argparse.ArgumentTypeError(f"--{name.replace('_', '-')}: not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise argparse.ArgumentTypeError(f"--{name.replace('_', '-')}: expected a JSON object")
            return value
        return parse_json
    if hint is bool:
        return lambda text: text.lower() in ("1", "true", "yes")
    return hint if hint in (int, float, str) else str


def quiet_console(verbose: bool = False) -> None:
    """One line per round on the terminal: task runs' and round subflows' INFO chatter ("Finished
    in state Completed()", 8+ lines a round) stays off the console. Only the console handler is
    filtered: every record still reaches the Prefect API. `verbose` keeps everything."""
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    if verbose:
        return
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
                isinstance(f, _RoundChatter) for f in handler.filters):
            handler.addFilter(_RoundChatter())


class _RoundChatter:
    """Drops INFO from task runs and from `train-round` subflows (their warnings stay)."""

    def filter(self, record) -> bool:
        if record.levelno >= 30:  # WARNING and above always show
            return True
        if record.name == "prefect.task_runs":
            return False
        return not (record.name == "prefect.flow_runs"
                    and str(getattr(record, "flow_run_name", "")).startswith("round-"))


def field_docs(cls: type) -> dict[str, str]:
    """{field: its docstring (the string literal under it in the class body)}, one line each."""
    import ast
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # builtins, or no source shipped
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def with_parameter_docs(*sources: type, **docs: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Append a Google-style `Args:` section to a flow function's docstring, one entry per
    parameter, from `docs` or else the docstring of the same-named field of the first of `sources`
    (dataclasses) that has one: a parameter is documented once, where its field is. Apply it below
    @flow, so that Prefect's parameter descriptions, the UI and the generated CLI read the result."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        known = {}
        for source in reversed(sources):
            known.update(field_docs(source))
        known.update(docs)
        missing = [name for name in inspect.signature(fn).parameters if name not in known]
        if missing:
            raise TypeError(f"{fn.__name__}: no description for parameter(s) {missing}")
        lines = [f"        {name}: {known[name]}" for name in inspect.signature(fn).parameters]
        fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n\n    Args:\n" + "\n".join(lines) + "\n"
        return fn
    return decorate


def run_per_seed(flow_fn: Callable[..., Any], args: dict[str, object], check: Callable[[dict[str, object]], object],
                 while_starting: Callable[[], None] | None = None) -> tuple[int, list[Any]]:
    """A command line's runs: one call of `flow_fn` per seed of args["seeds"] (else its "seed"),
    on PREFECT_API_URL or a temporary API; (exit status, the runs' results).

    Every seed's parameters go through `check` before the API or any actor starts: bad input
    prints one line (status 2). Ctrl-C stops the run in flight as SIGTERM would (flows/interrupts.py;
    status 130, the results of the runs finished before it)."""
    from deployments.local_api import prefect_api
    from flows.interrupts import EXIT_INTERRUPTED, stop_on_interrupt
    from models.errors import ConfigError

    seeds = args.pop("seeds", None) or [args.pop("seed", None)]
    args.pop("seed", None)
    results: list[Any] = []
    with stop_on_interrupt():
        try:
            for seed in seeds:
                check(given_arguments({**args, "seed": seed}))
            with prefect_api(while_starting=while_starting):
                for seed in seeds:
                    results.append(flow_fn(**args, seed=seed))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2, results
        except KeyboardInterrupt as exc:  # flows/interrupts.py Interrupted, or one Prefect re-raised
            print(f"stopped: {exc or 'interrupted (Ctrl-C)'}", file=sys.stderr)
            return EXIT_INTERRUPTED, results
    return 0, results

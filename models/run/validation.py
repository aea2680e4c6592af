"""Checking what a user gave before anything is spent: one ConfigError that names the key.

Every configuration dataclass (PPOConfig, ImpactConfig, the scheduler agent's AgentConfig) takes
a user's overrides through `with_overrides`, and every check through `check`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

from models.errors import ConfigError

C = TypeVar("C")


def check(ok: bool, message: str) -> None:
    """ConfigError(message) unless ok."""
    if not ok:
        raise ConfigError(message)


def typed(name: str, value: object, default: object) -> object:
    """value, checked against the type of its field's default: a bool must be a bool, a float any
    number (returned as float), an int a whole number (returned as int); a wrong type names `name`."""
    if isinstance(default, bool):
        check(isinstance(value, bool), f"{name} must be true or false, got {value!r}")
    elif isinstance(default, int | float):
        check(isinstance(value, int | float) and not isinstance(value, bool), f"{name} must be a number, got {value!r}")
        if isinstance(default, int):
            check(float(value).is_integer(), f"{name} must be an integer, got {value!r}")
        return type(default)(value)
    return value


def with_overrides(config: C, overrides: Mapping[str, object] | None, prefix: str, label: str) -> C:
    """A copy of the frozen dataclass `config` with `overrides` laid over it: an unknown key names
    the valid ones ("unknown <label> parameter(s)"), a value of the wrong type names its key
    (`<prefix>.<key>`), a list for a tuple field (hidden widths) becomes a tuple; the copy is
    validated when it has `validate()`."""
    if not overrides:
        return config
    check(isinstance(overrides, Mapping), f"{prefix} must be a mapping of parameters, got {overrides!r}")
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    check(not unknown, f"unknown {label} parameter(s) {unknown}; valid: {sorted(fields)}")
    values = {}
    for name, value in overrides.items():
        default = getattr(config, name)
        if isinstance(default, tuple):
            check(isinstance(value, list | tuple), f"{prefix}.{name} must be a list, got {value!r}")
            value = tuple(value)
        values[name] = typed(f"{prefix}.{name}", value, default) if default is not None else value
    out = dataclasses.replace(config, **values)
    if hasattr(out, "validate"):
        out.validate()
    return out

"""The learned scheduler's spec string, `learned[:<source>][:greedy|:sample]`, parsed without loading
anything: what a run's parameters are checked against before any server or actor starts (the
checkpoint it names is loaded by models/scheduling/learned.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from models.errors import ConfigError

SHIPPED = "cartpole-v9"  # `learned` alone means this packaged checkpoint (its schedule comes down)
MODES = ("greedy", "sample")

@dataclass(frozen=True)
class LearnedSpec:
    """A parsed 'learned[:<ref>][:greedy|:sample]' scheduler spec.

    ref is a checkpoint path, a file:// URI, a packaged name or an MLflow URI, with its case and
    colons kept; "" means the packaged default (SHIPPED).
    """

    ref: str = ""
    mode: str = "greedy"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"learned scheduler mode must be one of {MODES}, got {self.mode!r}")

    def __str__(self) -> str:
        return f"learned:{self.ref}:{self.mode}" if self.ref else f"learned:{self.mode}"

    @property
    def short_name(self) -> str:
        """A name for run names: 'learned-cartpole', 'learned-scheduler-sample' (a checkpoint's
        file stem, an MLflow URI's last part), never a whole path."""
        ref = self.ref.rstrip("/").rsplit("/", 1)[-1].removesuffix(".pt") if self.ref else SHIPPED
        ref = re.sub(r"[^A-Za-z0-9_.-]+", "-", ref).strip("-") or SHIPPED
        return f"learned-{ref}" + ("-sample" if self.mode == "sample" else "")

    @property
    def source(self) -> str:
        """The checkpoint reference, with the packaged default spelled out."""
        return self.ref or SHIPPED


def is_learned_spec(spec: str | None) -> bool:
    """True for 'learned' and 'learned:...' (any case), the specs `parse_learned_spec` reads."""
    return isinstance(spec, str) and spec.strip().split(":", 1)[0].lower() == "learned"


def parse_learned_spec(spec: str) -> LearnedSpec:
    """'learned[:<ref>][:sample|:greedy]' -> LearnedSpec; a trailing mode is read in any case."""
    if not is_learned_spec(spec):
        raise ConfigError(f"scheduler {spec!r} is not a learned scheduler spec: use "
                          "learned[:<path, packaged name or MLflow URI>][:greedy|:sample]")
    rest = spec.strip()[len("learned"):]
    rest = rest[1:] if rest.startswith(":") else rest
    mode = "greedy"
    head, sep, tail = rest.rpartition(":")
    if sep and tail.lower() in MODES:
        rest, mode = head, tail.lower()
    elif rest.lower() in MODES:
        rest, mode = "", rest.lower()
    if rest.endswith(":") or (rest and not rest.strip()):
        raise ConfigError(f"scheduler {spec!r}: empty checkpoint reference; use "
                          "learned[:<path, packaged name or MLflow URI>][:greedy|:sample]")
    return LearnedSpec(rest, mode)


MLFLOW_SCHEMES = ("runs:/", "models:/", "mlflow-artifacts:/")


def is_mlflow_uri(ref: str) -> bool:
    """True for a reference only an MLflow store can resolve (runs:/, models:/, http(s)://, ...).

    file:// URIs and plain paths are local and resolved here."""
    ref = ref.strip()
    return ref.startswith(MLFLOW_SCHEMES) or ("://" in ref and not ref.startswith("file://"))

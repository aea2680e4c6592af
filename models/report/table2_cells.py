"""The cells of a Table 2 experiment (issue 35): one (workload, system, seed) training each, with
a cache key of the code and the settings that ran it, so that a re-run skips every cell already
finished with the same code and settings and reruns the others.

A cell's key is sha256 over the code fingerprint (every source file of the layers that decide a
training's result: models/, flows/, tasks/) and the cell's settings as canonical JSON (sorted
keys; the paths a run writes to left out by the caller; a learned cell's settings hold its
scheduler checkpoint's sha256). Either changing makes a new key, so a cached cell is never
reported for code, settings or a scheduler it did not run with, and a new or retrained scheduler
re-runs only the cells that load it. `--only` picks a subset:
each filter is `field=value[,field=value...]` over workload, system and seed (all of one filter
must match; any filter may). Pure: no Prefect, no MLflow.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.errors import ConfigError
from models.run.presets import PRESET_VARIANTS
from models.scheduling.learned_spec import SHIPPED

CODE_LAYERS = ("models", "flows", "tasks")
"""The source folders whose code decides a training's result (deployments/ only starts servers)."""
CODE_SUFFIXES = frozenset({".py", ".toml", ".json"})
"""Source, presets and price tables. The packaged schedulers' checkpoints (.pt) are not code: a
learned cell's settings carry the sha256 of the one it loads (`file_digest`)."""

CELL_FIELDS = ("workload", "system", "seed")

SERVER_CLUSTER, IMPACT, LEARNED = "server-cluster", "impact", "learned"
RAMPS = ("increase", "decrease")
"""Systems whose scheduler spec depends on the rounds of the same seed's RAMP_BASE cell (ramp_spec)."""
DEFAULT_SYSTEMS = (LEARNED, "fixed:1", "fixed:2", "fixed:4", "fixed:8", "fixed:16", "max", "adapt", *RAMPS,
                   SERVER_CLUSTER, IMPACT)
"""Issue 35's rows: the workload's learned scheduler, the Fixed(N) sweep (its best is a row of the
table), Max (= Fixed(32)), Adapt, Increase, Decrease, the server cluster and IMPACT with 32 actors."""
DEFAULT_WORKLOADS = ("CartPole-v1", "Hopper-v5-locomotion", "HalfCheetah-v5-locomotion")
LEARNED_FOR = {"CartPole-v1": SHIPPED, "Hopper-v5": "hopper", "HalfCheetah-v5": "halfcheetah",
               "Hopper-v5-locomotion": "hopper-locomotion", "HalfCheetah-v5-locomotion": "halfcheetah-locomotion"}
"""Each workload's own packaged scheduler, by workload name (a variant's own, else its env's);
another env's `learned` row is the shipped CartPole-v1 one, transferred (its label says so)."""
RAMP_CENTRE, RAMP_STEPS = 8, 10
RAMP_BASE = f"fixed:{RAMP_CENTRE}"
"""The row whose rounds on a seed the ramps of that seed spread Fixed(RAMP_CENTRE)'s budget over."""


@dataclass(frozen=True)
class Cell:
    """One training of a Table 2: a system on a workload at a seed."""

    workload: str
    """The workload's name: env id, and `-<preset variant>` when it has one (Hopper-v5-locomotion)."""
    system: str
    """The row: learned, fixed:N, max, adapt, increase, decrease, server cluster, impact."""
    seed: int

    @property
    def label(self) -> str:
        return f"{self.workload} / {self.system} / seed {self.seed}"


def code_fingerprint(root: Path, layers: Sequence[str] = CODE_LAYERS) -> str:
    """sha256 over every CODE_SUFFIXES file under root/<layer> (path and bytes, in sorted order)."""
    digest = hashlib.sha256()
    for layer in layers:
        for path in sorted(p for p in (root / layer).rglob("*") if p.is_file()):
            if "__pycache__" in path.parts or path.suffix not in CODE_SUFFIXES:
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (a scheduler checkpoint's, for its cells' keys)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cell_key(cell: Cell, code: str, settings: Mapping[str, object]) -> str:
    """The cache key of a cell run with `code` (a fingerprint) and `settings` (JSON-able)."""
    payload = json.dumps({"cell": [cell.workload, cell.system, cell.seed], "code": code, "settings": settings},
                         sort_keys=True, separators=(",", ":"), default=_refuse)
    return hashlib.sha256(payload.encode()).hexdigest()


def _refuse(value: object) -> object:
    raise ConfigError(f"a cell's settings must be JSON (numbers, strings, lists, objects): got {type(value).__name__}")


def plan_cells(workloads: Sequence[str], systems: Sequence[str], seeds: Mapping[str, Sequence[int]]) -> list[Cell]:
    """Every (workload, system, seed) in order: workload by workload, seed by seed, system by system
    (a seed's rows run together, so an interrupted table has whole seeds to compare), a seed's
    ramps last (their spec needs the rounds of its RAMP_BASE cell)."""
    missing = [w for w in workloads if not seeds.get(w)]
    if missing:
        raise ConfigError(f"no seeds given for {missing}")
    duplicated = sorted({s for s in systems if list(systems).count(s) > 1})
    if duplicated:
        raise ConfigError(f"systems named twice: {duplicated}")
    if set(RAMPS) & set(systems) and RAMP_BASE not in systems:
        raise ConfigError(f"increase / decrease spread {RAMP_BASE}'s actor budget over its rounds: "
                          f"add {RAMP_BASE} to the systems")
    ordered = sorted(systems, key=lambda s: s in RAMPS)  # a seed's ramps after its RAMP_BASE cell
    return [Cell(w, s, seed) for w in workloads for seed in seeds[w] for s in ordered]


def parse_only(filters: Iterable[str]) -> list[dict[str, str]]:
    """`--only` filters as field -> value dicts; a ConfigError names a malformed one."""
    parsed = []
    for text in filters:
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or name not in CELL_FIELDS or not value:
                raise ConfigError(f"--only {text!r}: each part is field=value with field one of {CELL_FIELDS}")
            if name in fields:
                raise ConfigError(f"--only {text!r}: {name} given twice (give two filters to take either)")
            fields[name] = value
        parsed.append(fields)
    return parsed


def select(cells: Sequence[Cell], only: Iterable[str]) -> list[Cell]:
    """The cells any filter matches (all when there is none); a filter that matches no cell is a
    ConfigError (a typo would otherwise run nothing and say nothing)."""
    filters = parse_only(only)
    if not filters:
        return list(cells)

    def matches(cell: Cell, f: dict[str, str]) -> bool:
        return all(str(getattr(cell, name)) == value for name, value in f.items())

    for f in filters:
        if not any(matches(c, f) for c in cells):
            raise ConfigError(f"--only {f} matches no cell of this table")
    return [c for c in cells if any(matches(c, f) for f in filters)]


def workload_parts(name: str) -> tuple[str, str | None]:
    """A workload name as (env id, preset variant): 'Hopper-v5-locomotion' -> ('Hopper-v5', 'locomotion')."""
    for variant in PRESET_VARIANTS:
        if name.endswith(f"-{variant}") and len(name) > len(variant) + 1:
            return name[: -len(variant) - 1], variant
    return name, None


def workload_name(env: str, variant: str | None) -> str:
    """The inverse of workload_parts: ('Hopper-v5', 'locomotion') -> 'Hopper-v5-locomotion'."""
    return f"{env}-{variant}" if variant else env


def learned_ref(workload: str, given: Mapping[str, str]) -> tuple[str, bool]:
    """The learned scheduler of a workload (its name: env id, -variant for a variant) and whether it
    is the workload's own: the user's (by workload name or env id), else LEARNED_FOR's (by name,
    then by env id), else SHIPPED, transferred."""
    env, _ = workload_parts(workload)
    for table in (given, LEARNED_FOR):
        for key in (workload, env):
            if key in table:
                return table[key], True
    return SHIPPED, False


def is_learned(system: str) -> bool:
    """A learned row: `learned` (the workload's own scheduler) or `learned:<ref>` (a named one)."""
    return system == LEARNED or system.startswith(f"{LEARNED}:")


def learned_row_ref(system: str, workload: str, given: Mapping[str, str]) -> tuple[str, bool]:
    """The scheduler a learned row runs and whether it is the workload's own: `learned` as
    learned_ref says; `learned:<ref>` the one it names (a packaged name, checkpoint path or MLflow
    URI), so that one table holds several learned rows, e.g. fine-tuned from two sources and one
    from scratch, run against the same cells."""
    if system == LEARNED:
        return learned_ref(workload, given)
    ref = system.removeprefix(f"{LEARNED}:") if is_learned(system) else ""
    if not ref:
        raise ConfigError(f"{system!r} is not a learned row: learned or learned:<packaged name, path or MLflow URI>")
    return ref, True


def ramp_spec(system: str, rounds: int) -> str:
    """Increase / Decrease with Fixed(RAMP_CENTRE)'s actor budget over `rounds` rounds (in a table,
    the rounds Fixed(RAMP_CENTRE) took to stop on the same seed, RAMP_BASE's cell): one actor more
    (fewer) every rounds/RAMP_STEPS rounds, so from 3-4 to 12-13 actors over those rounds, whatever
    their number (over K, a workload that stops at K/10 would never ramp)."""
    if system not in RAMPS:
        raise ConfigError(f"{system!r} is not one of the ramps {RAMPS}")
    if rounds < 1:
        raise ConfigError(f"a ramp needs rounds >= 1, got {rounds}")
    return f"{system}:{RAMP_CENTRE}:1:{max(math.ceil(rounds / RAMP_STEPS), 1)}:{rounds}"

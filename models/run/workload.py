"""What a run is asked to do (`Workload`) and where it runs (`Placement`): one JSON-able shape for the
`train` and `impact` flows, scheduler training, the experiments and every command line.

A field left None comes from the env's preset (models/data/presets.toml, resolved by
models/run/presets.py for PPO and models/impact/config.py for IMPACT), then from the
configuration's default. The `train` and `impact` flows keep one flat parameter per field (the
Prefect UI's form, `prefect deployment run -p env=...`); `split_parameters` turns those into the
two dataclasses, and a test checks that the flows' parameters and these fields agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, TypeVar

from models.errors import ConfigError

DEFAULT_ENV = "CartPole-v1"

Overrides = dict[str, Any]
"""A JSON object of parameter overrides (PPO's, IMPACT's, a backend's options), checked key by key
by the configuration it overrides (models/run/validation.py `with_overrides`)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Workload:
    """What a run is asked to do: the env and its preset, the target and the limits, and the
    algorithm's settings. None: the env's preset, then the default."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}
    """A flow parameter of this type (a deployment's JSON) refuses an unknown key, naming it."""

    env: str = DEFAULT_ENV
    """Gymnasium env id, or 'module:EnvName'."""
    preset: str | None = None
    """A variant of the env's preset to fill the unset values from, e.g. locomotion (Hopper-v5,
    HalfCheetah-v5: a J that needs forward motion); None: the env's own preset (the paper's J)."""
    target_return: float | None = None
    """J: the run stops once its return reaches it."""
    budget_usd: float | None = None
    """B (PPO): a hard limit; a round starts only when an upper bound of its cost fits in what is left."""
    max_rounds: int | None = None
    """K (PPO): at most this many rounds."""
    i_max: int | None = None
    """Largest actor count a scheduler may choose (PPO; default 32)."""
    fragment: int | None = None
    """Env steps each actor samples per round (PPO)."""
    envs_per_actor: int | None = None
    """Environments one actor steps in lockstep (PPO; divides fragment)."""
    carry_episodes: bool | None = None
    """Each round's actor i continues the episodes that actor i of the round before left
    unfinished (PPO, MuJoCo envs; the locomotion presets turn it on)."""
    actor_memory_gb: float | None = None
    """Memory billed per actor."""
    env_backend: str | None = None
    """What steps the actors' envs: gymnasium (the default) or envpool (MuJoCo v5 envs; the
    `envpool` extra; models/envs/envpool_batch.py says what differs) (PPO)."""
    ppo: Overrides | None = None
    """Overrides of PPO's hyperparameters, e.g. {"learning_rate": 0.001} (models/run/config.py PPOConfig)."""
    eval_every: int | None = None
    """Every this many rounds (and at the end), evaluate the policy's deterministic actions on whole
    episodes, logged as eval/...; 0 (the default) turns it off (PPO)."""
    eval_episodes: int | None = None
    """Episodes per evaluation (PPO; default 5)."""
    stop_at_eval: bool | None = None
    """Judge J on the evaluations, not on R_k: stop once an evaluation's mean return reaches J
    with every episode moving forward (MuJoCo locomotion); needs eval_every (PPO)."""
    max_env_steps: int | None = None
    """S: the env-step budget, the same for any actor count: IMPACT stops once its actors have
    delivered this many env steps, PPO after the round that brings it there."""
    max_wall_s: float | None = None
    """IMPACT: wall-clock limit of the training, seconds."""
    impact: Overrides | None = None
    """IMPACT: overrides of its hyperparameters, e.g. {"max_reuse": 3, "actors": 4}
    (models/impact/config.py ImpactConfig)."""
    prices_file: str | None = None
    """TOML price table overriding the packaged models/data/prices.toml."""

    def __post_init__(self) -> None:
        if not isinstance(self.env, str) or not self.env.strip():
            raise ConfigError(f"workload env must be a gymnasium env id, got {self.env!r}")
        for name in ("ppo", "impact"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"{name} must be a mapping of parameters, got {value!r}")

    def given(self) -> dict[str, object]:
        """The fields that are set (not None): what overrides the preset."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def for_ppo(self) -> dict[str, object]:
        """The set fields a PPO run (`train`) takes: all but IMPACT's own."""
        return {k: v for k, v in self.given().items() if k not in IMPACT_ONLY}

    def for_impact(self) -> dict[str, object]:
        """The set fields an IMPACT run (`impact`) takes: all but PPO's own."""
        return {k: v for k, v in self.given().items() if k not in PPO_ONLY}

    def with_values(self, **values: object) -> Workload:
        return replace(self, **values)

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Workload:
        return _from_json(cls, data, "workload")


@dataclass(frozen=True)
class Placement:
    """Where a run's actors and learner run, never what it learns: a resumed run, or a resumed
    scheduler training, may change it."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    backend: str | None = None
    """Where actors run: local (warm processes on this machine, the default), work-pool (each actor
    its own flow run on a Prefect work pool: process, ACI, ...) or dask."""
    backend_options: Overrides | None = None
    """Further options of the backend (models/run/config.py *BackendSpec), e.g.
    {"actor_deployment": "actor/aci-actor"} or {"dask_address": "tcp://host:8786"}."""
    local_workers: int | None = None
    """Worker processes of the local or dask backend; default one per core."""
    warm_actors: int | None = None
    """work-pool backend: warm actor servers to keep between rounds (default 0)."""
    learner_device: str | None = None
    """auto (CUDA when present, the default), cpu or cuda."""

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def over(self, base: Placement) -> Placement:
        """This placement's set values over `base`'s."""
        return replace(base, **self.given())

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Placement:
        return _from_json(cls, data, "placement")


WORKLOAD_FIELDS = tuple(f.name for f in fields(Workload))
IMPACT_ONLY = ("max_wall_s", "impact")
PPO_ONLY = ("budget_usd", "max_rounds", "i_max", "fragment", "envs_per_actor", "carry_episodes", "actor_memory_gb",
            "env_backend", "ppo", "eval_every", "eval_episodes", "stop_at_eval")
PLACEMENT_FIELDS = tuple(f.name for f in fields(Placement))


def workload_env(parameters: Mapping[str, object], default: str = DEFAULT_ENV) -> str:
    """The env of a flow run's `workload` parameter (a Workload, or its JSON from a deployment, or
    unset): what flow-run names say."""
    workload = parameters.get("workload")
    if isinstance(workload, Workload):
        return workload.env
    if isinstance(workload, Mapping) and isinstance(workload.get("env"), str):
        return str(workload["env"])
    return default


def split_parameters(given: Mapping[str, object]) -> tuple[Workload, Placement, dict[str, object]]:
    """A flow's flat parameters (those set) as its Workload, its Placement and the rest."""
    workload = Workload(**{k: v for k, v in given.items() if k in WORKLOAD_FIELDS and v is not None})
    placement = Placement(**{k: v for k, v in given.items() if k in PLACEMENT_FIELDS and v is not None})
    rest = {k: v for k, v in given.items() if k not in WORKLOAD_FIELDS and k not in PLACEMENT_FIELDS}
    return workload, placement, rest


def _from_json(cls: type[T], data: object, what: str) -> T:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a mapping, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{what}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**data)

"""Workload presets (data in models/data/presets.toml) merged with a user's parameters."""

from __future__ import annotations

import copy
import dataclasses
import functools
import tomllib
from importlib import resources
from typing import Any

from models.billing.cost import PriceTable
from models.envs.batch import can_carry_episodes, check_env_id
from models.run.config import (
    SYSTEM_CLUSTER,
    BackendSpec,
    ConfigError,
    LocalBackendSpec,
    PPOConfig,
    RunConfig,
    backend_spec,
)
from models.scheduling.schedulers import make_scheduler

DEFAULT_ENV = "CartPole-v1"


@functools.cache
def _preset_table() -> dict[str, Any]:
    return tomllib.loads(resources.files("models.data").joinpath("presets.toml").read_text())


# Named variants of an env's preset, as sub-tables (["Hopper-v5".locomotion]): values laid over
# the env's preset, which stays as it is (the paper's J values reproduce its tables).
PRESET_VARIANTS = ("locomotion",)


def preset_for(env_id: str, variant: str | None = None) -> dict[str, Any]:
    """The workload preset for env_id; other ids get the generic defaults. `variant` lays that
    variant's values over it (an env without the variant is an error)."""
    table = _preset_table()
    merged = copy.deepcopy(table["default"])
    specific = copy.deepcopy(table.get(env_id, {}))
    variants = {name: specific.pop(name) for name in PRESET_VARIANTS if name in specific}
    layers = [specific]
    if variant is not None:
        if variant not in variants:
            raise ConfigError(f"{env_id} has no {variant!r} preset variant"
                              f" (it has: {sorted(variants) or 'none'})")
        layers.append(variants[variant])
    for layer in layers:
        ppo = {**merged.get("ppo", {}), **layer.get("ppo", {})}
        merged.update(layer)
        merged["ppo"] = ppo
    return merged


# The train flow's parameters that are not RunConfig fields of the same name.
_BACKEND_PARAMS = ("backend", "backend_options", "local_workers", "warm_actors")


def resolve_run_config(given: dict[str, Any]) -> RunConfig:
    """A run's configuration from the train flow's parameters that were given (not None): the
    workload's preset fills the rest, then RunConfig's defaults; validated before anything runs."""
    given = dict(given)
    env_id = given.pop("env", None) or DEFAULT_ENV
    check_env_id(env_id)
    variant = given.pop("preset", None)
    preset = preset_for(env_id, variant)
    backend = _backend(**{k: given.pop(k, None) for k in _BACKEND_PARAMS})
    ppo = PPOConfig().replace(preset.get("ppo")).replace(given.pop("ppo", None))
    prices_file = given.pop("prices_file", None)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise ConfigError(f"unknown run parameter(s) {unknown}")
    values = {key: preset[key] for key in PRESET_KEYS}
    values.update(given)
    values.setdefault("experiment", f"minionsrl/{env_id}")
    values["preset_variant"] = variant
    prices = PriceTable.load(prices_file).with_actor_memory(float(values["actor_memory_gb"]))
    if values.get("system") == SYSTEM_CLUSTER:
        # the cluster's size decides the actor count and the pool: the preset's scheduler and
        # one process per core here do not apply (a given one is validated against it)
        cores = prices.server_actor_cores
        values["scheduler"] = given.get("scheduler", f"fixed:{cores}")
        if backend == LocalBackendSpec():
            backend = LocalBackendSpec(workers=cores)
    try:
        cfg = RunConfig(env_id=env_id, backend=backend, ppo=ppo, prices=prices,
                        **{k: _coerce(k, v) for k, v in values.items()})
    except TypeError as exc:
        raise ConfigError(f"run parameters: {exc}") from exc
    cfg.validate()
    if cfg.carry_episodes and not can_carry_episodes(env_id):
        raise ConfigError(f"carry_episodes: {env_id} is not a MuJoCo env, whose episodes an actor can hand "
                          "on to the next round's; leave carry_episodes off for it")
    make_scheduler(cfg.scheduler, cfg.i_max, cfg.max_rounds, cfg.target_return,
                   budget_usd=cfg.budget_usd, seed=cfg.seed)  # parse check
    return cfg


def resolve_run_changes(given: dict[str, Any], stored: RunConfig) -> dict[str, Any]:
    """The train flow's parameters given on resume, as RunConfig fields that differ from the
    stored configuration (RunConfig.with_changes decides which of them a resume may make)."""
    given = dict(given)
    changes: dict[str, Any] = {}
    if "env" in given:
        changes["env_id"] = given.pop("env")
    if "preset" in given:
        changes["preset_variant"] = given.pop("preset")
    backend_params = {k: given.pop(k, None) for k in _BACKEND_PARAMS}
    if any(v is not None for v in backend_params.values()):
        same_backend = backend_params["backend"] in (None, stored.backend.name)
        if same_backend and backend_params["backend_options"] is None:  # keep the stored options
            backend_params["backend_options"] = {
                k: v for k, v in dataclasses.asdict(stored.backend).items()
                if k not in ("workers", "warm_actors")}
        backend_params["backend"] = backend_params["backend"] or stored.backend.name
        changes["backend"] = _backend(**backend_params)
    if "ppo" in given:
        changes["ppo"] = stored.ppo.replace(given.pop("ppo"))
    if "prices_file" in given:
        changes["prices"] = PriceTable.load(given.pop("prices_file")).with_actor_memory(
            float(given.get("actor_memory_gb", stored.actor_memory_gb)))
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise ConfigError(f"unknown run parameter(s) {unknown}")
    changes.update({k: _coerce(k, v) for k, v in given.items()})
    return {k: v for k, v in changes.items() if v != getattr(stored, k)}


def _backend(backend: str | None, backend_options: dict[str, Any] | None, local_workers: int | None,
             warm_actors: int | None) -> BackendSpec:
    """The typed backend spec; `local_workers` and `warm_actors` are options like the others."""
    name = backend or "local"
    if backend_options is not None and not isinstance(backend_options, dict):
        raise ConfigError(f"backend_options must be a mapping of option names to values, got {backend_options!r}")
    options = dict(backend_options or {})
    if local_workers is not None:
        options["workers"] = local_workers
    if warm_actors is not None:
        options["warm_actors"] = warm_actors
    return backend_spec(name, options)


def _coerce(key: str, value: Any) -> Any:
    """Numbers from presets and JSON as the field's type; a wrong type names the parameter."""
    if key in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)
    if key in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return int(value)
    if key in _STR_FIELDS and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


PRESET_KEYS = ("scheduler", "target_return", "budget_usd", "max_rounds", "fragment", "envs_per_actor",
               "actor_memory_gb", "carry_episodes")
_FLOAT_FIELDS = {"target_return", "budget_usd", "actor_memory_gb", "actor_timeout_s", "quorum"}
_INT_FIELDS = {"max_rounds", "fragment", "envs_per_actor", "seed", "scheduler_seed", "i_max", "actor_retries", "eval_every",
               "eval_episodes"}
_STR_FIELDS = {"scheduler", "learner_device", "tracking_uri", "experiment", "checkpoint_dir", "system"}

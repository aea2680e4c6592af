"""Workload presets (data in models/data/presets.toml) merged with a user's parameters."""

from __future__ import annotations

import copy
import dataclasses
import functools
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any

from models.billing.cost import PriceTable
from models.envs.batch import can_carry_episodes, check_env_id, env_spaces
from models.envs.envpool_batch import check_env_backend
from models.json_types import JSONObject
from models.run.config import (
    SYSTEM_CLUSTER,
    BackendSpec,
    ConfigError,
    LocalBackendSpec,
    PPOConfig,
    RunConfig,
    backend_spec,
)
from models.run.memory import check_sizes
from models.run.workload import Placement, Workload, split_parameters
from models.scheduling.schedulers import make_scheduler


@functools.cache
def _preset_table() -> JSONObject:
    return tomllib.loads(resources.files("models.data").joinpath("presets.toml").read_text())


# Named variants of an env's preset, as sub-tables (["Hopper-v5".locomotion]): values laid over
# the env's preset, which stays as it is (the paper's J values reproduce its tables).
PRESET_VARIANTS = ("locomotion",)
SECTIONS = ("ppo", "impact", "impact_run")
"""Sub-tables of a preset layer: PPO's hyperparameters, IMPACT's, and what differs for an IMPACT
run of the env (models/impact/config.py)."""


def preset_layers(env_id: str, variant: str | None = None) -> list[JSONObject]:
    """The tables laid over each other for env_id: [default], the env's own, its variant's (an env
    without the variant is an error); each a copy, without the env's variant sub-tables."""
    table = _preset_table()
    specific = copy.deepcopy(table.get(env_id, {}))
    variants = {name: specific.pop(name) for name in PRESET_VARIANTS if name in specific}
    layers = [copy.deepcopy(table["default"]), specific]
    if variant is not None:
        if variant not in variants:
            raise ConfigError(f"{env_id} has no {variant!r} preset variant"
                              f" (it has: {sorted(variants) or 'none'})")
        layers.append(variants[variant])
    return layers


def preset_for(env_id: str, variant: str | None = None) -> JSONObject:
    """The PPO workload preset for env_id (other ids get the generic defaults), with `variant`'s
    values laid over it: its values and its `ppo` hyperparameters."""
    merged: JSONObject = {"ppo": {}}
    for layer in preset_layers(env_id, variant):
        merged["ppo"].update(layer.get("ppo", {}))
        merged.update({k: v for k, v in layer.items() if k not in SECTIONS})
    return merged


def resolve_run_config(workload: Workload, placement: Placement | None = None, **run: object) -> RunConfig:
    """A run's configuration: the workload's values over its env's preset, then RunConfig's
    defaults; `placement` says where it runs; `run` holds the other RunConfig fields (scheduler,
    seed, tracking_uri, ...). Validated before anything runs. IMPACT's fields are not PPO's: left out."""
    env_id = workload.env
    check_env_id(env_id)
    preset = preset_for(env_id, workload.preset)
    placement = placement or Placement()
    backend = _backend(placement)
    ppo = PPOConfig().replace(preset.get("ppo")).replace(workload.ppo)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(run) - fields)
    if unknown:
        raise ConfigError(f"unknown run parameter(s) {unknown}")
    given = {k: v for k, v in workload.given().items() if k in fields and k != "ppo"}
    values = {key: preset[key] for key in PRESET_KEYS}
    values.update({key: preset[key] for key in OPTIONAL_KEYS if key in preset})
    values.update(given)
    values.update({k: v for k, v in run.items() if v is not None})
    if placement.learner_device is not None:
        values["learner_device"] = placement.learner_device
    values.setdefault("experiment", f"minionsrl/{env_id}")
    values["preset_variant"] = workload.preset
    prices = PriceTable.load(workload.prices_file).with_actor_memory(float(values["actor_memory_gb"]))
    if values.get("system") == SYSTEM_CLUSTER:
        # the cluster's size decides the actor count and the pool: the preset's scheduler and
        # one process per core here do not apply (a given one is validated against it)
        cores = prices.server_actor_cores
        values["scheduler"] = run.get("scheduler") or f"fixed:{cores}"
        if backend == LocalBackendSpec():
            backend = LocalBackendSpec(workers=cores)
    try:
        cfg = RunConfig(env_id=env_id, backend=backend, ppo=ppo, prices=prices,
                        **{k: _coerce(k, v) for k, v in values.items() if k != "env"})
    except TypeError as exc:
        raise ConfigError(f"run parameters: {exc}") from exc
    cfg.validate()
    cfg = _minibatch_within_a_round(cfg, given_minibatch="minibatch_size" in (workload.ppo or {}))
    check_sizes(env_spaces(env_id), fragment=cfg.fragment, envs_per_actor=cfg.envs_per_actor, i_max=cfg.i_max,
                minibatch_size=cfg.ppo.minibatch_size, actor_memory_gb=cfg.actor_memory_gb,
                normalized=cfg.ppo.normalize_obs)
    check_env_backend(env_id, cfg.env_backend, cfg.carry_episodes)
    if cfg.carry_episodes and not can_carry_episodes(env_id):
        raise ConfigError(f"carry_episodes: {env_id} is not a MuJoCo env, whose episodes an actor can hand "
                          "on to the next round's; leave carry_episodes off for it")
    make_scheduler(cfg.scheduler, cfg.i_max, cfg.max_rounds, cfg.target_return,
                   budget_usd=cfg.budget_usd, seed=cfg.seed)  # parse check
    return cfg


def _minibatch_within_a_round(cfg: RunConfig, given_minibatch: bool) -> RunConfig:
    """A minibatch is drawn from one round's samples, at most i_max x fragment: a preset's larger
    one (CartPole's 1024, with a user's small fragment) means one minibatch a round and is recorded
    as that many samples, which trains the same; a user's larger one is refused (models/run/memory.py)."""
    samples = cfg.i_max * cfg.fragment
    if cfg.ppo.minibatch_size <= samples or given_minibatch:
        return cfg
    return dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, minibatch_size=samples))


def resolve_parameters(given: Mapping[str, object]) -> RunConfig:
    """resolve_run_config from the `train` flow's flat parameters (those set)."""
    workload, placement, run = split_parameters(given)
    return resolve_run_config(workload, placement, **run)


def resolve_run_changes(given: Mapping[str, object], stored: RunConfig) -> dict[str, object]:
    """The train flow's parameters given on resume, as RunConfig fields that differ from the
    stored configuration (RunConfig.with_changes decides which of them a resume may make)."""
    given = dict(given)
    changes: dict[str, object] = {}
    if "env" in given:
        changes["env_id"] = given.pop("env")
    if "preset" in given:
        changes["preset_variant"] = given.pop("preset")
    backend_given = {k: given.pop(k, None) for k in BACKEND_PARAMETERS}
    placement = Placement(**{k: v for k, v in backend_given.items() if v is not None})
    if placement.given():
        if placement.backend in (None, stored.backend.name) and placement.backend_options is None:
            # the same backend keeps its stored options
            placement = dataclasses.replace(placement, backend_options={
                k: v for k, v in dataclasses.asdict(stored.backend).items() if k not in ("workers", "warm_actors")})
        changes["backend"] = _backend(dataclasses.replace(placement, backend=placement.backend or stored.backend.name))
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


BACKEND_PARAMETERS = ("backend", "backend_options", "local_workers", "warm_actors")
"""The placement's fields that make the backend spec (learner_device is a RunConfig field)."""


def _backend(placement: Placement) -> BackendSpec:
    """The typed backend spec; `local_workers` and `warm_actors` are options like the others."""
    name = placement.backend or "local"
    if placement.backend_options is not None and not isinstance(placement.backend_options, Mapping):
        raise ConfigError("backend_options must be a mapping of option names to values, "
                          f"got {placement.backend_options!r}")
    options = dict(placement.backend_options or {})
    if placement.local_workers is not None:
        options["workers"] = placement.local_workers
    if placement.warm_actors is not None:
        options["warm_actors"] = placement.warm_actors
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
               "actor_memory_gb", "carry_episodes", "env_backend")
OPTIONAL_KEYS = ("eval_every", "eval_episodes", "stop_at_eval", "max_env_steps")
"""Optional in a preset: how its J is judged (the locomotion variants: on evaluations) and an
env-step budget S common to every actor count (Humanoid-v5's locomotion variant)."""
_FLOAT_FIELDS = {"target_return", "budget_usd", "actor_memory_gb", "actor_timeout_s", "quorum"}
_INT_FIELDS = {"max_rounds", "max_env_steps", "fragment", "envs_per_actor", "seed", "scheduler_seed", "i_max",
               "actor_retries", "eval_every", "eval_episodes"}
_STR_FIELDS = {"scheduler", "env_backend", "learner_device", "tracking_uri", "experiment", "checkpoint_dir", "system"}

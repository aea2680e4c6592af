"""Workload presets (data in models/data/presets.toml) merged with a user's parameters."""

from __future__ import annotations

import copy
import functools
import tomllib
from importlib import resources
from typing import Any

from models.config import ConfigError, PPOConfig, RunConfig
from models.envs import check_env_id
from models.schedulers import make_scheduler

DEFAULT_ACTOR_TIMEOUT_S = 300.0  # a lost actor must not stall a round for ever


@functools.cache
def _preset_table() -> dict[str, Any]:
    return tomllib.loads(resources.files("models.data").joinpath("presets.toml").read_text())


def preset_for(env_id: str) -> dict[str, Any]:
    """The workload preset for env_id; other ids get the generic defaults."""
    table = _preset_table()
    merged = copy.deepcopy(table["default"])
    specific = table.get(env_id)
    if specific is not None:
        ppo = {**merged.get("ppo", {}), **specific.get("ppo", {})}
        merged.update(copy.deepcopy(specific))
        merged["ppo"] = ppo
    return merged


def resolve_run_config(env_id: str, *, backends: tuple[str, ...], scheduler: str | None = None,
                       target_return: float | None = None, budget_usd: float | None = None,
                       max_rounds: int | None = None, i_max: int = 32, fragment: int | None = None,
                       envs_per_actor: int | None = None, seed: int = 0, backend: str = "local",
                       ppo: dict[str, Any] | None = None, actor_memory_gb: float | None = None,
                       learner_device: str = "auto", actor_timeout_s: float | None = None,
                       actor_retries: int = 1, quorum: float = 0.75) -> RunConfig:
    """Preset values, overridden by whatever the caller gave; validated before anything runs."""
    check_env_id(env_id)
    if backend not in backends:
        raise ConfigError(f"unknown backend {backend!r}; available: {', '.join(backends)}")
    preset = preset_for(env_id)

    def pick(value, key):
        return preset[key] if value is None else value

    cfg = RunConfig(
        env_id=env_id,
        scheduler=pick(scheduler, "scheduler"),
        target_return=float(pick(target_return, "target_return")),
        budget_usd=float(pick(budget_usd, "budget_usd")),
        max_rounds=int(pick(max_rounds, "max_rounds")),
        i_max=int(i_max),
        fragment=int(pick(fragment, "fragment")),
        envs_per_actor=int(pick(envs_per_actor, "envs_per_actor")),
        seed=int(seed),
        backend=backend,
        ppo=PPOConfig().replace(preset.get("ppo")).replace(ppo),
        actor_memory_gb=float(pick(actor_memory_gb, "actor_memory_gb")),
        learner_device=learner_device,
        actor_timeout_s=DEFAULT_ACTOR_TIMEOUT_S if actor_timeout_s is None else actor_timeout_s,
        actor_retries=int(actor_retries),
        quorum=float(quorum),
    )
    cfg.validate()
    make_scheduler(cfg.scheduler, cfg.i_max, cfg.max_rounds, cfg.target_return,
                   budget_usd=cfg.budget_usd, seed=cfg.seed)  # parse check
    return cfg

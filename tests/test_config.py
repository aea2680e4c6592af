"""Run configuration: presets, overrides, and bad input refused with a message naming the parameter."""

from __future__ import annotations

import math
import sys

import pytest

from models.run.config import ConfigError, LocalBackendSpec, PPOConfig, RunConfig
from models.run.presets import resolve_parameters


def resolve(env_id: str = "CartPole-v1", **overrides) -> RunConfig:
    return resolve_parameters({"env": env_id, **overrides})


def test_cartpole_preset():
    cfg = resolve()
    assert cfg.env_id == "CartPole-v1"
    assert cfg.target_return == 475.0
    assert (cfg.fragment, cfg.envs_per_actor, cfg.steps_per_env) == (512, 1, 512)
    assert cfg.scheduler == "fixed:8" and cfg.backend == LocalBackendSpec() and cfg.i_max == 32
    assert (cfg.ppo.gamma, cfg.ppo.gae_lambda, cfg.ppo.learning_rate) == (0.99, 0.95, 3e-3)
    assert cfg.ppo.clip_coef == 0.2


def test_overrides_win_over_the_preset():
    cfg = resolve(scheduler="adapt", target_return=200, budget_usd=0.5, max_rounds=7, i_max=16,
                  fragment=256, envs_per_actor=4, seed=3, ppo={"gamma": 0.9, "hidden": [32]})
    assert (cfg.scheduler, cfg.target_return, cfg.budget_usd, cfg.max_rounds) == ("adapt", 200.0, 0.5, 7)
    assert (cfg.i_max, cfg.fragment, cfg.envs_per_actor, cfg.steps_per_env, cfg.seed) == (16, 256, 4, 64, 3)
    assert cfg.ppo.gamma == 0.9 and cfg.ppo.hidden == (32,)
    assert cfg.ppo.gae_lambda == 0.95  # preset value kept where not overridden


def test_env_without_preset_gets_generic_defaults():
    cfg = resolve("MountainCar-v0")
    assert cfg.target_return == 1e9 and cfg.fragment == 512
    assert cfg.ppo == PPOConfig()


@pytest.mark.parametrize(
    ("env_id", "overrides", "match"),
    [
        ("NoSuchEnv-v0", {}, "env id 'NoSuchEnv-v0'"),
        ("CartPol-v1", {}, "did you mean.*CartPole-v1"),
        ("CartPole-v1", {"target_return": math.nan}, "target_return"),
        ("CartPole-v1", {"target_return": math.inf}, "target_return"),
        ("CartPole-v1", {"budget_usd": 0.0}, "budget_usd"),
        ("CartPole-v1", {"budget_usd": -1.0}, "budget_usd"),
        ("CartPole-v1", {"budget_usd": math.inf}, "budget_usd"),
        ("CartPole-v1", {"max_rounds": 0}, "max_rounds"),
        ("CartPole-v1", {"max_rounds": 1_000_001}, "max_rounds"),
        ("CartPole-v1", {"i_max": 0}, "i_max"),
        ("CartPole-v1", {"i_max": 1025}, "i_max"),
        ("CartPole-v1", {"i_max": 4}, "i_max"),  # the preset's fixed:8 does not fit
        ("CartPole-v1", {"fragment": 0}, "fragment"),
        ("CartPole-v1", {"fragment": -512}, "fragment"),
        ("CartPole-v1", {"fragment": 513, "envs_per_actor": 2}, r"fragment \(513\).*envs_per_actor \(2\)"),
        ("CartPole-v1", {"envs_per_actor": 0}, "envs_per_actor"),
        ("CartPole-v1", {"seed": -1}, "seed"),
        ("CartPole-v1", {"actor_memory_gb": 0.0}, "actor_memory_gb"),
        ("CartPole-v1", {"learner_device": "tpu"}, "learner_device"),
        ("CartPole-v1", {"ppo": {"learning_rat": 1e-3}}, r"unknown PPO parameter.*learning_rat"),
        ("CartPole-v1", {"ppo": {"gamma": 0.0}}, "ppo.gamma"),
        ("CartPole-v1", {"ppo": {"gae_lambda": 1.5}}, "ppo.gae_lambda"),
        ("CartPole-v1", {"ppo": {"learning_rate": 0.0}}, "ppo.learning_rate"),
        ("CartPole-v1", {"ppo": {"minibatch_size": 0}}, "ppo.minibatch_size"),
        ("CartPole-v1", {"ppo": {"hidden": []}}, "ppo.hidden"),
        ("CartPole-v1", {"ppo": {"target_kl": 0.0}}, "ppo.target_kl"),
        ("CartPole-v1", {"scheduler": "bogus"}, "scheduler 'bogus'"),
        ("CartPole-v1", {"scheduler": "fixed:x"}, "scheduler 'fixed:x'"),
        ("CartPole-v1", {"scheduler": "adapt", "target_return": -1.0}, "target_return"),
        ("CartPole-v1", {"backend": "azure"}, "backend 'azure'"),
        ("CartPole-v1", {"ppo": {"learning_rate": "fast"}}, r"ppo.learning_rate must be a number.*'fast'"),
        ("CartPole-v1", {"ppo": {"norm_adv": 1}}, "ppo.norm_adv must be true or false"),
        ("CartPole-v1", {"max_rounds": "ten"}, "max_rounds must be an integer"),
        ("CartPole-v1", {"warm_actors": 2}, r"option\(s\) \['warm_actors'\] do not apply to the 'local' backend"),
        ("CartPole-v1", {"backend": "dask", "backend_options": {"storage_block": "x"}}, "do not apply to the 'dask'"),
        ("CartPole-v1", {"backend_options": "workers=2"}, "backend_options must be a mapping"),
        ("CartPole-v1", {"eval_every": -1}, "eval_every"),
        ("CartPole-v1", {"eval_episodes": 0}, "eval_episodes"),
        ("CartPole-v1", {"prices_file": "/no/such/prices.toml"}, "cannot read price table"),
        ("CartPole-v1", {"bogus_parameter": 1}, r"unknown run parameter\(s\) \['bogus_parameter'\]"),
    ],
)
def test_bad_input_raises_config_error_naming_the_parameter(env_id, overrides, match):
    with pytest.raises(ConfigError, match=match):
        resolve(env_id, **overrides)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_unknown_backend_lists_the_available_ones():
    with pytest.raises(ConfigError, match="available: local, work-pool, dask"):
        resolve(backend="aci")


def test_ppo_replace_without_overrides_is_identity():
    cfg = PPOConfig()
    assert cfg.replace(None) is cfg and cfg.replace({}) is cfg


def test_module_env_id_imports_its_module_like_gym_make(tmp_path, monkeypatch):
    """'module:EnvName' (gymnasium's convention): the module is imported, then EnvName must exist."""
    import gymnasium as gym

    from models.envs.batch import env_spaces

    (tmp_path / "registers_tmp_env.py").write_text(
        "from gymnasium.envs.registration import register\n"
        "register('TmpCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n")
    (tmp_path / "registers_nothing.py").write_text("X = 1\n")
    (tmp_path / "broken_env_module.py").write_text("raise RuntimeError('registration failed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cfg = resolve("registers_tmp_env:TmpCartPole-v0")
        assert cfg.env_id == "registers_tmp_env:TmpCartPole-v0" and "TmpCartPole-v0" in gym.registry
        assert env_spaces(cfg.env_id).n_actions == 2  # actors make it by the same id
        with pytest.raises(ConfigError, match=r"cannot import module 'no_such_env_module_x'"):
            resolve("no_such_env_module_x:Foo-v0")
        with pytest.raises(ConfigError, match=r"cannot import module 'broken_env_module'.*registration failed"):
            resolve("broken_env_module:Foo-v0")
        with pytest.raises(ConfigError, match=r"module 'registers_nothing' registers no env 'Foo-v0'"):
            resolve("registers_nothing:Foo-v0")
        for bad in (":CartPole-v1", "registers_nothing:", "a:b:C-v0"):
            with pytest.raises(ConfigError, match="expected 'module:EnvName'"):
                resolve(bad)
    finally:
        gym.registry.pop("TmpCartPole-v0", None)
        for name in ("registers_tmp_env", "registers_nothing", "broken_env_module"):
            sys.modules.pop(name, None)


def test_every_train_parameter_lands_in_the_one_run_config():
    """The flow's parameters and RunConfig cannot drift: each one is a field, or builds one."""
    import dataclasses
    import inspect

    from flows.train import train

    params = set(inspect.signature(train.fn).parameters)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    # parameters that build a field of another name: env -> env_id, prices_file -> prices,
    # preset -> preset_variant, and the backend's options -> backend (a typed spec, with the
    # `backend` name parameter)
    expected = (fields - {"env_id", "prices", "preset_variant"}) | {
        "env", "prices_file", "preset", "backend_options", "local_workers", "warm_actors", "resume"}
    assert params == expected, params ^ expected


def test_a_preset_variant_fills_what_is_unset_and_is_recorded():
    hop = resolve("Hopper-v5", preset="locomotion", seed=1)
    assert (hop.preset_variant, hop.target_return, hop.scheduler, hop.fragment, hop.max_rounds) == (
        "locomotion", 2000.0, "fixed:2", 1024, 488)
    assert (hop.ppo.gamma, hop.ppo.init_log_std, hop.ppo.clip_vloss) == (0.99, 0.0, True)
    assert resolve("Hopper-v5", preset="locomotion", scheduler="fixed:4").scheduler == "fixed:4"
    paper = resolve("Hopper-v5")
    assert (paper.preset_variant, paper.target_return, paper.ppo.gamma) == (None, 600.0, 0.999)
    with pytest.raises(ConfigError, match=r"CartPole-v1 has no 'locomotion' preset variant"):
        resolve(preset="locomotion")


def test_a_resume_keeps_its_preset_variant():
    from models.run.presets import resolve_run_changes

    stored = resolve("Hopper-v5", preset="locomotion")
    assert resolve_run_changes({"preset": "locomotion", "max_rounds": 9}, stored) == {"max_rounds": 9}
    with pytest.raises(ConfigError, match=r"cannot change \['preset_variant'\] when resuming"):
        stored.with_changes(resolve_run_changes({"preset": None}, stored))


def test_backend_options_become_a_typed_spec():
    from models.run.config import DaskBackendSpec, WorkPoolBackendSpec

    cfg = resolve(backend="work-pool", warm_actors=3, backend_options={"actor_deployment": "actor/aci"})
    assert cfg.backend == WorkPoolBackendSpec(actor_deployment="actor/aci", warm_actors=3)
    assert resolve(backend="dask", local_workers=2).backend == DaskBackendSpec(workers=2)
    assert resolve(local_workers=1).backend == LocalBackendSpec(workers=1)


def test_run_config_round_trips_through_plain_data_with_its_prices(tmp_path):
    import json

    prices = tmp_path / "prices.toml"
    from importlib import resources
    prices.write_text(resources.files("models.data").joinpath("prices.toml").read_text()
                      .replace("vcpu_per_hour = 0.0405", "vcpu_per_hour = 0.5"))
    cfg = resolve(backend="work-pool", warm_actors=2, prices_file=str(prices), eval_every=3,
                  actor_memory_gb=2.0, ppo={"hidden": [16, 16]})
    assert cfg.prices.vcpu_s == 0.5 / 3600 and cfg.prices.actor.memory_gb == 2.0
    back = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg


def test_a_resume_may_change_only_where_and_how_long_it_runs():
    from models.run.presets import resolve_run_changes

    stored = resolve(max_rounds=10, seed=2)
    changes = resolve_run_changes({"max_rounds": 20, "seed": 2, "quorum": 0.5, "local_workers": 1}, stored)
    assert changes == {"max_rounds": 20, "quorum": 0.5, "backend": LocalBackendSpec(workers=1)}
    resumed = stored.with_changes(changes)
    assert (resumed.max_rounds, resumed.quorum, resumed.seed) == (20, 0.5, 2)
    with pytest.raises(ConfigError, match=r"cannot change \['env_id'\] when resuming"):
        stored.with_changes(resolve_run_changes({"env": "Acrobot-v1"}, stored))
    with pytest.raises(ConfigError, match=r"cannot change \['ppo', 'seed'\]"):
        stored.with_changes(resolve_run_changes({"seed": 3, "ppo": {"gamma": 0.5}}, stored))


# -- the server cluster as a system ---------------------------------------------------------

def cluster_prices(tmp_path, cores: int = 3):
    from importlib import resources
    path = tmp_path / "cluster_prices.toml"
    path.write_text(resources.files("models.data").joinpath("prices.toml").read_text()
                    .replace("actor_cores = 32", f"actor_cores = {cores}"))
    return str(path)


def test_a_server_cluster_runs_its_actor_cores_as_local_workers(tmp_path):
    cfg = resolve(system="server-cluster")
    assert (cfg.system, cfg.scheduler, cfg.backend, cfg.bill_cluster_startup) == (
        "server-cluster", "fixed:32", LocalBackendSpec(workers=32), True)
    small = resolve(system="server-cluster", prices_file=cluster_prices(tmp_path), bill_cluster_startup=False)
    assert (small.scheduler, small.backend.workers, small.bill_cluster_startup) == ("fixed:3", 3, False)
    assert resolve(system="server-cluster", scheduler="max", i_max=32).scheduler == "max"
    assert resolve().system == "serverless"


@pytest.mark.parametrize(("overrides", "match"), [
    ({"scheduler": "fixed:8"}, r"use scheduler fixed:32 \(or max with i_max=32\), not 'fixed:8'"),
    ({"scheduler": "adapt"}, "use scheduler fixed:32"),
    ({"scheduler": "max", "i_max": 16}, r"not 'max' with i_max=16"),
    ({"scheduler": "fixed:32", "i_max": 16}, "with i_max=16"),
    ({"backend": "work-pool"}, "backend 'work-pool' starts actors per round.*use backend local"),
    ({"backend": "dask"}, "backend 'dask'.*use backend local"),
    ({"local_workers": 2}, r"one worker process per actor core of the cluster \(32\); local_workers=2"),
    ({"system": "cloud"}, "system must be one of serverless, server-cluster"),
    ({"bill_cluster_startup": "yes"}, "bill_cluster_startup must be true or false"),
])
def test_a_server_cluster_refuses_what_it_cannot_run(overrides, match):
    with pytest.raises(ConfigError, match=match):
        resolve(**{"system": "server-cluster", **overrides})


def test_a_server_cluster_run_cannot_resume_on_another_backend():
    from models.run.presets import resolve_run_changes

    stored = resolve(system="server-cluster")
    with pytest.raises(ConfigError, match="use backend local"):
        stored.with_changes(resolve_run_changes({"backend": "dask"}, stored))
    with pytest.raises(ConfigError, match=r"cannot change \['system'\]"):
        stored.with_changes(resolve_run_changes({"system": "serverless"}, stored))

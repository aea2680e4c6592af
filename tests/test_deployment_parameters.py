"""Every deployment in every prefect*.yaml names a flow that exists, and its parameters bind to
that flow's signature the way Prefect binds them when a run starts (a parameter the flow does
not take would fail every run of the deployment before it starts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "prefect.yaml", *sorted((ROOT / "deployments").glob("*prefect*.yaml"))]
DEPLOYMENTS = [(path.relative_to(ROOT).as_posix(), d) for path in FILES
               for d in (yaml.safe_load(path.read_text()).get("deployments") or [])]


def test_the_files_hold_the_deployments_users_trigger():
    entrypoints = {d["entrypoint"] for _, d in DEPLOYMENTS}
    for wanted in ("flows/train.py:train", "flows/actor.py:actor", "flows/actor.py:actor_server",
                   "flows/scheduler_flows.py:train_scheduler", "flows/scheduler_flows.py:finetune_scheduler",
                   "flows/experiments/compare.py:compare_schedulers", "flows/experiments/motivation.py:motivation",
                   "flows/experiments/actors_curve.py:actors_curve",
                   "flows/experiments/transfer.py:scheduler_transfer"):
        assert wanted in entrypoints, wanted


@pytest.mark.parametrize(("file", "deployment"), DEPLOYMENTS,
                         ids=[f"{f}:{d['name']}:{d['entrypoint']}" for f, d in DEPLOYMENTS])
def test_deployment_parameters_bind_to_the_flow(file, deployment, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameters_to_args_kwargs

    monkeypatch.chdir(ROOT)
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    parameters = deployment.get("parameters") or {}
    parameters_to_args_kwargs(flow.fn, parameters)  # raises on a parameter the flow does not take
    if flow.name == "train":  # the values themselves must make a valid run configuration
        from models.presets import resolve_run_config

        resolve_run_config({k: v for k, v in parameters.items() if v is not None})

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
                   "flows/experiments/transfer.py:scheduler_transfer", "flows/experiments/table2.py:table2",
                   "flows/experiments/scalability.py:scalability",
                   "flows/impact.py:impact"):
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
        from models.run.presets import resolve_parameters

        resolve_parameters({k: v for k, v in parameters.items() if v is not None})


@pytest.mark.parametrize(("file", "deployment"), DEPLOYMENTS,
                         ids=[f"{f}:{d['name']}:{d['entrypoint']}" for f, d in DEPLOYMENTS])
def test_every_deployed_parameter_has_a_description_in_the_ui(file, deployment, monkeypatch):
    """The UI's run form shows each parameter's description: Prefect takes it from the flow
    docstring's Args section (one `name: text` line per parameter)."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    monkeypatch.chdir(ROOT)
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    properties = parameter_schema(flow.fn).properties
    assert properties
    undescribed = sorted(name for name, p in properties.items() if not p.get("description"))
    assert not undescribed, f"{deployment['entrypoint']}: no description for {undescribed}"


def test_the_process_pool_template_renders_every_deployments_job_variables():
    """The process worker's own rendering of deployments/work-pools/process.json with the job
    variables of each deployment on that pool (the ACI templates: tests/test_deployments_aci.py)."""
    import asyncio
    import json
    import uuid

    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.objects import FlowRun
    from prefect.utilities.templating import apply_values
    from prefect.workers.process import ProcessJobConfiguration

    template = json.loads((ROOT / "deployments" / "work-pools" / "process.json").read_text())
    on_pool = [d for _, d in DEPLOYMENTS if (d.get("work_pool") or {}).get("name") == "minionsrl-process"]
    assert len(on_pool) >= 10
    nowhere = PrefectClient(api="http://127.0.0.1:9/api")  # no block references: never called
    for deployment in on_pool:
        values = apply_values(deployment["work_pool"].get("job_variables") or {}, {})
        config = asyncio.run(ProcessJobConfiguration.from_template_and_values(template, values, client=nowhere))
        config.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name="r"))
        assert "{{" not in config.model_dump_json(), deployment["name"]
        assert config.env["PREFECT__FLOW_RUN_ID"] and config.command.endswith("-m prefect.engine")

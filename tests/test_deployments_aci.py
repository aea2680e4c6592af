"""ACI, offline: render the actor and learner job templates and validate what Azure would get.

Rendering goes through prefect-azure's own job configuration (the code its worker runs before
it calls ARM). Validation: a JSON schema of the parts of the ARM container-group resource we set
(deployments/aci-container-group.schema.json: required fields, types, ACI limits, GPU SKUs),
then the Azure SDK's container-group model parses it (types, GPU SKU enum). What no offline test can show, Azure accepting
the deployment and pulling the image, is listed in deployments/README.md.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployments.templates import POOLS, actor_template, learner_template, write_templates  # noqa: E402

SCHEMA = json.loads((ROOT / "deployments" / "aci-container-group.schema.json").read_text())
IDENTITY = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rl/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/minionsrl")
AZURE = {"resource_group_name": "rl", "subscription_id": "00000000-0000-0000-0000-000000000000",
         "image": "minionsrl.azurecr.io/minionsrl:0.1.0", "identities": [IDENTITY],
         "env": {"AZURE_CLIENT_ID": "11111111-1111-1111-1111-111111111111"}}


def render(template: dict, values: dict, flow_run_name: str = "actor-r0-a0-abc"):
    """The worker's rendering: template + job variables -> configuration -> ARM template.

    Offline: the client handed in points nowhere; our templates have no block or variable
    references, so rendering never calls it (a call would fail the test, not start a server).
    """
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.objects import FlowRun
    from prefect_azure.workers.container_instance import AzureContainerJobConfiguration

    nowhere = PrefectClient(api="http://127.0.0.1:9/api")
    config = asyncio.run(AzureContainerJobConfiguration.from_template_and_values(
        template, values, client=nowhere))
    flow_run = FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name=flow_run_name)
    config.prepare_for_flow_run(flow_run)
    return config


def validate_group(arm_template: dict) -> dict:
    """JSON schema of what we set, then the Azure SDK's own model of a container group."""
    from azure.mgmt.containerinstance.models import ContainerGroup, GpuSku

    assert "{{" not in json.dumps(arm_template), "an unrendered placeholder is left"
    group = arm_template["resources"][0]
    jsonschema.validate(group, SCHEMA)
    model = ContainerGroup.deserialize(group)
    container = model.containers[0]
    requests = container.resources.requests
    assert isinstance(requests.cpu, float) and isinstance(requests.memory_in_gb, float)
    assert container.image and container.command and model.os_type == "Linux"
    if requests.gpu is not None:
        assert requests.gpu.count >= 1 and GpuSku(requests.gpu.sku)
    return group


def test_committed_templates_are_current(tmp_path):
    for path in write_templates(tmp_path):
        assert json.loads(path.read_text()) == json.loads((POOLS / path.name).read_text()), (
            f"{path.name} is stale: run python -m deployments.templates")


def test_actor_template_renders_one_vcpu_no_gpu():
    template = json.loads((POOLS / "aci-actor.json").read_text())
    config = render(template, {**AZURE, "memory": 2.0})
    group = validate_group(config.arm_template)
    container = group["properties"]["containers"][0]["properties"]
    assert container["resources"]["requests"] == {"cpu": 1.0, "memoryInGB": 2.0}
    assert container["image"] == AZURE["image"]
    assert container["command"][:3] == ["prefect", "flow-run", "execute"]  # no Prefect-image entrypoint
    env = {e["name"]: e.get("value", e.get("secureValue")) for e in container["environmentVariables"]}
    assert env["AZURE_CLIENT_ID"] == AZURE["env"]["AZURE_CLIENT_ID"]
    assert "PREFECT__FLOW_RUN_ID" in env
    assert group["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {IDENTITY: {}}}


def test_learner_template_renders_its_gpu():
    template = json.loads((POOLS / "aci-learner.json").read_text())
    config = render(template, {**AZURE, "cpu": 6, "memory": 32, "gpu_count": 1, "gpu_sku": "V100"},
                    flow_run_name="train-cartpole")
    group = validate_group(config.arm_template)
    requests = group["properties"]["containers"][0]["properties"]["resources"]["requests"]
    assert requests == {"cpu": 6.0, "memoryInGB": 32.0, "gpu": {"count": 1, "sku": "V100"}}
    # defaults: a GPU is there without asking
    defaults = render(template, AZURE).arm_template["resources"][0]
    assert defaults["properties"]["containers"][0]["properties"]["resources"]["requests"]["gpu"] == {
        "count": 1, "sku": "V100"}


def test_prefect_azure_default_template_drops_the_gpu():
    """Why the learner pool has its own template: the default ignores gpu_*."""
    from deployments.templates import default_aci_template

    config = render(default_aci_template(), {**AZURE, "gpu_count": 1, "gpu_sku": "V100"})
    requests = config.arm_template["resources"][0]["properties"]["containers"][0]["properties"][
        "resources"]["requests"]
    assert "gpu" not in requests


@pytest.mark.parametrize("bad", [{"gpu_sku": "H100"}, {"gpu_count": 0}, {"cpu": "lots"}])
def test_invalid_learner_resources_are_refused(bad):
    template = json.loads((POOLS / "aci-learner.json").read_text())
    values = {**template_defaults(template), **AZURE, **bad}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, template["variables"])


def template_defaults(template: dict) -> dict:
    return {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}


def test_aci_deployments_job_variables_match_their_pools(monkeypatch):
    """deployments/aci.prefect.yaml: every deployment's job variables are valid for its pool,
    and render to a valid container group (placeholders filled as `prefect deploy` would)."""
    from prefect.utilities.templating import apply_values

    config = yaml.safe_load((ROOT / "deployments" / "aci.prefect.yaml").read_text())
    env = {"MINIONSRL_IMAGE": AZURE["image"], "AZURE_RESOURCE_GROUP": "rl",
           "AZURE_SUBSCRIPTION_ID": AZURE["subscription_id"], "MINIONSRL_IDENTITY": IDENTITY,
           "MINIONSRL_IDENTITY_CLIENT_ID": "11111111-1111-1111-1111-111111111111"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pools = {"minionsrl-aci": actor_template(), "minionsrl-aci-gpu": learner_template()}
    entrypoints = set()
    for deployment in config["deployments"]:
        entrypoints.add(deployment["entrypoint"])
        pool = deployment["work_pool"]
        template = pools[pool["name"]]
        job_variables = apply_values(pool["job_variables"], {})
        jsonschema.validate({**template_defaults(template), **job_variables}, template["variables"])
        config_ = render(template, job_variables)
        validate_group(config_.arm_template)
        if pool["name"] == "minionsrl-aci-gpu":
            assert deployment["entrypoint"] == "flows/train.py:train"
            assert config_.arm_template["resources"][0]["properties"]["containers"][0][
                "properties"]["resources"]["requests"]["gpu"]["count"] >= 1
    assert entrypoints == {"flows/train.py:train", "flows/actor.py:actor", "flows/actor.py:actor_server"}
    assert config["pull"][0]["prefect.deployments.steps.set_working_directory"]["directory"] == (
        "/opt/prefect/minionsrl")
    dockerfile = (ROOT / "deployments" / "Dockerfile").read_text()
    assert "WORKDIR /opt/prefect/minionsrl" in dockerfile and "torch==2.13.0" in dockerfile

"""Base job templates of the MinionsRL work pools, derived from prefect-azure's default.

    python -m deployments.templates          # rewrite deployments/work-pools/aci-*.json

Two ACI pools, because one ARM template cannot both carry a GPU block and leave it out:
- aci-actor.json (`minionsrl-aci`): one vCPU and a few GB per actor, no GPU.
- aci-learner.json (`minionsrl-aci-gpu`): the `train` flow run (the learner) with a GPU. The
  default ACI template ignores gpu_count/gpu_sku (tests/test_deployments_aci.py shows it):
  here they are written into the container's resource requests, so a learner container really
  gets its GPU.

Both templates: the image is ours (deployments/Dockerfile), so prefect-azure's default
entrypoint (/opt/prefect/entrypoint.sh of Prefect's own images) is dropped; the container group
carries the user-assigned identity given in `identities` (blob storage and registry access
without secrets in job variables).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POOLS = HERE / "work-pools"

ACTOR_DEFAULTS = {"cpu": 1.0, "memory": 2.0}
LEARNER_DEFAULTS = {"cpu": 4.0, "memory": 16.0, "gpu_count": 1, "gpu_sku": "V100"}
IMAGE = "minionsrl.azurecr.io/minionsrl:0.1.0"  # replace with your registry's image


def default_aci_template() -> dict[str, Any]:
    from prefect_azure.workers.container_instance import AzureContainerWorker

    return AzureContainerWorker.get_default_base_job_template()


def _container(template: dict[str, Any]) -> dict[str, Any]:
    return template["job_configuration"]["arm_template"]["resources"][0]["properties"]["containers"][0]


def _set_default(template: dict[str, Any], name: str, value: Any) -> None:
    template["variables"]["properties"][name]["default"] = value


def actor_template(base: dict[str, Any] | None = None) -> dict[str, Any]:
    template = copy.deepcopy(base or default_aci_template())
    for name, value in ACTOR_DEFAULTS.items():
        _set_default(template, name, value)
    _set_default(template, "image", IMAGE)
    _set_default(template, "entrypoint", "")  # None would fall back to Prefect-image default
    props = template["variables"]["properties"]
    props["cpu"]["description"] = "vCPUs per actor; MinionsRL's cost model assumes 1 (one core per actor)."
    props["memory"]["description"] = "GB per actor: the workload's actor_memory_gb."
    return template


def learner_template(base: dict[str, Any] | None = None) -> dict[str, Any]:
    template = actor_template(base)
    for name, value in LEARNER_DEFAULTS.items():
        _set_default(template, name, value)
    props = template["variables"]["properties"]
    # A GPU request needs both fields: make them plain required values, not optional ones.
    props["gpu_count"] = {"type": "integer", "minimum": 1, "maximum": 4, "default": 1,
                          "title": "GPU count", "description": "GPUs for the learner's container."}
    props["gpu_sku"] = {"type": "string", "enum": ["K80", "P100", "V100"], "default": "V100",
                        "title": "GPU SKU",
                        "description": "ACI GPU SKU. ACI GPUs are retired/preview-only in most "
                                       "regions: check availability before relying on this pool."}
    props["cpu"]["description"] = "vCPUs for the learner's container."
    props["memory"]["description"] = "GB for the learner's container."
    _container(template)["properties"]["resources"]["requests"]["gpu"] = {
        "count": "{{ gpu_count }}", "sku": "{{ gpu_sku }}"}
    return template


def write_templates(folder: Path = POOLS) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, template in (("aci-actor.json", actor_template()), ("aci-learner.json", learner_template())):
        path = folder / name
        path.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_templates():
        print(f"wrote {p.relative_to(HERE.parent)}")

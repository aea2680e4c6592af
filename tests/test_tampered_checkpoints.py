"""A checkpoint is checked, not trusted: every field a user could edit to bypass the budget or to
load weights into the wrong network is refused on resume, naming the file and the field, before
anything runs; an untouched copy still resumes."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from models.errors import ConfigError

pytestmark = pytest.mark.e2e


def _edit(progress_edit=None, config_edit=None):
    def edit(raw):
        if progress_edit:
            progress_edit(raw["progress"])
        if config_edit:
            config_edit(raw["config"])
    return edit


def _history_cost_and_total(progress):  # an edit whose totals agree with themselves
    progress["history"][0]["cost_usd"] = 0.0
    progress["spent_usd"] = math.fsum([r["cost_usd"] for r in progress["history"]] + [progress["lost_usd"]])


TAMPERING = {
    "spent -1 (budget bypassed)": (_edit(lambda p: p.update(spent_usd=-1.0)), "progress.spent_usd"),
    "spent lowered": (_edit(lambda p: p.update(spent_usd=p["spent_usd"] / 10)), "progress.spent_usd"),
    "spent NaN": (_edit(lambda p: p.update(spent_usd=float("nan"))), "progress.spent_usd"),
    "lost attempts negative": (_edit(lambda p: p.update(lost_usd=-0.5)), "progress.lost_usd"),
    "env steps": (_edit(lambda p: p.update(env_steps=p["env_steps"] + 1000)), "progress.env_steps"),
    "round index": (_edit(lambda p: p.update(round_index=7)), "progress.round_index"),
    "a round's bill, totals to match": (_edit(_history_cost_and_total), r"progress.history\[0\].cost_usd"),
    "a round dropped": (_edit(lambda p: p["history"].pop(0)), r"progress.history\[0\]"),
    "env id": (_edit(config_edit=lambda c: c.update(env_id="Acrobot-v1")), "config.env_id Acrobot-v1"),
    "hidden widths": (_edit(config_edit=lambda c: c["ppo"].update(hidden=[32, 32])), "learner.policy"),
    "a NaN price": (_edit(config_edit=lambda c: c["prices"].update(vcpu_s=float("nan"))), "vcpu_s"),
}


def test_each_tampered_field_is_refused_naming_the_file_and_the_field(prefect_api_url, mlflow_uri, tmp_path):
    from flows.train import train

    first = train(env="CartPole-v1", scheduler="fixed:1", max_rounds=2, fragment=64, local_workers=1, seed=2,
                  log_model=False, tracking_uri=mlflow_uri, checkpoint_dir=str(tmp_path / "ckpt"))
    raw = torch.load(first.checkpoint, weights_only=True)
    for name, (edit, field) in TAMPERING.items():
        tampered = copy.deepcopy(raw)
        edit(tampered)
        path = tmp_path / f"{name.replace(' ', '_')}.pt"
        torch.save(tampered, path)
        with pytest.raises(ConfigError, match=field) as refused:
            train(resume=str(path), max_rounds=4, tracking_uri=mlflow_uri)
        assert str(path) in str(refused.value), name
    client = MlflowClient(mlflow_uri)
    assert len(client.get_metric_history(first.run_id, "time/round_s")) == 2  # nothing ran

    untouched = tmp_path / "untouched.pt"
    torch.save(raw, untouched)
    resumed = train(resume=str(untouched), max_rounds=3, tracking_uri=mlflow_uri)
    assert resumed.rounds == 3 and resumed.run_id == first.run_id
    assert math.isclose(resumed.cost_usd, sum(r.cost_usd for r in resumed.history), rel_tol=1e-9)

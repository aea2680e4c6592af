"""The run checkpoint and the trained-policy file: one versioned format, loaded without running code.

Both are torch files of plain data (tensors, numbers, strings, lists and dicts) with a `format`
and a `version` key, written atomically (a crash mid-write never loses the last good one) and
read with torch.load(weights_only=True), which refuses anything that would execute code when
unpickled. Anything else, a corrupt file, or another format is a ConfigError naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.envs.snapshot import EnvSnapshot
from models.errors import ConfigError
from models.json_types import JSONObject, StateDict
from models.rl.normalization import Moments

RUN_FORMAT, RUN_VERSION = "minionsrl.run", 2
POLICY_FORMAT, POLICY_VERSION = "minionsrl.policy", 2


@dataclass(frozen=True)
class RunCheckpoint:
    """Everything a resumed run needs after its last finished round."""

    config: JSONObject
    """RunConfig.to_dict()."""
    learner: StateDict
    """Learner.state_dict(): policy, optimiser, sampling generator, normalisers."""
    scheduler: StateDict
    """The scheduler's state_dict()."""
    progress: JSONObject
    """models/run/session.py RunProgress as plain data (round index, totals, history, run id)."""
    round_metrics: dict[str, float]
    """The last round's MLflow metrics, logged after this checkpoint was written."""
    carry: dict[int, tuple[EnvSnapshot, ...]] = field(default_factory=dict)
    """Episodes in progress per actor index, with carry_episodes (stored as plain tensors)."""


@dataclass(frozen=True)
class PolicyArtifact:
    """A trained policy as a user runs it: weights, network shape and observation statistics."""

    env_id: str
    hidden: tuple[int, ...]
    policy: dict[str, torch.Tensor]
    obs_rms: Moments | None


def save_run_checkpoint(path: str | Path, ckpt: RunCheckpoint) -> Path:
    return save_checkpoint(path, {"format": RUN_FORMAT, "version": RUN_VERSION, "config": ckpt.config,
                        "learner": ckpt.learner, "scheduler": ckpt.scheduler,
                        "progress": ckpt.progress, "round_metrics": ckpt.round_metrics,
                        "carry": {i: [s.to_state() for s in snapshots] for i, snapshots in ckpt.carry.items()}})


def load_run_checkpoint(path: str | Path) -> RunCheckpoint:
    raw = _load(path, RUN_FORMAT, RUN_VERSION)
    try:
        return RunCheckpoint(config=raw["config"], learner=raw["learner"], scheduler=raw["scheduler"],
                             progress=raw["progress"], round_metrics=raw["round_metrics"],
                             carry={int(i): tuple(EnvSnapshot.from_state(state) for state in states)
                                    for i, states in raw.get("carry", {}).items()})  # absent in older files
    except KeyError as exc:
        raise ConfigError(f"{path}: not a complete run checkpoint (missing {exc})") from None


def save_policy(path: str | Path, artifact: PolicyArtifact) -> Path:
    return save_checkpoint(path, {"format": POLICY_FORMAT, "version": POLICY_VERSION, "env_id": artifact.env_id,
                        "hidden": list(artifact.hidden), "policy": artifact.policy,
                        "obs_rms": artifact.obs_rms.to_state() if artifact.obs_rms else None})


def load_policy(path: str | Path) -> PolicyArtifact:
    raw = _load(path, POLICY_FORMAT, POLICY_VERSION)
    try:
        return PolicyArtifact(env_id=raw["env_id"], hidden=tuple(raw["hidden"]), policy=raw["policy"],
                              obs_rms=Moments.from_state(raw["obs_rms"]) if raw["obs_rms"] else None)
    except KeyError as exc:
        raise ConfigError(f"{path}: not a complete policy file (missing {exc})") from None


def save_checkpoint(path: str | Path, payload: JSONObject) -> Path:
    """Write plain data atomically: the previous file stays whole until the new one is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic on POSIX
    return path


def load_checkpoint(path: str | Path) -> Any:
    """Plain data back, never code: weights_only refuses any object that would run when loaded."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such checkpoint file") from None
    except Exception as exc:  # UnpicklingError (refused or corrupt), RuntimeError (not a torch file)
        raise ConfigError(f"{path}: not a readable checkpoint, or one holding more than plain data "
                          f"(refused without running it): {type(exc).__name__}: {str(exc)[:300]}") from None


def _load(path: str | Path, fmt: str, version: int) -> JSONObject:
    raw = load_checkpoint(path)
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ConfigError(f"{path}: not a {fmt} file (format {found!r})")
    if raw.get("version") != version:
        raise ConfigError(f"{path}: {fmt} version {raw.get('version')!r}; this code reads version {version}")
    return raw

"""The learned actor scheduler: its spec string, the Scheduler around an agent, its checkpoints.

1. `LearnedSpec` / `parse_learned_spec` (models/scheduling/learned_spec.py): the one parser of 'learned[:<ref>][:greedy|:sample]'
   (make_scheduler in models/scheduling/schedulers.py and flows/train.py call it).
2. `LearnedScheduler`: the Scheduler protocol (models/scheduling/schedulers.py) around a SchedulerAgent
   (models/scheduling/agent.py), greedy or sampling, with a trace of every decision.
3. Checkpoints: `save_scheduler` / `load_scheduler`. A checkpoint holds tensors and plain
   JSON-able data only, with a format and version; it is read with torch.load(weights_only=True)
   and checked against its schema, so loading one can never run code. Packaged schedulers live
   in models/data/schedulers/ (`learned` alone loads SHIPPED, `cartpole-v9`).

Pure torch/numpy: no Prefect, no MLflow. MLflow URIs are downloaded by the flows first
(flows/train.py localise_scheduler_spec).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import torch

from models.errors import ConfigError
from models.json_types import JSONObject, StateDict
from models.rl.normalization import Moments, RunningMeanStd
from models.run.checkpoint import load_checkpoint, save_checkpoint
from models.scheduling.agent import AgentConfig, SchedulerAgent
from models.scheduling.features import (
    FEATURES,
    NormaliserConfig,
    RoundState,
    SchedulerDecision,
    SchedulerTrace,
    StateNormaliser,
)
from models.scheduling.learned_spec import MODES, SHIPPED, LearnedSpec, is_mlflow_uri, parse_learned_spec
from models.scheduling.provenance import SchedulerProvenance

# -- 2. the scheduler ----------------------------------------------------------------------------


class LearnedScheduler:
    """The Scheduler protocol around a SchedulerAgent.

    mode 'greedy' takes the most probable I (evaluation, production); 'sample' draws from the
    policy (exploration while the scheduler trains) with its own seeded generator. `trace()`
    returns every decision of the run: the features it saw, the action, its log-probability and
    the value estimate, as plain lists and floats (JSON- and pickle-friendly).
    """

    name = "learned"

    def __init__(self, agent: SchedulerAgent, normaliser: StateNormaliser, mode: str = "greedy",
                 seed: int = 0, source: str | None = None):
        if mode not in MODES:
            raise ConfigError(f"learned scheduler mode must be one of {MODES}, got {mode!r}")
        self.agent, self.normaliser, self.mode, self.source = agent, normaliser, mode, source
        self.seed = seed
        self.generator = torch.Generator().manual_seed(int(seed))
        self.steps: list[SchedulerDecision] = []

    def choose(self, state: RoundState) -> int:
        obs = self.normaliser(state)
        action, logp, value = self.agent.act(obs, greedy=self.mode == "greedy", generator=self.generator)
        self.steps.append(SchedulerDecision(round=int(state.round_index), obs=tuple(float(x) for x in obs),
                                            action=action, actors=action + 1, logp=logp, value=value))
        return action + 1

    def trace(self) -> SchedulerTrace:
        n = self.normaliser
        return SchedulerTrace(mode=self.mode, source=self.source, i_max=self.agent.i_max,
                              target_return=n.target_return, max_rounds=n.max_rounds,
                              budget_usd=n.budget_usd, features=tuple(FEATURES), steps=tuple(self.steps))

    def reset(self) -> None:
        """Forget the run (a new episode): trace and per-run references."""
        self.steps = []
        self.normaliser.reset()

    def state_dict(self) -> StateDict:
        # The weights too: a resumed run must act exactly as before even if the file it came
        # from has been overwritten by a later update since.
        return {"mode": self.mode, "steps": [{**asdict(s), "obs": list(s.obs)} for s in self.steps],
                "normaliser": self.normaliser.state_dict(), "rng": self.generator.get_state(),
                "policy": self.agent.policy.state_dict(), "value": self.agent.value.state_dict(),
                "scale": self.agent.scale_state()}

    def load_state_dict(self, state: StateDict) -> None:
        self.mode = state["mode"]
        self.steps = [SchedulerDecision(**{**s, "obs": tuple(s["obs"])}) for s in state["steps"]]
        self.normaliser.load_state_dict(state["normaliser"])
        self.generator.set_state(state["rng"])
        self.agent.policy.load_state_dict(state["policy"])
        self.agent.value.load_state_dict(state["value"])
        self.agent.scale = RunningMeanStd.from_moments(Moments.from_state(state["scale"]))


# -- 3. checkpoints --------------------------------------------------------------------------------

FORMAT, VERSION = "minionsrl.scheduler", 2
"""Version 2: tensors + a JSON-able header, read with weights_only=True. (Version 1, the string
format "minionsrl.scheduler/1", was a full pickle that cannot be read safely, and is refused.)"""

HEADER_KEYS = ("i_max", "features", "normaliser", "agent_config", "scale", "updates",
               "episodes_seen", "meta")


class LoadedScheduler(NamedTuple):
    """What `load_scheduler` returns."""

    agent: SchedulerAgent
    normaliser: NormaliserConfig
    meta: SchedulerProvenance
    """How it was trained: the workload and every training run behind it."""


def save_scheduler(path: str | Path, agent: SchedulerAgent, *,
                   normaliser: NormaliserConfig | None = None, meta: SchedulerProvenance | None = None) -> Path:
    """Write a scheduler checkpoint atomically: weights, optimiser, and how it was trained."""
    state = agent.state_dict()
    header = {"i_max": agent.i_max, "features": list(FEATURES),
              "normaliser": asdict(normaliser or NormaliserConfig()),
              "agent_config": asdict(agent.config), "scale": agent.scale_state(),
              "updates": agent.updates, "episodes_seen": agent.episodes_seen,
              "meta": (meta or SchedulerProvenance()).to_json()}
    try:
        header = json.loads(json.dumps(header))  # plain types only (tuples become lists)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"scheduler checkpoint {path}: its header must be JSON-able: {exc}") from None
    payload = {"format": FORMAT, "version": VERSION, "header": header,
               "policy": _tensors(state["policy"]), "value": _tensors(state["value"]),
               "optimizer": state["optimizer"]}
    return save_checkpoint(path, payload)


def _tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def load_scheduler(path: str | Path, config_overrides: Mapping[str, object] | None = None) -> LoadedScheduler:
    """(agent, normaliser constants, meta) from a checkpoint; overrides e.g. a new learning rate
    for fine-tuning. The optimiser state is kept unless the learning rate changes.

    Anything but a version-2 scheduler checkpoint raises ConfigError naming the file; the file
    is read with weights_only=True, so a planted pickle cannot run code.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no scheduler checkpoint at {path}")
    try:
        payload = load_checkpoint(path)
    except ConfigError as exc:  # a foreign object (refused unrun) or not a torch file
        raise ConfigError(f"{path} is not a scheduler checkpoint ({FORMAT} version {VERSION}): it "
                          f"cannot be read as tensors and plain data, and is not loaded ({exc})") from None
    header = _check_payload(payload, path)
    try:
        stored = dict(header["agent_config"])
        stored["hidden"] = tuple(stored["hidden"])
        stored_config = AgentConfig(**stored)
        config = stored_config.replace(config_overrides)
        normaliser = NormaliserConfig(**header["normaliser"])
        agent = SchedulerAgent(header["i_max"], config)
        optimizer = payload["optimizer"] if config.learning_rate == stored_config.learning_rate else None
        agent.load_state_dict({"policy": payload["policy"], "value": payload["value"],
                               "optimizer": optimizer, "scale": header["scale"],
                               "updates": header["updates"], "episodes_seen": header["episodes_seen"]})
        meta = SchedulerProvenance.from_json(header["meta"])
    except ConfigError as exc:
        raise ConfigError(f"scheduler checkpoint {path}: {exc}") from None
    except (TypeError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"{path} is not a valid scheduler checkpoint ({FORMAT} version {VERSION}): "
                          f"{type(exc).__name__}: {exc}") from None
    return LoadedScheduler(agent, normaliser, meta)


def _check_payload(payload: Any, path: Path) -> JSONObject:
    """The header of a version-2 payload, after checking the payload's shape and types."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{path} is not a scheduler checkpoint ({FORMAT} version {VERSION}): {why}")

    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise bad(f"its format is {found!r}")
    if payload.get("version") != VERSION:
        raise bad(f"version {payload.get('version')!r} is not supported")
    header = payload.get("header")
    if not isinstance(header, dict) or set(header) != set(HEADER_KEYS):
        raise bad(f"its header must have exactly the keys {sorted(HEADER_KEYS)}")
    if header["features"] != list(FEATURES):
        raise bad(f"it reads features {header['features']}, this code computes {list(FEATURES)}")
    checks = [
        (isinstance(header["i_max"], int) and header["i_max"] >= 1, "i_max must be an integer >= 1"),
        (all(isinstance(header[k], dict) for k in ("normaliser", "agent_config", "scale", "meta")),
         "normaliser, agent_config, scale and meta must be mappings"),
        (all(isinstance(header[k], int) and header[k] >= 0 for k in ("updates", "episodes_seen")),
         "updates and episodes_seen must be integers >= 0"),
    ]
    for ok, why in checks:
        if not ok:
            raise bad(why)
    scale = header["scale"]
    if set(scale) != {"count", "mean", "var"} or not all(
            isinstance(scale[k], int | float) and math.isfinite(scale[k]) for k in scale):
        raise bad("scale must be finite numbers count, mean and var")
    for net in ("policy", "value"):
        weights = payload.get(net)
        if not isinstance(weights, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
            raise bad(f"{net} must map parameter names to tensors")
    if payload.get("optimizer") is not None and not isinstance(payload["optimizer"], dict):
        raise bad("optimizer must be an optimiser state dict or None")
    return header


def shipped_checkpoint(name: str = SHIPPED) -> Path:
    """Path of a scheduler packaged in models/data/schedulers/."""
    path = Path(str(resources.files("models.data").joinpath("schedulers", f"{name}.pt")))
    if not path.exists():
        raise ConfigError(f"no packaged scheduler named {name!r} (packaged: {', '.join(packaged_names())}; "
                          f"or give a checkpoint path or an MLflow URI)")
    return path


def packaged_names() -> list[str]:
    """The schedulers in models/data/schedulers/, by the name `learned:<name>` loads them."""
    folder = Path(str(resources.files("models.data").joinpath("schedulers")))
    return sorted(p.stem for p in folder.glob("*.pt"))


def is_packaged_name(ref: str) -> bool:
    """A bare name (cartpole, hopper): no path separator, no suffix, no URI scheme."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", ref))


def resolve_checkpoint(ref: str) -> Path:
    """A local scheduler checkpoint from a file path, a file:// URI or a packaged name.

    MLflow URIs (runs:/<id>/scheduler/scheduler.pt, models:/...) are not resolved here: which
    MLflow store they name is the run's business, so the flows download them from the run's
    tracking URI first (flows/train.py `localise_scheduler_spec`) and pass the local path.
    """
    ref = ref.strip()
    if ref in ("", SHIPPED):
        return shipped_checkpoint(SHIPPED)
    if is_packaged_name(ref) and not Path(ref).expanduser().exists():
        return shipped_checkpoint(ref)
    if is_mlflow_uri(ref):
        raise ConfigError(f"scheduler checkpoint {ref!r} is an MLflow URI: download it from its "
                          "tracking store first (flows/train.py localise_scheduler_spec does; "
                          "train(scheduler='learned:<uri>') does it with its tracking_uri)")
    if ref.startswith("file://"):
        from urllib.parse import unquote, urlparse

        ref = unquote(urlparse(ref).path)
    path = Path(ref).expanduser()
    if not path.exists():
        raise ConfigError(f"no scheduler checkpoint at {path}")
    return path


def make_learned_scheduler(spec: str | LearnedSpec, i_max: int, max_rounds: int, target_return: float,
                           budget_usd: float | None = None, seed: int = 0) -> LearnedScheduler:
    """The scheduler for 'learned[:<path or packaged name>][:sample]' on this workload (an MLflow
    URI must have been localised by the flow first: see `resolve_checkpoint`)."""
    learned = spec if isinstance(spec, LearnedSpec) else parse_learned_spec(spec)
    path = resolve_checkpoint(learned.ref)
    agent, norm_config, _ = load_scheduler(path)
    if agent.i_max != i_max:
        raise ConfigError(f"scheduler {path} was trained for i_max={agent.i_max}; this run has "
                          f"i_max={i_max}: pass i_max={agent.i_max} or train a scheduler for {i_max}")
    normaliser = StateNormaliser(target_return, max_rounds, budget_usd, norm_config)
    return LearnedScheduler(agent, normaliser, mode=learned.mode, seed=seed, source=learned.source)

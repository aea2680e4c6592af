"""A trained policy as a plain function: a batch of raw observations -> deterministic actions.

What a user runs outside training (the MLflow pyfunc model of flows/policy_model.py wraps it):
the policy file (models/run/checkpoint.py, read with weights_only=True) holds the weights and the
observation statistics; the env's spaces travel beside it as JSON so that no env has to be
built to load the policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.envs.batch import EnvSpaces
from models.json_types import JSONObject
from models.rl.normalization import RunningMeanStd
from models.rl.policy import ActorCritic
from models.run.checkpoint import PolicyArtifact, load_policy


def spaces_to_dict(spaces: EnvSpaces) -> JSONObject:
    """EnvSpaces as JSON-able plain data."""
    return {"obs_shape": list(spaces.obs_shape), "obs_dtype": np.dtype(spaces.obs_dtype).name,
            "discrete": spaces.discrete, "n_actions": spaces.n_actions,
            "action_low": None if spaces.action_low is None else np.asarray(spaces.action_low).tolist(),
            "action_high": None if spaces.action_high is None else np.asarray(spaces.action_high).tolist()}


def spaces_from_dict(raw: JSONObject) -> EnvSpaces:
    def array(x):
        return None if x is None else np.asarray(x, dtype=np.float32)

    return EnvSpaces(tuple(int(n) for n in raw["obs_shape"]), np.dtype(raw["obs_dtype"]), bool(raw["discrete"]),
                     int(raw["n_actions"]), array(raw["action_low"]), array(raw["action_high"]))


class PolicyPredictor:
    """Raw observations in, the policy's deterministic actions out (argmax for discrete actions,
    the Gaussian's mean clipped to the action bounds for continuous ones), normalised with the
    observation statistics the policy was trained with, as evaluation does."""

    def __init__(self, artifact: PolicyArtifact, spaces: EnvSpaces):
        torch.set_num_threads(1)
        self.env_id = artifact.env_id
        self.spaces = spaces
        self.policy = ActorCritic(spaces, artifact.hidden, init_weights=False)
        self.policy.load_state_dict(artifact.policy)
        self.policy.eval()
        self.obs_rms = RunningMeanStd.from_moments(artifact.obs_rms) if artifact.obs_rms else None

    @classmethod
    def load(cls, policy_file: str | Path, spaces_file: str | Path) -> PolicyPredictor:
        """From a policy file (final_policy.pt) and its spaces JSON (spaces_to_dict)."""
        return cls(load_policy(policy_file), spaces_from_dict(json.loads(Path(spaces_file).read_text())))

    def __call__(self, observations: Any) -> np.ndarray:
        obs = np.asarray(observations)
        shape = tuple(self.spaces.obs_shape)
        if obs.shape == shape:  # one observation
            obs = obs[None]
        if obs.shape[1:] != shape:
            raise ValueError(f"{self.env_id} observations have shape {shape}; got a batch of shape {obs.shape}")
        if self.obs_rms is not None:
            obs = self.obs_rms.normalize(obs)
        elif len(shape) != 3:  # image frames stay uint8 until the network scales them
            obs = obs.astype(np.float32)
        actions = self.policy.mode(obs)
        if self.spaces.discrete:
            return actions.astype(np.int64)
        return np.clip(actions, self.spaces.action_low, self.spaces.action_high).astype(np.float32)

"""The trained policy as an MLflow pyfunc model: logged into a real store, loaded in a fresh
process with mlflow.pyfunc.load_model, and played on CartPole."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from flows.policy_model import log_policy_model
from models.envs.batch import env_spaces
from models.rl.normalization import RunningMeanStd
from models.rl.ppo import Learner
from models.rl.predictor import PolicyPredictor, spaces_from_dict, spaces_to_dict
from models.run.checkpoint import PolicyArtifact, save_policy
from models.run.config import PPOConfig

ROOT = Path(__file__).resolve().parents[1]


def cartpole_policy(tmp_path: Path, normalize_obs: bool = True) -> Path:
    """An untrained CartPole policy file, with observation statistics when asked."""
    spaces = env_spaces("CartPole-v1")
    learner = Learner(spaces, PPOConfig(hidden=(16, 16), normalize_obs=normalize_obs), seed=0, device="cpu")
    obs_rms = None
    if normalize_obs:
        rms = RunningMeanStd(spaces.obs_shape)
        rms.update(np.random.default_rng(0).normal([0, 0, 0.1, 0], [1, 2, 0.1, 2], size=(256, 4)))
        obs_rms = rms.moments()
    artifact = PolicyArtifact("CartPole-v1", (16, 16), {k: v.cpu() for k, v in learner.policy.state_dict().items()},
                              obs_rms)
    return save_policy(tmp_path / "final_policy.pt", artifact)


def test_spaces_round_trip_through_json():
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        spaces = env_spaces(env_id)
        back = spaces_from_dict(json.loads(json.dumps(spaces_to_dict(spaces))))
        assert back.obs_shape == spaces.obs_shape and back.obs_dtype == spaces.obs_dtype
        assert (back.discrete, back.n_actions) == (spaces.discrete, spaces.n_actions)


def test_predictor_normalises_then_takes_the_policy_mode(tmp_path):
    policy_file = cartpole_policy(tmp_path)
    spaces = env_spaces("CartPole-v1")
    predictor = PolicyPredictor.load(policy_file, _write_spaces(tmp_path, spaces))
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    actions = predictor(obs)
    assert actions.shape == (5,) and actions.dtype == np.int64
    expected = predictor.policy.mode(predictor.obs_rms.normalize(obs))
    assert np.array_equal(actions, expected)
    assert predictor(obs[0]).shape == (1,)  # one observation is a batch of one
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        predictor(np.zeros((2, 3)))


def _write_spaces(tmp_path: Path, spaces) -> Path:
    path = tmp_path / "spaces.json"
    path.write_text(json.dumps(spaces_to_dict(spaces)))
    return path


PLAY = textwrap.dedent("""
    import json, sys
    import gymnasium as gym
    import mlflow
    import numpy as np
    mlflow.set_tracking_uri(sys.argv[1])
    model = mlflow.pyfunc.load_model(sys.argv[2])
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    steps, done, actions = 0, False, set()
    while not done:
        action = model.predict(np.asarray(obs, dtype=np.float32)[None])
        assert action.shape == (1,), action.shape
        actions.add(int(action[0]))
        obs, reward, terminated, truncated, _ = env.step(int(action[0]))
        steps += 1
        done = terminated or truncated
    import pandas as pd
    frame = model.predict(pd.DataFrame(np.zeros((3, 4), dtype=np.float32)))
    print(json.dumps({"steps": steps, "actions": sorted(actions), "frame": frame.tolist(),
                      "input": str(model.metadata.get_input_schema())}))
""")


def test_logged_model_loads_in_a_fresh_process_and_plays_an_episode(tmp_path, mlflow_uri):
    policy_file = cartpole_policy(tmp_path)
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("policy-model", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    logged = log_policy_model(mlflow_uri, run_id, policy_file, env_spaces("CartPole-v1"),
                              register_as="cartpole-policy")
    client.set_terminated(run_id)
    assert logged.model_uri.startswith("models:/")
    assert logged.registered == "cartpole-policy version 1"
    assert client.get_model_version("cartpole-policy", "1").run_id == run_id

    # A fresh interpreter, outside the checkout: the model's own copy of `models` is imported.
    out = subprocess.run([sys.executable, "-c", PLAY, mlflow_uri, "models:/cartpole-policy/1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    played = json.loads(out.stdout.strip().splitlines()[-1])
    assert 1 <= played["steps"] <= 500
    assert set(played["actions"]) <= {0, 1}
    assert len(played["frame"]) == 3 and set(played["frame"]) <= {0, 1}
    assert "float32" in played["input"] and "(-1, 4)" in played["input"]

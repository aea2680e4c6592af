"""The trained policy as an MLflow pyfunc model: predict maps a batch of raw observations to
actions (models/rl/predictor.py), the observation statistics inside.

Logged as "models from code": MLflow stores this file and runs it when the model is loaded, and
the model's artifacts are the policy file (read with torch.load(weights_only=True) through
models/run/checkpoint.py) and the env's spaces as JSON. Nothing of ours is pickled; the pure
`models` package travels with the model (code_paths), so loading needs torch, numpy and
gymnasium but not this project installed.

    import mlflow
    policy = mlflow.pyfunc.load_model("models:/<model id>")   # or models:/<registered name>/<version>
    actions = policy.predict(observations)                    # shape (n, *obs_shape) -> (n,) or (n, act_dim)
"""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

POLICY_KEY, SPACES_KEY = "policy", "spaces"
MODEL_NAME = "policy_model"
"""The logged model's name (MLflow 3: a LoggedModel of the run). Not "policy": MLflow resolves
runs:/<run>/<name> to a logged model of that name first, which would hide the run's policy/
folder (final_policy.pt)."""


# MLflow asks for an input example (logging would then load and run the model): the
# signature says it all here.
QUIET = (".*An input example was not provided",)


class PolicyModel(PythonModel):
    """MLflow's view of PolicyPredictor: artifacts in load_context, numpy or a DataFrame in predict."""

    def load_context(self, context):
        from models.rl.predictor import PolicyPredictor

        self.predictor = PolicyPredictor.load(context.artifacts[POLICY_KEY], context.artifacts[SPACES_KEY])

    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        # np.ndarray: a hint MLflow leaves alone (no conversion of its own), DataFrames pass too
        if hasattr(model_input, "to_numpy"):  # a DataFrame: one row per observation
            model_input = model_input.to_numpy()
        return self.predictor(model_input)


if __name__.startswith("code_model_"):  # run by MLflow to load (or save) the model from code
    mlflow.models.set_model(PolicyModel())


@dataclass(frozen=True)
class LoggedPolicyModel:
    """Where the logged model is."""

    model_uri: str
    """models:/<model id>: what mlflow.pyfunc.load_model takes."""
    registered: str | None = None
    """'<name> version <n>' when it was registered."""


def policy_signature(spaces):
    """Input: a batch of raw observations; output: a batch of actions."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    # Unnamed: one tensor in, one out (a DataFrame input then arrives as one array).
    obs = TensorSpec(np.dtype(spaces.obs_dtype), (-1, *spaces.obs_shape))
    if spaces.discrete:
        act = TensorSpec(np.dtype(np.int64), (-1,))
    else:
        act = TensorSpec(np.dtype(np.float32), (-1, spaces.n_actions))
    return ModelSignature(inputs=Schema([obs]), outputs=Schema([act]))


def requirements() -> list[str]:
    """Pinned to what trained it; given explicitly, so MLflow need not load the model in a
    subprocess to infer them."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}" for name in ("mlflow", "torch", "numpy", "gymnasium")]


def predictor_code(dest: Path) -> Path:
    """A copy of the `models` modules the predictor imports (and the package's data tables),
    without the rest: what travels with every logged model."""
    import ast
    import shutil

    source = Path(__file__).resolve().parents[1] / "models"
    out = dest / "models"
    (out / "data").mkdir(parents=True)
    todo, seen = ["rl.predictor"], set()
    while todo:
        name = todo.pop()  # dotted, below models: "rl.predictor"
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((source / f"{name.replace('.', '/')}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("models."):
                todo.append(node.module.removeprefix("models."))
    packages = {"__init__"} | {f"{name.rsplit('.', 1)[0]}.__init__" for name in seen if "." in name}
    for name in seen | packages:
        target = out / f"{name.replace('.', '/')}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / f"{name.replace('.', '/')}.py", target)
    for data in (source / "data").glob("*.*"):
        shutil.copy2(data, out / "data" / data.name)
    return out


def log_policy_model(tracking_uri: str, run_id: str, policy_file: str | Path, spaces,
                     register_as: str | None = None, step: int = 0) -> LoggedPolicyModel:
    """Log the policy file as a pyfunc model of run `run_id` in `tracking_uri` (and register it
    as `register_as`); `step`: the round whose metrics the model is linked to."""
    from mlflow.models import Model
    from mlflow.tracking import MlflowClient
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from models.rl.predictor import spaces_to_dict

    with tempfile.TemporaryDirectory() as tmp:
        models_dir = predictor_code(Path(tmp) / "code")
        spaces_file = Path(tmp) / "spaces.json"
        spaces_file.write_text(json.dumps(spaces_to_dict(spaces)))
        # The model is created here, in the run's experiment: left to itself, Model.log puts it
        # in the process's active experiment (the Default one), not the run's.
        client = MlflowClient(tracking_uri)
        run = client.get_run(run_id)
        model = client.create_logged_model(run.info.experiment_id, name=MODEL_NAME, source_run_id=run_id,
                                           params=run.data.params, model_type="policy")
        # Model logging resolves its store from the process-wide tracking URI: set for this call only.
        with _use_tracking_uri(tracking_uri), warnings.catch_warnings():
            for message in QUIET:
                warnings.filterwarnings("ignore", message=message)
            info = Model.log(artifact_path=None, name=MODEL_NAME, flavor=mlflow.pyfunc, model_id=model.model_id,
                             flavor_name="pyfunc.ModelFromCode",
                             run_id=run_id, step=step, python_model=str(Path(__file__).resolve()),
                             artifacts={POLICY_KEY: str(policy_file), SPACES_KEY: str(spaces_file)},
                             code_paths=[str(models_dir)], signature=policy_signature(spaces),
                             pip_requirements=requirements(), registered_model_name=register_as,
                             await_registration_for=0)
    registered = (f"{register_as} version {info.registered_model_version}"
                  if register_as and info.registered_model_version is not None else None)
    return LoggedPolicyModel(info.model_uri, registered)

"""MLflow for a training run: the flow owns one run and writes to it by id; workers never do."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from models.errors import ConfigError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
# MLflow itself (1.2 s to import) loads when a run is opened, not when a command line checks its input

REACH_TIMEOUT_S = 5.0
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""MLflow 3's UI opens an experiment without this tag in its GenAI view (traces, evaluation);
with it, in the model-training view (runs, metrics, charts). The key and value are the UI's
own (its ExperimentKind enum in mlflow/server/js), the same the UI sets when a user picks
"Machine learning" for an experiment."""

RUNS_VIEW = "minionsrl"
"""The shared view of the runs table (open it with ?viewStateShareKey=minionsrl): MLflow 3 shows
no metric column until a user picks some, so each experiment carries a view with the key ones."""
RUNS_VIEW_COLUMNS = ("metrics.`summary/target_reached`", "metrics.`summary/time_to_stop_s`",
                     "metrics.`summary/cost_usd`", "metrics.`rollout/ep_return_mean`",
                     "metrics.`cost/total_usd`", "tags.`minionsrl.scheduler`", "params.`seed`")
"""Return, time to J and cost, as the UI names columns (`<type>.` + backquoted name). The UI
reads the tag `mlflow.sharedViewState.<key>` as JSON and fills every field left out with its
defaults (mlflow/server/js: the experiment page's shared-view loader)."""


def runs_view_tags() -> dict[str, str]:
    return {f"mlflow.sharedViewState.{RUNS_VIEW}": json.dumps({"selectedColumns": list(RUNS_VIEW_COLUMNS)})}


def project_root() -> Path:
    """The checkout (for an editable install) or else the working directory."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite store inside the project folder (absolute path,
    so that flows started elsewhere, e.g. by a worker, write to the same store)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    store = project_root() / "mlruns"
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


def flow_run_tags() -> dict[str, str]:
    """The Prefect flow run this process is in, as an MLflow tag (none outside a flow run)."""
    from prefect.runtime import flow_run

    return {"prefect.flow_run_id": str(flow_run.id)} if flow_run.id else {}


def flatten(params: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys: {'ppo': {'gamma': 0.9}} -> {'ppo.gamma': '0.9'}."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def tracked_run(tracking_uri: str | None = None) -> RunTracker:
    """The one MLflow run a flow owns, as a context manager (every flow uses it):

        with tracked_run(cfg.tracking_uri) as tracker:  # the store checked: fails in seconds
            tracker.start(experiment, name, params, tags, parent_run_id=...)  # or resume=run_id
            ...

    `start` names the run `<name>__<time>` and tags it with this Prefect flow run's id and its
    parent; leaving the block ends it FINISHED, KILLED (Ctrl-C, a cancellation or a termination
    signal) or FAILED, with the reason in the tag minionsrl.failure."""
    return RunTracker(tracking_uri)


KILLED_BY = (KeyboardInterrupt, SystemExit)
"""Exceptions that end a run KILLED rather than FAILED: the user or the system stopped it
(Prefect's TerminationSignal, raised on SIGTERM, is a SystemExit)."""


class RunTracker:
    """One MLflow run: params once, metrics in batches with step = round index.

    Metrics are written by one background thread, in order (~15 ms a round on the SQLite
    store, measured, no longer between rounds); `flush()` waits for them, and every read of
    the run's metrics and `finish()` flush first. A crash can lose the last round's metrics
    before they reach the store: the round's checkpoint holds them, and a resume logs them
    (flows/train.py settle_crashed_round)."""

    def __init__(self, tracking_uri: str | None = None):
        self.tracking_uri = tracking_uri or default_tracking_uri()
        self._client: MlflowClient | None = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def __enter__(self) -> RunTracker:
        self.check_reachable()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.finish("FINISHED")
        else:
            self.finish("KILLED" if isinstance(exc, KILLED_BY) else "FAILED", exc)

    def check_reachable(self) -> None:
        """Fail in seconds, naming the store, before anything is started: a SQLite store's folder
        must be writable, an HTTP tracking server must answer its /health."""
        uri = self.tracking_uri
        if uri.startswith("sqlite:///"):
            folder = Path(uri.removeprefix("sqlite:///")).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"MLflow store {uri}: cannot create its folder ({exc})") from None
            if not os.access(folder, os.W_OK):
                raise ConfigError(f"MLflow store {uri}: its folder {folder} is not writable")
        elif uri.startswith(("http://", "https://")):
            try:
                with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=REACH_TIMEOUT_S) as reply:
                    reply.read()
            except (urllib.error.URLError, OSError) as exc:
                raise ConfigError(f"MLflow tracking server {uri} is unreachable: {exc}") from None

    def open(self) -> None:
        """Connect to the store (slow the first time in a process: imports and migrations).

        A new SQLite store is created under a file lock: several trainings started at once on
        one new store would otherwise race to create its schema, and all but one fail."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            with self._store_lock():
                client = MlflowClient(self.tracking_uri)
                client.search_experiments(max_results=1)
            self._client = client

    def require_run(self, run_id: str) -> None:
        """The run a resume continues must exist in this store (checked before actors start)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException as exc:
            raise ConfigError(f"MLflow run {run_id} not found in {self.tracking_uri}: resume against the "
                              f"store the run was made in ({str(exc)[:200]})") from None

    @contextlib.contextmanager
    def _store_lock(self) -> Iterator[None]:
        if not self.tracking_uri.startswith("sqlite:///"):
            yield
            return
        lock_path = self.tracking_uri.removeprefix("sqlite:///") + ".lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @property
    def client(self) -> MlflowClient:
        self.open()
        return self._client

    def start(self, experiment: str, run_name: str, params: Mapping[str, object],
              tags: dict[str, str] | None = None, parent_run_id: str | None = None) -> str:
        """Start a new run named `<run_name>__<time>`, tagged with this Prefect flow run and, when
        given, nested under `parent_run_id`."""
        tags = {**(tags or {}), **flow_run_tags()}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        return self._create(experiment, f"{run_name}__{time.strftime('%Y%m%d-%H%M%S')}", params, tags)

    def resume(self, run_id: str) -> str:
        """Reopen run `run_id` (RUNNING again) to continue it; a failure tag of an earlier attempt
        stays until the run ends (finish replaces or removes it)."""
        self.run_id = run_id
        self.experiment_id = self.client.get_run(run_id).info.experiment_id
        self._mark_training_experiment(self.client.get_experiment(self.experiment_id).tags)
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def _create(self, experiment: str, run_name: str, params: Mapping[str, object], tags: dict[str, str]) -> str:
        self.open()  # before the lock: open() takes it too (flock is not re-entrant)
        with self._store_lock():  # two runs creating one experiment at once: one creates it
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                location = None
                if self.tracking_uri.startswith("sqlite:///"):
                    # Keep artifacts beside the store, not in whatever the working directory is.
                    store_dir = Path(self.tracking_uri.removeprefix("sqlite:///")).parent
                    location = (store_dir / "artifacts").as_uri()
                self.experiment_id = self.client.create_experiment(
                    experiment, artifact_location=location, tags={**EXPERIMENT_KIND, **runs_view_tags()})
            else:
                self.experiment_id = found.experiment_id
                self._mark_training_experiment(found.tags)
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        flat = flatten(params)
        items = [Param(k, v[:6000]) for k, v in flat.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])
        return self.run_id

    def _mark_training_experiment(self, tags: dict[str, str]) -> None:
        """An experiment made before the tags existed gets them; a kind a user chose stays."""
        for key, value in {**EXPERIMENT_KIND, **runs_view_tags()}.items():
            if key not in tags:
                self.client.set_experiment_tag(self.experiment_id, key, value)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Queue one step's metrics for the writer thread (timestamped now)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items()
                 if v is not None and math.isfinite(float(v))]
        client, run_id = self.client, self.run_id
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="mlflow-metrics")
        self._pending.append(self._writer.submit(client.log_batch, run_id, metrics=batch))

    def flush(self) -> None:
        """Wait until every queued metric is in the store; raise the first write's error."""
        pending, self._pending = self._pending, []
        errors = [f.exception() for f in pending]
        if first := next((e for e in errors if e is not None), None):
            raise first

    def has_metric_at(self, key: str, step: int) -> bool:
        self.flush()
        return any(m.step == step for m in self.client.get_metric_history(self.run_id, key))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, value)

    def finish(self, status: str = "FINISHED", failure: BaseException | None = None) -> None:
        """End the run; a failed run carries its reason in the tag minionsrl.failure."""
        if self.run_id is None:
            return
        unwritten = None
        try:
            self.flush()
        except Exception as exc:  # the run's record is incomplete: it failed, and says why
            unwritten = exc
            status, failure = "FAILED", failure or exc
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
        if failure is not None:
            self.client.set_tag(self.run_id, "minionsrl.failure", f"{type(failure).__name__}: {failure}"[:5000])
        elif status == "FINISHED" and "minionsrl.failure" in self.client.get_run(self.run_id).data.tags:
            self.client.delete_tag(self.run_id, "minionsrl.failure")  # an earlier attempt's, now resumed
        self.client.set_terminated(self.run_id, status=status)
        if unwritten is not None and failure is unwritten:  # nothing else failed: the flow must
            raise unwritten

    def run_url_hint(self) -> str:
        from models.report.run_report import MODEL_TRAINING_UI

        return (f"mlflow ui --backend-store-uri {self.tracking_uri} --host 127.0.0.1 "
                f"(experiment {self.experiment_id}, run {self.run_id}; the runs with their key "
                f"columns: #/experiments/{self.experiment_id}/runs?viewStateShareKey={RUNS_VIEW}&{MODEL_TRAINING_UI})")

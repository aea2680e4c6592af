"""Screenshots of what a user sees: the Prefect flow-run page and the MLflow run and compare pages.

    .venv/bin/python -m benchmarks.screenshots [--out docs/screenshots]

Needs Debian's Chromium (`apt-get install -y chromium`); not part of the test suite. Starts a
Prefect server with its UI and an MLflow UI on 127.0.0.1 (free ports, everything in a temporary
folder), runs two short CartPole-v1 trainings against them (Fixed(4) and Adapt, seed 0), then
takes headless screenshots of:

- prefect_flow_run.png: the `train` flow run page (round subflows, task runs on the timeline);
- prefect_summary.png, prefect_rounds.png: the run's summary and round-table artifacts;
- mlflow_experiment.png: the workload's experiment, its training runs in the shared view with
  return, time to J and cost as columns (flows/tracking.py RUNS_VIEW);
- mlflow_run.png: the Fixed(4) run's page (metrics, params, the logged model);
- mlflow_compare.png: the two runs compared.

Everything is torn down at the end; the PNGs stay in --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from deployments.local_stack import free_port, kill_tree
from flows.tracking import RUNS_VIEW
from models.report.run_report import MODEL_TRAINING_UI, artifact_key

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WINDOW = "1500,1100"


def wait_http(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def latest_artifact_id(api: str, key: str) -> str:
    """The id of the newest version of the artifact `key`, from the Prefect API."""
    body = json.dumps({"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC", "limit": 1}).encode()
    request = urllib.request.Request(f"{api}/artifacts/filter", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        (artifact,) = json.loads(reply.read())
    return artifact["id"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("Chromium not found: install Debian's package (apt-get install -y chromium)")


def screenshot(browser: str, url: str, out: Path, wait_ms: int = 20000) -> None:
    """One page, headless, after `wait_ms` of virtual time for the single-page app to render."""
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WINDOW}", f"--virtual-time-budget={wait_ms}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=180)
    print(f"{out}  <-  {url}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--max-rounds", type=int, default=6)
    args = parser.parse_args(argv)
    browser = chromium()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="minionsrl-shots-"))
    prefect_port, mlflow_port = free_port(), free_port()
    api = f"http://127.0.0.1:{prefect_port}/api"
    store = f"sqlite:///{tmp / 'mlflow.db'}"
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_API_URL": api,
           "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT)}
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
            env=env, stdout=open(tmp / "prefect.log", "wb"), stderr=subprocess.STDOUT))  # noqa: SIM115
        # the store's tables first, so the UI and the trainings do not race to create them
        subprocess.run([sys.executable, "-c", f"import mlflow; mlflow.MlflowClient({store!r}).search_experiments()"],
                       env=env, check=True, capture_output=True)
        processes.append(subprocess.Popen(
            [str(BIN / "mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
             "--port", str(mlflow_port), "--default-artifact-root", str(tmp / "artifacts")],
            env=env, stdout=open(tmp / "mlflow.log", "wb"), stderr=subprocess.STDOUT))  # noqa: SIM115
        wait_http(f"{api}/health")
        wait_http(f"http://127.0.0.1:{mlflow_port}/health")
        for scheduler in ("fixed:4", "adapt"):
            subprocess.run([sys.executable, "-m", "flows.train", "--env", "CartPole-v1", "--scheduler",
                            scheduler, "--seed", "0", "--max-rounds", str(args.max_rounds),
                            "--tracking-uri", store, "--checkpoint-dir", str(tmp / "checkpoints")],
                           env=env, check=True, cwd=ROOT)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(store)
        experiment = client.get_experiment_by_name("minionsrl/CartPole-v1")
        runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
        fixed = next(r for r in runs if r.data.tags.get("minionsrl.scheduler", "").startswith("fixed"))
        flow_run = fixed.data.tags["prefect.flow_run_id"]
        prefect_ui = f"http://127.0.0.1:{prefect_port}"
        mlflow_ui = f"http://127.0.0.1:{mlflow_port}"
        exp_id = experiment.experiment_id
        screenshot(browser, f"{prefect_ui}/runs/flow-run/{flow_run}", out / "prefect_flow_run.png")
        for kind in ("summary", "rounds"):
            # the artifact's own page shows its content (the key's page only lists its versions)
            artifact = latest_artifact_id(api, artifact_key(kind, fixed.info.run_id))
            screenshot(browser, f"{prefect_ui}/artifacts/artifact/{artifact}", out / f"prefect_{kind}.png")
        screenshot(browser, f"{mlflow_ui}/#/experiments/{exp_id}/runs?viewStateShareKey={RUNS_VIEW}"
                   f"&{MODEL_TRAINING_UI}",
                   out / "mlflow_experiment.png")
        screenshot(browser, f"{mlflow_ui}/#/experiments/{exp_id}/runs/{fixed.info.run_id}?{MODEL_TRAINING_UI}",
                   out / "mlflow_run.png")
        ids = json.dumps([r.info.run_id for r in runs])
        query = urllib.parse.urlencode({"runs": ids, "experiments": json.dumps([exp_id]),
                                        "workflowType": "machine_learning"})
        screenshot(browser, f"{mlflow_ui}/#/compare-runs?{query}", out / "mlflow_compare.png")
    finally:
        for process in reversed(processes):
            kill_tree(process)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Copy an experiment flow's plot and results file from its MLflow parent run into the repository
(issue 35, point 4: each figure a plot and a results file beside the results page).

    .venv/bin/python -m benchmarks.figure_export --tracking-uri sqlite:////work/main/mlruns/figures/figures.db \
        --run-id <parent run> --name motivation_cartpole

writes benchmarks/results/<name>.png and <name>.json (the run's results/results.json, with the run's
id, its start and end time, and the commit checked out here added under "export") and prints the
rows as a markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from benchmarks.table2_page import utc_text
from models.report.experiment_stats import markdown_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def export(client: MlflowClient, run_id: str, name: str, out: Path = RESULTS) -> dict:
    """The run's first plot and its results file, copied to out/<name>.png and out/<name>.json."""
    run = client.get_run(run_id)
    plots = [a.path for a in client.list_artifacts(run_id, "plots") if a.path.endswith(".png")]
    if not plots:
        raise SystemExit(f"run {run_id} has no plot under plots/: is it an experiment's parent run?")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(client.download_artifacts(run_id, plots[0], tmp), out / f"{name}.png")
        results = json.loads(Path(client.download_artifacts(run_id, "results/results.json", tmp)).read_text())
    results["export"] = {"run_id": run_id, "run_name": run.info.run_name, "started": utc_text(run.info.start_time),
                         "ended": utc_text(run.info.end_time), "commit_checked_out": commit}
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--run-id", required=True, help="the experiment's MLflow parent run")
    parser.add_argument("--name", required=True, help="the files' stem under benchmarks/results")
    args = parser.parse_args()
    results = export(MlflowClient(args.tracking_uri), args.run_id, args.name)
    print(json.dumps(results["export"]))
    print(markdown_table(results.get("rows", [])))


if __name__ == "__main__":
    main()

"""Issue 34, point 4: the `train` deployment started with `prefect deployment run` and run by a
process worker, against the CLI's `train(...)`, on the same stock server, in one run.

For each database (`sqlite`, `postgres`): `prefect server start` as a user runs it, unpatched
(deployments/local_stack.py `stock=True`), the process pool, `prefect deploy --name
train/cartpole`, a process worker; then, the order alternating by repeat, (a) `prefect
deployment run 'train/cartpole'` (CartPole-v1 Fixed(N), --rounds rounds, the local backend) and
(b) benchmarks/round_overhead.py with `--api-url` that server (the same flow called in a fresh
process, as `python -m flows.train` does). Both read the same MLflow figures (round wall and
orchestration, medians of rounds 1..). Goal: the deployment's rounds within 1.5x of the CLI's.

    .venv/bin/python -m benchmarks.deployment_rounds --actors 8 --rounds 10 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deployment_run(stack, args: argparse.Namespace, tracking_uri: str, tag: str) -> dict:
    """`prefect deployment run 'train/cartpole'`, waited for; its rounds' figures from MLflow."""
    from mlflow.tracking import MlflowClient
    from prefect import get_client

    from benchmarks.round_overhead import round_figures

    experiment = f"benchmark/deployment-rounds-{tag}"
    started = time.perf_counter()
    out = stack.cli("deployment", "run", "train/cartpole", "-p", "env=CartPole-v1", "-p", "backend=local",
                    "-p", f"scheduler=fixed:{args.actors}", "-p", f"max_rounds={args.rounds}",
                    "-p", "fragment=512", "-p", "target_return=1000000000.0", "-p", "budget_usd=100.0",
                    "-p", "seed=0", "-p", f"tracking_uri={tracking_uri}", "-p", f"experiment={experiment}")
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out.stdout).group(1)
    with stack.client_env(), get_client(sync_client=True) as client:
        while not (run := client.read_flow_run(flow_run_id)).state.is_final():
            if time.perf_counter() - started > args.timeout_s:
                raise TimeoutError(f"deployment run {flow_run_id} not done in {args.timeout_s} s")
            time.sleep(1)
    if not run.state.is_completed():
        raise RuntimeError(f"deployment run {flow_run_id}: {run.state}\n"
                           + (stack.logs / "worker.log").read_text()[-4000:])
    mlflow = MlflowClient(tracking_uri)
    (mlrun,) = mlflow.search_runs([mlflow.get_experiment_by_name(experiment).experiment_id])
    return round_figures(tracking_uri, mlrun.info.run_id, args.actors) | {
        "start_to_end_s": time.perf_counter() - started}


def cli_run(stack, args: argparse.Namespace, tmp: Path, tag: str) -> dict:
    """benchmarks/round_overhead.py in a fresh process against the stack's server."""
    out = tmp / f"{tag}.json"
    subprocess.run([sys.executable, "-m", "benchmarks.round_overhead", "--actors", str(args.actors),
                    "--rounds", str(args.rounds), "--api-url", stack.api_url, "--json", str(out)],
                   check=True, cwd=ROOT, env={**stack.env})
    (row,) = json.loads(out.read_text())
    return row


def main(argv: list[str] | None = None) -> None:
    from deployments.local_stack import prefect_stack

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--databases", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--json", type=Path, help="also write every run's row here")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="minionsrl-deployment-rounds-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            uri = f"sqlite:///{tmp / f'mlflow-{database}.db'}"
            with prefect_stack(tmp / f"stack-{database}", uri, deployments=("train/cartpole",),
                               database=database, stock=True) as stack:
                for repeat in range(args.repeats):
                    order = ("deployment", "cli") if repeat % 2 == 0 else ("cli", "deployment")
                    for how in order:
                        tag = f"{database}-{repeat}-{how}"
                        row = (deployment_run(stack, args, uri, tag) if how == "deployment"
                               else cli_run(stack, args, tmp, tag))
                        rows.append(row | {"database": database, "how": how, "repeat": repeat})
                        print(f"{tag}: round wall {row['round_wall_s']:.3f} s, orchestration "
                              f"{row['overhead_s']:.3f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{args.actors} actors, {args.rounds} rounds, medians over {args.repeats} runs each, stock server\n")
    print("| database | how | round wall (s) | orchestration per round (s) | deployment / CLI round wall |")
    print("|---|---|---|---|---|")
    for database in args.databases:
        med = {how: {key: statistics.median(r[key] for r in rows if r["database"] == database and r["how"] == how)
                     for key in ("round_wall_s", "overhead_s")} for how in ("cli", "deployment")}
        ratio = med["deployment"]["round_wall_s"] / med["cli"]["round_wall_s"]
        for how in ("cli", "deployment"):
            verdict = (f"{ratio:.2f}x (goal 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})"
                       if how == "deployment" else "")
            print(f"| {database} | {how} | {med[how]['round_wall_s']:.3f} | {med[how]['overhead_s']:.3f} | {verdict} |")


if __name__ == "__main__":
    main()

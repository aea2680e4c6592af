"""The Table 2 results page, generated from a `table2` run's results file (issue 35, point 6).

    .venv/bin/python -m benchmarks.table2_page --tracking-uri sqlite:////work/main/mlruns/table2/t.db \
        --table table2 --out docs/table2.md --json benchmarks/results/table2.json

Reads the newest parent run of the table (tag minionsrl.table) and its results/results.json, and
writes one table per workload with the command that reproduces it, the dates its cells ran, the
code fingerprint and the commit that has it, and the machine; `--json` keeps a copy of the file.
`--figure` also draws the learned row's actors per round on every seed (with the training return
they drove) from its cells' records, and states each run's phases next to the paper's three
(many actors, fewer, more). `--cells DIR` exports every cell's record (the parent run's
finished_runs/*.mrlw) for `table2 --carry DIR` on another machine, and their last evaluations
(last_evaluations.json: a carried cell's MLflow run stays behind, the page reads them from there).
`--code-root DIR` names the
commit of a checkout of the cells' code (a worktree) when this checkout's is newer. On locomotion
workloads each table is followed by what the body did at each run's last evaluation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from models.envs.locomotion import probe_for  # noqa: E402
from models.report.experiment_resume import (  # noqa: E402
    FINISHED_DIR,
    FinishedRun,
    encode_finished,
    finished_run_file,
    read_carried,
)
from models.report.experiment_stats import phase_shape, phases  # noqa: E402
from models.report.table2_cells import (  # noqa: E402
    DEFAULT_SYSTEMS,
    LEARNED,
    code_fingerprint,
    is_learned,
    learned_ref,
)
from models.report.table2_rows import (  # noqa: E402
    EVALUATIONS_FILE,
    LastEvaluation,
    body_table,
    evaluations_json,
    page_table,
    parse_evaluations,
)

ROOT = Path(__file__).resolve().parents[1]


def utc_text(ms: int | None) -> str:
    """An MLflow time (ms since the epoch) as the results pages write it."""
    return dt.datetime.fromtimestamp((ms or 0) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _commit(code: str, root: Path = ROOT) -> str:
    """The commit checked out at `root` (this checkout, or --code-root's), if its code is the one
    the cells ran with."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"
    same = code_fingerprint(root) == code
    return f"{head}" if same else f"not {head} (its code differs from the cells'); fingerprint {code[:12]}"


def _systems(workload: str, results: dict) -> list[str]:
    """The table's rows of a workload: its finished cells' systems and its missing ones', in the
    order of the default rows (others after them)."""
    found = {c["system"] for c in results["cells"] if c["workload"] == workload}
    found |= {label.split(" / ")[1] for label in results["missing"] if label.startswith(f"{workload} / ")}
    order = {system: i for i, system in enumerate(DEFAULT_SYSTEMS)}
    order.update({s: order[LEARNED] for s in found if is_learned(s)})  # named learned rows after `learned`
    return sorted(found, key=lambda system: (order.get(system, len(order)), system != LEARNED, system))


def _learned_option(workload: str, results: dict) -> str:
    """` --learned <workload>=<ref>` when the learned row ran another scheduler than the workload's own."""
    rows = {c["row"] for c in results["cells"] if c["workload"] == workload and c["system"] == LEARNED}
    refs = {row.removeprefix("learned (").removesuffix(")").removesuffix(", transferred") for row in rows}
    own, _ = learned_ref(workload, {})
    return "".join(f" --learned {workload}={ref}" for ref in sorted(refs) if ref != own)


Records = dict[tuple[str, int], FinishedRun]


def cell_records(client: MlflowClient, parent_id: str) -> Records:
    """The finished-run records a table's parent run keeps (every cell: run, kept or carried in)."""
    with tempfile.TemporaryDirectory() as tmp:
        if not client.list_artifacts(parent_id, FINISHED_DIR):
            return {}
        local = Path(client.download_artifacts(parent_id, FINISHED_DIR, tmp))
        return {(r.label, r.seed): r for r in read_carried([local])}


def record_of(records: Records, cell: dict) -> FinishedRun | None:
    """A cell's record, if it is the run the results file reports (a later, interrupted call with
    other code or settings may have replaced it)."""
    record = records.get((f"{cell['workload']} / {cell['row']}", cell["seed"]))
    run = None if record is None else record.summary if record.summary is not None else record.impact
    return record if run is not None and run.run_id == cell["run_id"] else None


def _span_ms(client: MlflowClient, cell: dict, record: FinishedRun | None) -> tuple[int, int] | None:
    """When a cell ran (ms since the epoch): its rounds, from its record; else its MLflow run here."""
    summary = record.summary if record is not None else None
    if summary is not None and math.isfinite(summary.rounds_started_at) and math.isfinite(summary.rounds_finished_at):
        return int(summary.rounds_started_at * 1000), int(summary.rounds_finished_at * 1000)
    try:
        info = client.get_run(cell["run_id"]).info
    except Exception:  # MlflowException: a cell carried in from another store, without dates
        return None
    return info.start_time, info.end_time or info.start_time


EVALUATION_METRICS = {"return_mean": "eval/return_mean", "length_mean": "eval/length_mean",
                      "displacement_mean": "eval/forward_displacement_mean",
                      "displacement_min": "eval/forward_displacement_min"}


def last_evaluation(client: MlflowClient, run_id: str) -> LastEvaluation | None:
    """A run's last evaluation from its MLflow metrics; None if it has none or is not in this store."""
    try:
        history = {field: client.get_metric_history(run_id, key) for field, key in EVALUATION_METRICS.items()}
    except MlflowException:  # a cell carried in from another store
        return None
    if not history["return_mean"]:
        return None
    last = max(m.step for m in history["return_mean"])
    return LastEvaluation(**{field: next((m.value for m in metrics if m.step == last), math.nan)
                             for field, metrics in history.items()})


Evaluations = dict[str, LastEvaluation]
"""A cell's last evaluation by its run id."""


def cell_evaluations(client: MlflowClient, results: dict, known: Evaluations) -> Evaluations:
    """Each cell's last evaluation: from its MLflow run in this store, else from `known` (the file
    exported beside cells' records: a cell carried in from another store has no run here)."""
    found = {}
    for cell in results["cells"]:
        if (ev := last_evaluation(client, cell["run_id"]) or known.get(cell["run_id"])) is not None:
            found[cell["run_id"]] = ev
    return found


def body_lines(workload: str, results: dict, evaluations: Evaluations) -> list[str]:
    """What the body did at each row's last evaluations (locomotion envs only): J's meaning."""
    if probe_for(results["workloads"][workload]["env"]) is None:
        return []
    rows: dict[str, list[LastEvaluation]] = {}
    for cell in results["cells"]:
        if cell["workload"] == workload and (ev := evaluations.get(cell["run_id"])) is not None:
            rows.setdefault(cell["row"], []).append(ev)
    unknown = sorted({c["row"] for c in results["cells"] if c["workload"] == workload and c["run_id"] not in evaluations})
    lines = ["What the body did at each run's last evaluation (5 deterministic episodes; the one that "
             "reached J where the run did), means over the seeds:", "", body_table(rows), ""] if rows else []
    if unknown:
        lines += [f"Not known for some cells of: {', '.join(unknown)} (carried in without their evaluations).", ""]
    return lines


def render(client: MlflowClient, table: str, experiment: str, code_root: Path = ROOT,
           known: Evaluations | None = None) -> tuple[str, dict, Records, Evaluations]:
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.`minionsrl.table` = '{table}'",
                              order_by=["attributes.start_time DESC"], max_results=1) if found else []
    if not runs:
        raise SystemExit(f"no table {table!r} in experiment {experiment!r}")
    parent = runs[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = json.loads(Path(client.download_artifacts(parent.info.run_id, "results/results.json", tmp)).read_text())
    tags = parent.data.tags
    records = cell_records(client, parent.info.run_id)
    evaluations = cell_evaluations(client, results, known or {})
    lines = [f"# Table 2: {table}", "",
             f"Generated by `benchmarks/table2_page.py` from MLflow run `{parent.info.run_id}` (experiment "
             f"`{experiment}`); machine: {' '.join(tags.get('minionsrl.table.machine', 'not recorded').split()).replace(' ,', ',')}; code: commit "
             f"{_commit(tags.get('minionsrl.table.code', ''), code_root)}. Time is the cloud clock (each round's P_k "
             "plus its measured orchestration; IMPACT's from its virtual-time executor), wall beside it; "
             "means over the seeds done.", ""]
    for name, rows in results["tables"].items():
        mine = [c for c in results["cells"] if c["workload"] == name]
        spans = [s for c in mine if (s := _span_ms(client, c, record_of(records, c))) is not None]
        carried = sum(bool(c.get("carried")) for c in mine)
        when = (f"cells ran {utc_text(min(s[0] for s in spans))} to {utc_text(max(s[1] for s in spans))}"
                if spans else "cells ran at dates not recorded")
        when += f" ({carried} of {len(mine)} carried in from an earlier store)" if carried else ""
        settings = {k: v for k, v in results["workloads"][name].items() if v is not None and k not in ("env", "preset")}
        systems = _systems(name, results)
        lines += [f"## {name}", "",
                  f"`python -m flows.experiments table2 --table {table} --workloads {name} --seeds "
                  f"{' '.join(map(str, results['seeds'][name]))}"
                  + (f" --systems {' '.join(systems)}" if set(systems) != set(DEFAULT_SYSTEMS) else "")
                  + _learned_option(name, results)
                  + (f" --workload-settings '{json.dumps({name: settings})}'" if settings else "") + "`; "
                  f"{when}.", "", page_table(rows), ""]
        checks = {k: v for k, v in results["checks"].items() if k.startswith(f"{name}: ")}
        lines += [f"- {k.split(': ', 1)[1]}: {'yes' if v else 'no'}" for k, v in checks.items()]
        lines.append("")
        lines += body_lines(name, results, evaluations)
    if results["missing"]:
        lines += [f"Missing cells ({len(results['missing'])}): " + ", ".join(results["missing"]), ""]
    return "\n".join(lines), results, records, evaluations


def schedule_figure(records: Records, results: dict, out: Path, page: Path,
                    which: Callable[[str], bool] = is_learned) -> str:
    """Per workload and row that `which` picks (the learned ones: `learned`, `learned:<ref>`), its actors per round and training
    return on each seed: one figure (`out`), and the markdown that states each run's phases (mean
    actors over the first, middle and last third of its rounds) next to the paper's many-fewer-more;
    `page` is where the markdown goes (the figure's link is relative to it)."""
    columns = [(w, s) for w in results["tables"] for s in _systems(w, results) if which(s)
               and any(c["workload"] == w and c["system"] == s for c in results["cells"])]
    if not columns:
        return ""
    fig, axes = plt.subplots(2, len(columns), figsize=(6 * len(columns), 7), squeeze=False, sharex="col")
    lines = ["## The learned rows' schedules", "",
             f"![actors per round]({os.path.relpath(out, page.parent)}): actors I_k per round (top) and the "
             "training return R_k (bottom) of each learned row's run on each seed. The paper saw three phases: "
             "many actors early, fewer in the middle, more late.", "",
             "| workload | row | seed | rounds | mean actors, first / middle / last third | shape |",
             "|---|---|---|---|---|---|"]
    for i, (name, system) in enumerate(columns):
        cells = sorted((c for c in results["cells"] if c["workload"] == name and c["system"] == system),
                       key=lambda c: c["seed"])
        for cell in cells:
            record = record_of(records, cell)
            if record is None or record.summary is None:  # replaced since the results file was written
                lines.append(f"| {name} | {cell['row']} | {cell['seed']} | its record was replaced | - | - |")
                continue
            summary = record.summary
            actors = [r.actors for r in summary.history]
            returns = [r.mean_return for r in summary.history]
            axes[0][i].step(range(len(actors) + 1), actors + actors[-1:], where="post", label=f"seed {cell['seed']}")
            axes[1][i].plot(range(len(returns)), returns)
            early, middle, late = phases(actors)
            thirds = " / ".join("-" if math.isnan(x) else f"{x:.1f}" for x in (early, middle, late))
            lines.append(f"| {name} | {cell['row']} | {cell['seed']} | {len(actors)} | {thirds} "
                         f"| {phase_shape(early, middle, late)} |")
        axes[0][i].set_title(f"{name}:\n{cells[0]['row']}", fontsize=9)
        axes[0][i].set(ylabel="actors I_k")
        axes[0][i].legend(fontsize=8)
        axes[1][i].set(xlabel="round k", ylabel="training return R_k")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return "\n".join(lines + [""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--table", default="table2")
    parser.add_argument("--experiment", default="minionsrl-experiments")
    parser.add_argument("--out", default="docs/table2.md")
    parser.add_argument("--json", help="also copy the results file here")
    parser.add_argument("--figure", help="draw the learned rows' actors per round here (a .png)")
    parser.add_argument("--cells", help="also export the cells' records to this folder (table2 --carry takes it)")
    parser.add_argument("--code-root", type=Path, default=ROOT,
                        help="a checkout of the cells' commit (e.g. a git worktree) when this one's code is newer")
    args = parser.parse_args()
    client = MlflowClient(args.tracking_uri)
    known = exported_evaluations(Path(args.cells)) if args.cells else {}
    page, results, records, evaluations = render(client, args.table, args.experiment, args.code_root, known)
    if args.figure:
        page += "\n" + schedule_figure(records, results, Path(args.figure), Path(args.out))
    Path(args.out).write_text(page)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.cells:
        print(f"exported {export_cells(records, results, Path(args.cells), evaluations)} cells to {args.cells}")
    print(f"wrote {args.out}")


def exported_evaluations(folder: Path) -> Evaluations:
    """The last evaluations exported beside cells' records in `folder` (none if it has no file)."""
    path = folder / EVALUATIONS_FILE
    return parse_evaluations(path.read_text(), str(path)) if path.exists() else {}


def export_cells(records: Records, results: dict, out: Path, evaluations: Evaluations | None = None) -> int:
    """Each finished cell's record as a file of `out` (what another machine's `table2 --carry` keeps),
    and the cells' last evaluations added to the file of them there (their MLflow runs stay here)."""
    out.mkdir(parents=True, exist_ok=True)
    if evaluations:
        (out / EVALUATIONS_FILE).write_text(evaluations_json({**exported_evaluations(out), **evaluations}))
    count = 0
    for cell in results["cells"]:
        if (record := record_of(records, cell)) is not None:
            (out / finished_run_file(record.label, record.seed)).write_bytes(encode_finished(record))
            count += 1
    return count


if __name__ == "__main__":
    main()

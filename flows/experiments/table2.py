"""The paper's Table 2 over workloads x systems x seeds, resumable and cached (issue 35).

    python -m flows.experiments table2                            # CartPole-v1, Hopper-v5 and HalfCheetah-v5
    python -m flows.experiments table2 --only workload=CartPole-v1 system=impact,seed=100

Each (workload, system, seed) cell is one `train` run (or `impact` run) nested under the table's
MLflow parent run, which a re-run finds by its name (tag minionsrl.table). A cell finished before
with the same code and settings (its cache key, models/report/table2_cells.py) is not run again;
a crash loses at most the cell in flight. `--only` runs a subset; the published table holds every
cell finished with the current code, and names the ones still missing.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from dataclasses import dataclass

import matplotlib.pyplot as plt
from prefect import get_run_logger
from prefect.runtime import flow_run as flow_run_context

from flows.experiments.common import Experiment, bars, learned_spec
from flows.experiments.compare import cluster_workload, judge_learned
from flows.experiments.results import Table2Result
from flows.impact import prepare_impact
from flows.served_flow import served_flow
from flows.tracking import project_root
from models.billing.cost import PriceTable
from models.errors import ConfigError
from models.json_types import JSONObject
from models.report.experiment_resume import read_carried
from models.report.experiment_stats import DEFAULT_HELD_OUT_SEEDS, AggregateRow, best_fixed, seeds_note
from models.report.table2_cells import (
    DEFAULT_SYSTEMS,
    DEFAULT_WORKLOADS,
    IMPACT,
    RAMP_BASE,
    RAMPS,
    SERVER_CLUSTER,
    Cell,
    cell_key,
    code_fingerprint,
    file_digest,
    is_learned,
    learned_row_ref,
    plan_cells,
    ramp_spec,
    select,
    workload_parts,
)
from models.report.table2_rows import CellResult, workload_rows
from models.run.config import SYSTEM_CLUSTER
from models.run.presets import resolve_run_config
from models.run.workload import Placement, Workload
from models.scheduling.learned import resolve_checkpoint
from models.scheduling.learned_spec import is_mlflow_uri


@dataclass(frozen=True)
class CellCall:
    """How a cell runs: the nested run's parameters (all that decides its result: its cache key's
    settings) and the row it belongs to."""

    label: str
    scheduler: str
    """The `train` scheduler spec, or IMPACT."""
    workload: Workload
    placement: Placement
    system: str
    scheduler_sha256: str | None = None
    """A learned cell's scheduler checkpoint's bytes (None for an MLflow URI: a logged artifact)."""

    def settings(self) -> JSONObject:
        """The workload's fields the cell's run reads (an IMPACT override does not re-key PPO cells)."""
        given = {"scheduler_sha256": self.scheduler_sha256} if self.scheduler_sha256 else {}
        read = self.workload.for_impact() if self.system == IMPACT else self.workload.for_ppo()
        return {"scheduler": self.scheduler, "system": self.system, "workload": read,
                "placement": self.placement.to_json(), **given}


def table2_run_name() -> str:
    return f"table2-{flow_run_context.parameters.get('table') or 'table2'}"


@served_flow(name="table2", flow_run_name=table2_run_name, persist_result=False, validate_parameters=True)
def table2(
    workloads: list[str] | None = None, systems: list[str] | None = None, seeds: list[int] | None = None,
    workload_seeds: dict[str, list[int]] | None = None, workload_settings: dict[str, dict[str, object]] | None = None,
    learned: dict[str, str] | None = None, only: list[str] | None = None, placement: Placement | None = None,
    table: str = "table2", tracking_uri: str | None = None, experiment: str | None = None,
    checkpoint_dir: str | None = None, carry: list[str] | None = None,
) -> Table2Result:
    """Table 2 of the paper over workloads x systems x seeds: success rate, time to J on the cloud
    clock and this machine's wall, cost (learner billed per round and resident), env steps; mean
    and spread per system. Every cell is an MLflow run nested under one parent; a re-run skips the
    cells finished with the same code and settings.

    Args:
        workloads: env ids, with -<preset variant> for a variant (default CartPole-v1,
            Hopper-v5-locomotion, HalfCheetah-v5-locomotion).
        systems: the rows: learned (the workload's scheduler), learned:<name, path or MLflow URI>
            (another learned row: a table may hold several), fixed:N, max, adapt, increase and
            decrease (Fixed(8)'s actor budget over the rounds Fixed(8) took on the seed), server-cluster,
            impact (32 actors on the cloud clock); default all of them with the Fixed sweep 1-16.
        seeds: the seeds of every workload (default the held-out 100-104).
        workload_seeds: per workload name, its own seeds instead (e.g. 3 for Humanoid-v5).
        workload_settings: per workload name, workload values over its preset, e.g.
            {"Humanoid-v5": {"target_return": 600}}.
        learned: per workload name or env id, the learned scheduler (a checkpoint path, packaged
            name or MLflow URI) instead of the workload's packaged one (CartPole-v1 cartpole-v9,
            Hopper-v5 hopper, HalfCheetah-v5 halfcheetah, Hopper-v5-locomotion hopper-locomotion,
            HalfCheetah-v5-locomotion halfcheetah-locomotion; other workloads the CartPole one,
            transferred).
        only: run only these cells: filters field=value[,field=value] over workload, system and
            seed (any filter may match); the table still shows every finished cell.
        placement: where the actors run (default local).
        table: the table's name: a re-run with the same name continues its parent run.
        tracking_uri: MLflow store; default MLFLOW_TRACKING_URI or ./mlruns/mlflow.db.
        experiment: MLflow experiment; default minionsrl-experiments.
        checkpoint_dir: where the runs' checkpoints go; default ./checkpoints.
        carry: folders (or files) of finished cells' records exported from another store
            (benchmarks/table2_page.py --cells): each is kept where its cache key matches (the
            same code and settings), so a table too long for one machine's session goes on in
            the next; the others run.
    """
    placement = placement or Placement()
    names = list(workloads or DEFAULT_WORKLOADS)
    systems = list(systems or DEFAULT_SYSTEMS)
    per_seed = {w: list((workload_seeds or {}).get(w) or seeds or DEFAULT_HELD_OUT_SEEDS) for w in names}
    unknown = sorted(set(workload_seeds or {}) - set(names)) + sorted(set(workload_settings or {}) - set(names))
    if unknown:
        raise ConfigError(f"workload_seeds / workload_settings name workloads not in the table: {unknown}")
    cells = plan_cells(names, systems, per_seed)
    chosen = set(select(cells, only or []))
    given = {w: _workload(w, (workload_settings or {}).get(w) or {}) for w in names}
    calls = checked_calls(cells, given, placement, learned or {})
    carried = read_carried(carry or [])
    code = code_fingerprint(project_root())
    logger = get_run_logger()
    with Experiment("table2", given[names[0]], placement, {"table": table}, tracking_uri, experiment,
                    checkpoint_dir, table=table) as exp:
        exp.tracker.set_tags({"minionsrl.table.code": code,  # this invocation's: every cell it reports ran with it
                              "minionsrl.table.machine": machine()})
        if carried:
            logger.info("%d cells offered by --carry, %d not already here", len(carried), exp.carry(carried))
        exp.plan(len(chosen))
        results: list[CellResult] = []
        for cell in cells:
            if (call := over_base_rounds(calls[cell], cell, results)) is None:
                logger.warning("%s: not run, its seed's %s cell has not finished (run it first)", cell.label, RAMP_BASE)
                continue
            key = cell_key(cell, code, call.settings())
            if cell in chosen:
                results.append(run_cell(exp, cell, call, key))
                logger.info("%s: %s", cell.label, cell_outcome(results[-1]))  # the console's progress
            elif (kept := kept_cell(exp, cell, call, key)) is not None:
                results.append(kept)
        missing = [c.label for c in cells if c not in {r.cell for r in results}]
        logger.info("table %s: %d cells run now, %d kept, %d missing", table,
                    sum(not r.cached for r in results), sum(r.cached for r in results), len(missing))
        actors = {w: PriceTable.load(given[w].prices_file).server_actor_cores for w in names}  # IMPACT's
        return publish_table(exp, names, results, missing, per_seed, actors,
                             {w: given[w].to_json() for w in names})


def machine() -> str:
    """Where the cells ran, for the results page: architecture, processor (when known), cores."""
    return ", ".join(part for part in (platform.machine(), platform.processor(), f"{os.cpu_count()} cores") if part)


def cell_outcome(done: CellResult) -> str:
    """A cell's line in the console: run now or kept, J or not, its cloud time."""
    run = done.summary if done.summary is not None else done.impact
    clock = done.summary.cloud_time_s if done.summary is not None else done.impact.cloud_s  # type: ignore[union-attr]
    return (f"{'kept' if done.cached else 'ran'}, {'J reached' if run.target_reached else 'J not reached'}, "  # type: ignore[union-attr]
            f"{clock:.2f} s on the cloud clock")


def _workload(name: str, settings: dict[str, object]) -> Workload:
    env, variant = workload_parts(name)
    try:
        return Workload(env=env, preset=variant, **settings)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:  # an unknown field, a value of the wrong type
        raise ConfigError(f"workload_settings of {name}: {exc}") from None


def checked_calls(cells: list[Cell], given: dict[str, Workload], placement: Placement,
                  learned: dict[str, str]) -> dict[Cell, CellCall]:
    """Every cell's call, all checked before any runs; two rows of a workload may not run the same."""
    calls = {c: cell_call(c, given[c.workload], placement, learned) for c in cells}
    if len({(c.workload, calls[c].label) for c in cells}) < len({(c.workload, c.system) for c in cells}):
        raise ConfigError("two learned rows of a workload run the same scheduler: name each once")
    return calls


def cell_call(cell: Cell, workload: Workload, placement: Placement, learned: dict[str, str]) -> CellCall:
    """A cell's nested run, validated as its flow would (a bad one is refused before any run)."""
    label = cell.system
    if cell.system == IMPACT:
        prepare_impact({**workload.for_impact(), "seed": cell.seed})
        return CellCall(IMPACT, IMPACT, workload, placement, IMPACT)
    if cell.system == SERVER_CLUSTER:
        cluster, cluster_placement = cluster_workload(workload, placement)
        cores = PriceTable.load(workload.prices_file).server_actor_cores
        call = CellCall("server cluster", f"fixed:{cores}", cluster, cluster_placement, SYSTEM_CLUSTER)
    else:
        spec, digest = cell.system, None
        if is_learned(cell.system):
            ref, own = learned_row_ref(cell.system, cell.workload, learned)
            spec = learned_spec(ref)
            label = f"learned ({ref}{'' if own else ', transferred'})"
            digest = None if is_mlflow_uri(ref) else file_digest(resolve_checkpoint(ref))
        elif cell.system in RAMPS:  # checked here over K; run over its seed's RAMP_BASE rounds (over_base_rounds)
            spec = ramp_spec(cell.system, resolve_run_config(workload, placement, scheduler="max").max_rounds)
            label = f"{cell.system} ({RAMP_BASE}'s budget over its rounds)"
        call = CellCall(label, spec, workload, placement, "serverless", digest)
    resolve_run_config(call.workload, call.placement, scheduler=call.scheduler, seed=cell.seed,
                       **({"system": SYSTEM_CLUSTER} if call.system == SYSTEM_CLUSTER else {}))
    return call


def over_base_rounds(call: CellCall, cell: Cell, done: list[CellResult]) -> CellCall | None:
    """A ramp's call spread over the rounds its seed's RAMP_BASE cell took (None while that cell
    has not finished); any other cell's call as it is."""
    if cell.system not in RAMPS:
        return call
    base = next((r.summary for r in done if r.cell == Cell(cell.workload, RAMP_BASE, cell.seed)), None)
    return None if base is None else dataclasses.replace(call, scheduler=ramp_spec(cell.system, base.rounds))


def _run_label(cell: Cell, row: str) -> str:
    return f"{cell.workload} / {row}"  # a FinishedRun's label: distinct per workload and row


def run_cell(exp: Experiment, cell: Cell, call: CellCall, key: str) -> CellResult:
    label = _run_label(cell, call.label)
    cached = exp.finished(label, cell.seed, call.scheduler, key) is not None
    if call.system == IMPACT:
        return CellResult(cell, call.label, impact=exp.impact(cell.seed, call.workload, label=label, key=key),
                          cached=cached)
    extra = {"system": SYSTEM_CLUSTER} if call.system == SYSTEM_CLUSTER else {}
    summary = exp.train(call.scheduler, cell.seed, label, workload=call.workload, placement=call.placement,
                        key=key, **extra)
    return CellResult(cell, call.label, summary=summary, cached=cached, scheduler_sha256=call.scheduler_sha256)


def kept_cell(exp: Experiment, cell: Cell, call: CellCall, key: str) -> CellResult | None:
    """A cell not run now: the run it finished before with the same key, if any."""
    kept = exp.finished(_run_label(cell, call.label), cell.seed, call.scheduler, key)
    if kept is None:
        return None
    return CellResult(cell, call.label, summary=kept.summary, impact=kept.impact, cached=True,
                      scheduler_sha256=call.scheduler_sha256)


def publish_table(exp: Experiment, names: list[str], results: list[CellResult], missing: list[str],
                  seeds: dict[str, list[int]], impact_actors: dict[str, int],
                  workloads: dict[str, JSONObject]) -> Table2Result:
    """Per workload its rows, the learned row's ratios to the others; one plot, one table, results.json."""
    tables: dict[str, list[AggregateRow]] = {}
    metrics: dict[str, float] = {}
    checks: dict[str, bool] = {}
    for name in names:
        mine = [r for r in results if r.cell.workload == name]
        if not mine:
            continue
        rows = workload_rows(mine, impact_actors[name])
        tables[name] = rows
        by = {r.label: r for r in rows}
        best = best_fixed([r for r in rows if not r.label.startswith("best fixed (")])
        for row in rows:
            if row.label.startswith("learned (") and row.runs:
                m, c = judge_learned(row.label, by, best)
                metrics.update({f"{name}/{k}": v for k, v in m.items()})
                checks.update({f"{name}: {k}": v for k, v in c.items()})
    exp.tracker.log_metrics(metrics, step=0)
    fig, axes = plt.subplots(2, max(len(tables), 1), figsize=(6 * max(len(tables), 1), 8), squeeze=False)
    for i, (name, rows) in enumerate(tables.items()):
        bars(axes[0][i], rows, "time_s", f"{name}: time to stop, cloud clock (s)")
        bars(axes[1][i], rows, "cost_usd", "cost (USD)")
        axes[1][i].set_yscale("log")
    flat = [dataclasses.replace(r, label=f"{name} / {r.label}") for name, rows in tables.items() for r in rows]
    md = ("Every cell is a run nested under this parent; rows are means over the seeds that finished "
          "(`runs`), time on the cloud clock (IMPACT's from its virtual-time executor), wall beside it. "
          + " ".join(f"{name}: {seeds_note(seeds[name])}" for name in tables)
          + (f"\n\nMissing cells ({len(missing)}): " + ", ".join(missing) if missing else "\n\nEvery cell finished.")
          + "".join(f"\n- {k}: {'yes' if v else 'no'}" for k, v in checks.items()))
    cells = [{"workload": r.cell.workload, "system": r.cell.system, "seed": r.cell.seed, "row": r.label,
              "cached": r.cached, "run_id": run_id, "scheduler_sha256": r.scheduler_sha256,
              "carried": r.cached and ((_run_label(r.cell, r.label), r.cell.seed) in exp.carried
                                       or not exp.ran_here(run_id))}
             for r in results
             for run_id in [r.summary.run_id if r.summary is not None else r.impact.run_id]]  # type: ignore[union-attr]
    plot = exp.publish(fig, flat, md, {"tables": {n: [r.as_dict() for r in rows] for n, rows in tables.items()},
                                       "metrics": metrics, "checks": checks, "cells": cells, "missing": missing,
                                       "workloads": workloads, "seeds": seeds})
    return Table2Result(exp.run_id, plot, [r.as_dict() for r in flat],
                        {n: [r.as_dict() for r in rows] for n, rows in tables.items()}, metrics, checks,
                        ran=[f"{r.cell.label}" for r in results if not r.cached],
                        kept=[f"{r.cell.label}" for r in results if r.cached], missing=missing)

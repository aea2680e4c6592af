"""What every experiment flow shares: the `Experiment` context (its MLflow parent run, the `train`
runs nested under it, its progress and run table while it runs, publishing the plot and tables)
and the plot helpers.

The statistics the flows publish are pure code in models/report/experiment_stats.py.
"""

from __future__ import annotations

import base64
import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from prefect import get_run_logger
from prefect.artifacts import (
    create_image_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.exceptions import MissingContextError

from flows.artifacts import ArtifactPublisher
from flows.tracking import flatten, tracked_run
from flows.train import train
from models.billing.cost import PriceTable
from models.impact.config import resolve_impact_config
from models.impact.progress import ImpactSummary
from models.json_types import JSONObject
from models.report.experiment_resume import (
    FINISHED_DIR,
    IMPACT_SCHEDULER,
    FinishedRun,
    changed_params,
    decode_finished,
    encode_finished,
    finished_run_file,
)
from models.report.experiment_stats import CLOCK_LEGEND, AggregateRow, TableRow, finite_row, markdown_table
from models.report.run_report import (
    RUN_TABLE_EVERY,
    ExperimentRun,
    experiment_progress,
    experiment_run_result,
    experiment_run_rows,
    table_due,
)
from models.run.config import ConfigError
from models.run.presets import preset_for, resolve_run_config
from models.run.records import RunSummary
from models.run.workload import Placement, Workload
from models.scheduling.learned_spec import SHIPPED
from tasks.worker_processes import ready_worker_server

DEFAULT_EXPERIMENT = "minionsrl-experiments"
TABLE_TAG = "minionsrl.table"
"""Tag of a table experiment's parent run (flows/experiments/table2.py): its name, how a re-run finds it."""
LEARNED = SHIPPED  # the packaged default CartPole-v1 scheduler (`learned` alone)


def learned_spec(ref: str) -> str:
    """The `train` scheduler for a learned-scheduler checkpoint (path, packaged name, MLflow URI)."""
    return f"learned:{ref}"


class Experiment:
    """The parent MLflow run of one experiment flow, the `train` runs nested under it, and where
    its plot and tables go. A context manager: the run ends FINISHED, or FAILED on an exception.

    `workload` is what every run of the experiment is asked to do (its unset fields: the env's
    preset) and `placement` where their actors run; both are logged as the parent run's params.

    Once a flow says how many runs it plans (`plan`), the experiment's Prefect artifacts follow
    them: `minionsrl-experiment-progress-<run>` (runs done of N, the last one's result; 100 % at
    the end) and `minionsrl-experiment-runs-<run>` (the runs finished so far, a new version every
    RUN_TABLE_EVERY runs and at the end), published on a background thread as a training's are.
    """

    def __init__(self, name: str, workload: Workload, placement: Placement | None, params: JSONObject,
                 tracking_uri: str | None, experiment: str | None, checkpoint_dir: str | None,
                 resume_run_id: str | None = None, table: str | None = None):
        self.name, self.workload, self.placement = name, workload, placement or Placement()
        self.env, self.checkpoint_dir = workload.env, checkpoint_dir
        self.tracker = tracked_run(tracking_uri)
        self.tracker.check_reachable()
        self.experiment = experiment or DEFAULT_EXPERIMENT
        all_params = {"workload": workload.to_json(), "placement": self.placement.to_json(), **params}
        self._kept: dict[tuple[str, int], FinishedRun] = {}
        """Resumed: the runs the experiment finished before, by (label, seed), until they are reused."""
        self.carried: set[tuple[str, int]] = set()
        """(label, seed) of the runs carried in from another store (`carry`) and reported here."""
        self._carried_in: dict[tuple[str, int], FinishedRun] = {}
        tags = {"minionsrl.kind": "experiment", "minionsrl.experiment": name}
        tabled = self._tabled_parent(table) if table else None
        if resume_run_id:
            self._kept = self._reopen(resume_run_id, all_params)
            self.run_id = resume_run_id
        elif tabled is not None:  # a table's runs are kept by cache key: any parameters may change
            self._kept = self._reopen(tabled, None)
            self.run_id = tabled
        else:
            self.run_id = self.tracker.start(self.experiment, table or name, params=params if table else all_params,
                                             tags={**tags, **({TABLE_TAG: table} if table else {})})
        self.runs: list[ExperimentRun] = []
        """The nested `train` runs finished so far, in order."""
        self.planned, self.done = 0, 0
        self._last_result: str | None = None
        self._tabled = 0
        self._artifacts: ArtifactPublisher | None = None

    def __enter__(self) -> Experiment:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self._artifacts is not None:
                if self._tabled != len(self.runs):
                    self._publish_runs()
                if exc_type is None:
                    self._publish_progress(finished=True)
                self._artifacts.close()
        finally:
            self.tracker.__exit__(exc_type, exc, tb)

    def plan(self, runs: int) -> None:
        """The runs this experiment will make (its progress is runs done of these); publishing starts here.

        The first call also readies the actors' fork server, so that its preload is billed to
        no run: left to the first run, it would be that run's start-up alone (BENCHMARKS.md,
        issue 13), and every later run forks from it warm."""
        self.planned = runs
        if self._artifacts is None:
            self._artifacts = ArtifactPublisher(self.run_id, _run_logger(self.name))
            ready_s = ready_worker_server()
            self.tracker.log_metrics({"experiment/worker_server_ready_s": ready_s}, step=0)
            _run_logger(self.name).info("actor fork server ready in %.2fs (billed to no run)", ready_s)
        self._publish_progress()

    def count_done(self, runs: int, result: str) -> None:
        """Runs a nested flow made (transfer's scheduler trainings: one per episode), now done."""
        self.done += runs
        self._last_result = result
        self._publish_progress()

    def setting(self, name: str, workload: Workload | None = None) -> Any:
        """A workload value as the runs get it: given, else the env's preset (a RunConfig field)."""
        workload = workload or self.workload
        given = getattr(workload, name, None)
        if given is not None:
            return given
        cfg = resolve_run_config(workload, self.placement, scheduler="max",  # valid for any i_max
                                 tracking_uri=self.tracker.tracking_uri, checkpoint_dir=self.checkpoint_dir or "c")
        return getattr(cfg, name)

    def train(self, scheduler: str, seed: int, label: str | None = None, workload: Workload | None = None,
              placement: Placement | None = None, key: str = "", **run: object) -> RunSummary:
        """A nested `train` run of this experiment's workload (or `workload`, `placement` and `run`'s
        other train parameters in its place: compare's server-cluster runs); `label`: its name in
        the experiment's tables (default the scheduler). A resumed experiment returns the run it
        finished before (a table's: only if it ran with the same cache `key`)."""
        label = label or scheduler
        kept = self._take_kept(label, seed, scheduler, key)
        if kept is not None and kept.summary is not None:
            summary = kept.summary
        else:
            summary = train(scheduler=scheduler, seed=seed, tracking_uri=self.tracker.tracking_uri,
                            experiment=self.experiment, parent_run_id=self.run_id, checkpoint_dir=self.checkpoint_dir,
                            **(workload or self.workload).for_ppo(), **(placement or self.placement).given(), **run)
            self._keep(FinishedRun(label, seed, scheduler, summary=summary, key=key))
        self.runs.append(ExperimentRun(label, summary))
        self.count_done(1, experiment_run_result(self.runs[-1]))
        if table_due(len(self.runs), False, RUN_TABLE_EVERY):
            self._publish_runs()
        return summary

    def impact_parameters(self, seed: int, workload: Workload | None = None) -> JSONObject:
        """The `impact` flow's parameters for this experiment's workload at `seed`: the same J and
        price table as its `train` runs (the PPO preset's J, which IMPACT's own preset may not
        share), nested under its parent run; validated by the caller (flows/impact.py
        prepare_impact) before any run starts. IMPACT runs as the paper provisions it, on the same
        clock as the other rows: the cluster's actor cores as always-on actors on the cloud clock
        (the virtual backend), unless the workload sets its own actor count; with the workload's
        env-step budget S where its PPO preset has one (the PPO rows' own), else the IMPACT preset's
        budget per actor (32 actors deliver 16x what the preset's 2 do in the same time, most of
        it overwritten unused in the buffer)."""
        workload = workload or self.workload
        given = workload.for_impact()
        cores = PriceTable.load(workload.prices_file).server_actor_cores
        overrides = {"actors": cores, **dict(given.get("impact") or {})}  # type: ignore[call-overload]
        common = preset_for(workload.env, workload.preset).get("max_env_steps")
        if "max_env_steps" not in given and common is not None:  # the workload's S, as PPO's rows
            given["max_env_steps"] = common
        elif "max_env_steps" not in given:  # the IMPACT preset's env-step budget per actor, not for the run
            preset = resolve_impact_config(Workload(env=workload.env, preset=workload.preset))
            given["max_env_steps"] = preset.max_env_steps * max(int(overrides["actors"]) // preset.impact.actors, 1)
        return {**given, "impact": overrides, "backend": "virtual", "seed": seed,
                "target_return": float(self.setting("target_return", workload)),
                "learner_device": self.placement.learner_device, "tracking_uri": self.tracker.tracking_uri,
                "experiment": self.experiment, "parent_run_id": self.run_id}

    def impact(self, seed: int, workload: Workload | None = None, label: str = IMPACT_SCHEDULER,
               key: str = "") -> ImpactSummary:
        """A nested IMPACT training (flows/impact.py) of this experiment's env (or `workload`'s),
        counted in its progress."""
        from flows.impact import impact

        kept = self._take_kept(label, seed, IMPACT_SCHEDULER, key)
        if kept is not None and kept.impact is not None:
            summary = kept.impact
        else:
            summary = impact(**self.impact_parameters(seed, workload))
            self._keep(FinishedRun(label, seed, IMPACT_SCHEDULER, impact=summary, key=key))
        stop = "J reached" if summary.target_reached else summary.stop_reason
        self.count_done(1, f"{label} seed {seed}: {stop} after {summary.env_steps} env steps "
                           f"({summary.cloud_s:.1f} s on the {summary.clock} clock, {summary.wall_s:.1f} s wall, "
                           f"${summary.server_cluster_cost_usd:.4f} as the cluster)")
        return summary

    # -- resuming ------------------------------------------------------------------------
    def _tabled_parent(self, table: str) -> str | None:
        """The newest parent run of the table `table` in this experiment, if there is one."""
        found = self.tracker.client.get_experiment_by_name(self.experiment)
        if found is None:
            return None
        runs = self.tracker.client.search_runs([found.experiment_id], filter_string=f"tags.`{TABLE_TAG}` = '{table}'",
                                               order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0].info.run_id if runs else None

    def _reopen(self, run_id: str, params: JSONObject | None) -> dict[tuple[str, int], FinishedRun]:
        """Reopen the parent run `run_id` of this same experiment and read the runs it finished;
        a run that was in flight when it stopped is marked FAILED. Refused (ConfigError, before
        any run) if it is another experiment or its parameters differ (`params` None: a table's
        parent, whose runs are kept by cache key, not checked)."""
        try:
            run = self.tracker.client.get_run(run_id)
        except Exception as exc:  # MlflowException: no such run in this store
            raise ConfigError(f"no experiment run {run_id} in {self.tracker.tracking_uri} to resume: {exc}") from exc
        if run.data.tags.get("minionsrl.experiment") != self.name:
            raise ConfigError(f"run {run_id} is not a {self.name} experiment "
                              f"({run.data.tags.get('minionsrl.experiment', 'no experiment tag')}): cannot resume it")
        changed = changed_params(run.data.params, flatten(params)) if params is not None else {}
        if changed:
            raise ConfigError(f"resuming {self.name} run {run_id} with other parameters: "
                              + "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
                              + ". Resume with the same ones, or start a new experiment.")
        in_experiment = self.tracker.client.get_experiment(run.info.experiment_id).name
        if in_experiment != self.experiment:
            raise ConfigError(f"run {run_id} is in MLflow experiment {in_experiment!r}, not {self.experiment!r}")
        kept: dict[tuple[str, int], FinishedRun] = {}
        with tempfile.TemporaryDirectory() as tmp:
            if self.tracker.client.list_artifacts(run_id, FINISHED_DIR):
                local = Path(self.tracker.client.download_artifacts(run_id, FINISHED_DIR, tmp))
                for path in sorted(local.glob("*.mrlw")):
                    done = decode_finished(path.read_bytes(), f"{FINISHED_DIR}/{path.name} of run {run_id}")
                    kept[(done.label, done.seed)] = done
        self.tracker.resume(run_id)
        self._fail_runs_in_flight(run.info.experiment_id, run_id)
        _run_logger(self.name).info("resuming %s run %s: %d finished runs kept", self.name, run_id, len(kept))
        return kept

    def _fail_runs_in_flight(self, experiment_id: str, run_id: str) -> None:
        """Nested runs still RUNNING died with the experiment's process: say so in MLflow."""
        stale = self.tracker.client.search_runs(
            [experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}' and attributes.status = 'RUNNING'")
        for r in stale:
            self.tracker.client.set_tag(r.info.run_id, "minionsrl.failure",
                                        "the experiment's process stopped during this run; the resumed "
                                        "experiment ran it again")
            self.tracker.client.set_terminated(r.info.run_id, status="FAILED")

    def _take_kept(self, label: str, seed: int, scheduler: str, key: str = "") -> FinishedRun | None:
        """The run a resumed experiment finished before as (label, seed), if it ran `scheduler`
        (with the cache `key`)."""
        kept = self.finished(label, seed, scheduler, key)
        self._kept.pop((label, seed), None)
        return kept

    def finished(self, label: str, seed: int, scheduler: str, key: str = "") -> FinishedRun | None:
        """The run this experiment finished before as (label, seed), if it ran `scheduler` with the
        cache `key` on the cloud clock; it stays kept (a table reports cells it does not rerun).
        Else a run carried in (`carry`) that matches, recorded in this parent run from now on."""
        for found in (self._kept.get((label, seed)), self._carried_in.get((label, seed))):
            if found is None or found.scheduler != scheduler or found.key != key or not found.has_cloud_clock:
                continue  # a run measured before the cloud clock runs again: one clock per table
            if found is not self._kept.get((label, seed)):  # carried in: kept here only now that it matches
                self._kept[(label, seed)] = found
                self._keep(found)
                self.carried.add((label, seed))
            return found
        return None

    def carry(self, records: Sequence[FinishedRun]) -> int:
        """Offer runs finished in another store (a table's cells exported from another machine):
        `finished` reports one where its label, seed, scheduler and cache key match and this store
        has no matching run of its own (never replacing one). How many differ from this store's."""
        self._carried_in.update({(r.label, r.seed): r for r in records})
        return sum((kept := self._kept.get((r.label, r.seed))) is None or kept.key != r.key for r in records)

    def ran_here(self, run_id: str) -> bool:
        """Whether `run_id` is a run of this MLflow store (not one carried in from another)."""
        try:
            self.tracker.client.get_run(run_id)
        except Exception:  # MlflowException: no such run here
            return False
        return True

    def _keep(self, run: FinishedRun) -> None:
        """Record a finished run in the parent run, so that a resumed experiment skips it."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / finished_run_file(run.label, run.seed)
            path.write_bytes(encode_finished(run))
            self.tracker.log_artifact(path, FINISHED_DIR)

    def _publish_progress(self, finished: bool = False) -> None:
        if self._artifacts is not None:
            self._artifacts.progress("experiment-progress", experiment_progress(
                self.done, self.planned, self._last_result, finished))

    def _publish_runs(self) -> None:
        if self._artifacts is not None:
            self._tabled = len(self.runs)
            self._artifacts.table("experiment-runs", experiment_run_rows(self.runs),
                                  f"{self.name}: the {self._tabled} runs finished so far")

    def publish(self, fig, rows: Sequence[TableRow], summary_md: str, results: JSONObject) -> str:
        """The plot (MLflow + Prefect), the table (Prefect), results.json (MLflow: the table's
        rows, then `results`); returns the plot's MLflow URI."""
        key = self.name.replace("_", "-").lower()
        table = [r.as_dict() for r in rows]
        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / f"{self.name}.png"
            fig.savefig(png, dpi=110, bbox_inches="tight")
            plt.close(fig)
            self.tracker.log_artifact(png, "plots")
            data = Path(tmp) / "results.json"
            data.write_text(json.dumps({"rows": table, **results}, indent=1, default=str, allow_nan=True))
            self.tracker.log_artifact(data, "results")
            encoded = base64.b64encode(png.read_bytes()).decode()
        plot_uri = f"runs:/{self.run_id}/plots/{self.name}.png"
        create_table_artifact([finite_row(r) for r in table], key=f"{key}-table", description=f"{self.name}: results")
        create_markdown_artifact(
            f"# {self.name}\n\n{summary_md}\n\n{CLOCK_LEGEND}\n\n{markdown_table(table)}\n\n"
            f"Plot: MLflow artifact `{plot_uri}` in `{self.tracker.tracking_uri}` "
            f"(experiment `{self.experiment}`, run `{self.run_id}`).",
            key=f"{key}-summary", description=f"{self.name}: summary")
        create_image_artifact(f"data:image/png;base64,{encoded}", key=f"{key}-plot",
                              description=f"{self.name}: plot")
        return plot_uri


def _run_logger(name: str):
    """The flow run's logger (a publishing warning belongs in its log), or a plain one outside a run."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(f"minionsrl.{name}")


def bars(ax, rows: Sequence[AggregateRow], key: str, ylabel: str) -> None:
    """`<key>_mean` per row as bars with `<key>_std` error bars."""
    ax.bar([r.label for r in rows], [r.value(f"{key}_mean") for r in rows],
           yerr=[r.value(f"{key}_std") for r in rows], capsize=4, color=[f"C{i}" for i in range(len(rows))])
    ax.set_ylabel(ylabel)
    # right-aligned slanted labels: long ones ("server cluster without start-up") overlap otherwise
    for label in ax.get_xticklabels():
        label.set_rotation(35)
        label.set_horizontalalignment("right")


def actor_steps(ax, summary: RunSummary, **style: Any) -> None:
    """I_k as a step line over rounds, the last round drawn to its end."""
    actors = [h.actors for h in summary.history]
    if actors:
        ax.step(range(len(actors) + 1), actors + actors[-1:], where="post", **style)

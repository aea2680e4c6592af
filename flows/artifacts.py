"""A training run as people look at it: Prefect artifacts of the `train` flow run (progress, a
table of the rounds, a final summary) and, in MLflow, plots and the policy as a pyfunc model;
the same artifacts for an IMPACT training (a table of its chunks) and a scheduler training.

What they say is rendered in models/report/run_report.py; here are only the calls. Publishing never fails
training: an error is a warning in the run's log. Prefect calls run on one background thread
(`ArtifactPublisher`), in order, so that a round or chunk never waits for the API; `close`
waits for them.
"""

from __future__ import annotations

import contextvars
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flows.tracking import RunTracker
from models.impact.config import ImpactRunConfig
from models.impact.progress import ImpactChunkRecord, ImpactSummary
from models.report.run_report import (
    TABLE_EVERY,
    ArtifactRow,
    MlflowLinks,
    Progress,
    artifact_key,
    episode_rows,
    episodes_progress,
    failure_markdown,
    impact_chunk_rows,
    impact_progress,
    impact_summary_markdown,
    plot_rounds,
    round_rows,
    run_progress,
    scheduler_summary_markdown,
    summary_markdown,
    table_due,
)
from models.run.records import RunSummary
from models.run.session import TrainingSession
from models.scheduling.training import SchedulerEpisodeRecord
from tasks.worker_processes import run_aside


def mlflow_links(tracker: RunTracker, model=None) -> MlflowLinks:
    """Where the tracker's run (and its logged model, a flows/policy_model.py LoggedPolicyModel) is."""
    return MlflowLinks(tracker.tracking_uri, tracker.experiment_id, tracker.run_id,
                       model_uri=model.model_uri if model else None,
                       registered=model.registered if model else None)


class ArtifactPublisher:
    """One run's Prefect artifacts, keyed `artifact_key(kind, run_id)`, published on one background
    thread in the order asked: a progress artifact (created once, then updated), tables and
    markdown (a new version under the key each time). A call that fails is a warning, once per
    kind, never an error."""

    def __init__(self, run_id: str | None, logger):
        self.run_id, self.logger = run_id, logger
        self._progress_id: Any = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="artifacts")
        self._pending: list[Future] = []
        self.timings: list[tuple[str, float]] = []
        """(artifact kind, seconds) for every Prefect call made: what publishing costs."""
        self._warned: set[str] = set()
        self._closed = False

    def key(self, kind: str) -> str:
        return artifact_key(kind, self.run_id)

    def progress(self, kind: str, progress: Progress) -> None:
        self._submit(kind, self._progress, kind, progress)

    def table(self, kind: str, rows: list[ArtifactRow], description: str) -> None:
        if rows:  # Prefect renders an empty table as nothing: wait for the first row
            self._submit(kind, self._table, kind, rows, description)

    def markdown(self, kind: str, text: str, description: str) -> None:
        self._submit(kind, self._markdown, kind, text, description)

    def warn(self, what: str, message: str) -> None:
        if what not in self._warned:  # once per kind: a down API must not flood the log
            self._warned.add(what)
            self.logger.warning(message)

    def close(self) -> None:
        """Wait for the Prefect calls still queued; later ones are dropped."""
        self._closed = True
        for future in self._pending:
            future.result()
        self._pending.clear()
        self._pool.shutdown(wait=True)

    # -- on the background thread ------------------------------------------------------------
    def _submit(self, what: str, call, *args) -> None:
        """Queue `call`; it runs in the caller's context (contextvars copied), so the artifact
        belongs to the flow run that asked for it."""
        if self._closed:  # e.g. a failure after the summary was out: that summary stands
            return
        context = contextvars.copy_context()
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(context.run, self._timed, what, call, *args))

    def _timed(self, what: str, call, *args) -> None:
        started = time.perf_counter()
        try:
            call(*args)
        except Exception as exc:
            self.warn(what, f"Prefect artifact {what!r} not published: {type(exc).__name__}: {exc}")
        finally:
            self.timings.append((what, time.perf_counter() - started))

    def _progress(self, kind: str, p: Progress) -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        if self._progress_id is None:
            self._progress_id = create_progress_artifact(p.percent, key=self.key(kind), description=p.description)
        else:
            update_progress_artifact(self._progress_id, p.percent, description=p.description)

    def _table(self, kind: str, rows: list[ArtifactRow], description: str) -> None:
        from prefect.artifacts import create_table_artifact

        create_table_artifact(rows, key=self.key(kind), description=description)

    def _markdown(self, kind: str, text: str, description: str) -> None:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(text, key=self.key(kind), description=description)


class RunArtifacts:
    """One training run's Prefect artifacts, keyed by its MLflow run id, and its MLflow plots."""

    def __init__(self, session: TrainingSession, tracker: RunTracker, logger, table_every: int = TABLE_EVERY):
        self.session, self.tracker = session, tracker
        self.table_every = table_every
        self.publisher = ArtifactPublisher(session.run_id, logger)
        self.keys = {kind: self.publisher.key(kind) for kind in ("progress", "rounds", "summary")}
        self._table_rounds = 0
        self._plots: Future[list[Path]] | None = None
        self._plots_dir: tempfile.TemporaryDirectory | None = None
        self._publish_progress()

    @property
    def timings(self) -> list[tuple[str, float]]:
        return self.publisher.timings

    # -- the flow's hooks --------------------------------------------------------------------
    def round_done(self, session: TrainingSession | None = None) -> None:
        """After each round: progress; the round table every `table_every` rounds."""
        self._publish_progress()
        if table_due(self.session.round_index, self.session.stop_reason is not None, self.table_every):
            self._publish_table()

    def log_model(self, policy_file: str | Path, register_as: str | None = None):
        """The final policy as an MLflow pyfunc model (flows/policy_model.py); None if it failed."""
        try:
            from flows.policy_model import log_policy_model

            model = log_policy_model(self.tracker.tracking_uri, self.tracker.run_id, policy_file,
                                     self.session.spaces, register_as=register_as,
                                     step=max(self.session.round_index - 1, 0))
        except Exception as exc:  # the policy file is logged already; the run's result stands
            self.publisher.warn("model", f"the policy was not logged as an MLflow model: {type(exc).__name__}: {exc}")
            self.tracker.set_tags({"minionsrl.warning": f"policy model not logged: {exc}"[:5000]})
            return None
        self.tracker.set_tags({"minionsrl.model_uri": model.model_uri})
        return model

    def finished(self, summary: RunSummary, model=None, plots: bool = True) -> None:
        """At the end: last table, progress at 100 %, the summary, then (plots) plots in MLflow."""
        links = mlflow_links(self.tracker, model)
        cfg = self.session.cfg
        self._publish_progress()
        if self._table_rounds != self.session.round_index:
            self._publish_table()
        self.publisher.markdown("summary", summary_markdown(summary, links, cfg.target_return, cfg.budget_usd),
                                f"{cfg.env_id}: summary")
        if plots:
            self.log_plots()
        self.close()

    def failed(self, error: BaseException) -> None:
        """A failed run: its table so far, a summary naming the error, and its plots."""
        try:
            if isinstance(error, Exception):  # not on Ctrl-C: stop now
                message = f"{type(error).__name__}: {error}"
                self._publish_table()
                self.publisher.markdown("summary", failure_markdown(
                    self.session.cfg.env_id, self.session.round_index, message, mlflow_links(self.tracker)),
                    f"{self.session.cfg.env_id}: summary")
                self.log_plots()
        finally:
            self.close()

    def start_plots(self) -> None:
        """Render the plots of the rounds so far in another process, while this one logs the
        model (both are CPU-bound: ~0.3 s each here); log_plots logs them."""
        cfg = self.session.cfg
        self._plots_dir = tempfile.TemporaryDirectory()
        try:
            self._plots = run_aside(plot_rounds, list(self.session.progress.history), self._plots_dir.name,
                                    title=cfg.env_id, target_return=cfg.target_return)
        except Exception as exc:  # no process to draw in: log_plots warns, training goes on
            self._plots = Future()
            self._plots.set_exception(exc)

    def log_plots(self) -> None:
        """PNGs of return, actors and cost per round, as MLflow artifacts under plots/."""
        if self._plots is None:
            self.start_plots()
        try:
            for path in self._plots.result():
                self.tracker.log_artifact(path, "plots")
        except Exception as exc:
            self.publisher.warn("plots", f"plots not logged to MLflow: {type(exc).__name__}: {exc}")
        finally:
            self._plots_dir.cleanup()
            self._plots, self._plots_dir = None, None

    def close(self) -> None:
        """Wait for the Prefect calls still queued."""
        self.publisher.close()

    # -- what the session shows now (rendered here, published on the background thread) ------
    def _publish_progress(self) -> None:
        s, cfg = self.session, self.session.cfg
        last = s.last
        self.publisher.progress("progress", run_progress(
            s.round_index, cfg.max_rounds, cfg.target_return, last.mean_return if last else float("nan"),
            s.stop_reason, s.progress.spent_usd, cfg.budget_usd, s.progress.done_fraction(cfg.max_rounds, cfg.max_env_steps)))

    def _publish_table(self) -> None:
        self._table_rounds = self.session.round_index
        self.publisher.table("rounds", round_rows(self.session.progress.history, self.session.cfg.budget_usd),
                             f"{self.session.cfg.env_id}: rounds 0..{self._table_rounds - 1}")


class ImpactArtifacts:
    """One IMPACT training's Prefect artifacts: progress after every chunk, the chunk table every
    `table_every` chunks and at the end, and a final (or failure) summary. The flow only queues
    them: the Prefect calls run on the publisher's thread, off the chunks' critical path."""

    def __init__(self, cfg: ImpactRunConfig, tracker: RunTracker, logger, table_every: int = TABLE_EVERY):
        self.cfg, self.tracker, self.table_every = cfg, tracker, table_every
        self.publisher = ArtifactPublisher(tracker.run_id, logger)
        self.keys = {kind: self.publisher.key(kind) for kind in ("progress", "chunks", "summary")}
        self.records: list[ImpactChunkRecord] = []
        self._table_chunks = 0
        self.publisher.progress("progress", impact_progress(None, cfg))

    def chunk_done(self, record: ImpactChunkRecord, stop_reason: str | None) -> None:
        """After each chunk: progress; the chunk table every `table_every` chunks and once stopped."""
        self.records.append(record)
        self.publisher.progress("progress", impact_progress(record, self.cfg, stop_reason))
        if table_due(len(self.records), stop_reason is not None, self.table_every):
            self._publish_table()

    def finished(self, summary: ImpactSummary) -> None:
        """At the end: the last table (if not out yet) and the summary; waits for the calls."""
        if self._table_chunks != len(self.records):
            self._publish_table()
        self.publisher.markdown("summary", impact_summary_markdown(
            summary, mlflow_links(self.tracker), self.cfg.target_return), f"{self.cfg.env_id}: IMPACT summary")
        self.publisher.close()

    def failed(self, error: BaseException) -> None:
        """A failed training: its table so far and a summary naming the error."""
        try:
            if isinstance(error, Exception):  # not on Ctrl-C: stop now
                self._publish_table()
                self.publisher.markdown("summary", failure_markdown(
                    self.cfg.env_id, len(self.records), f"{type(error).__name__}: {error}",
                    mlflow_links(self.tracker), unit="chunks"), f"{self.cfg.env_id}: IMPACT summary")
        finally:
            self.publisher.close()

    def _publish_table(self) -> None:
        self._table_chunks = len(self.records)
        self.publisher.table("chunks", impact_chunk_rows(self.records),
                             f"{self.cfg.env_id}: IMPACT chunks 0..{self._table_chunks - 1}")


class EpisodeArtifacts:
    """A scheduler training run's Prefect artifacts: progress over its N episodes and a final
    summary (published on the background thread as a training run's are)."""

    def __init__(self, run_id: str, total: int, done: int, logger):
        self.total = total
        self.publisher = ArtifactPublisher(run_id, logger)
        self.keys = {kind: self.publisher.key(kind)
                     for kind in ("scheduler-progress", "scheduler-episodes", "scheduler-summary")}
        self.episodes_done(done)

    def episodes_done(self, done: int, last_reward: float | None = None,
                      episodes: list[SchedulerEpisodeRecord] | None = None) -> None:
        """After each batch of episodes: progress, and the table of this run's episodes so far."""
        self.publisher.progress("scheduler-progress", episodes_progress(done, self.total, last_reward))
        if episodes:
            self.publisher.table("scheduler-episodes", episode_rows(episodes),
                                 f"scheduler training: episodes {episodes[0].episode}..{episodes[-1].episode}")

    def finished(self, env_id: str, episodes: list[SchedulerEpisodeRecord], updates: int, scheduler_uri: str,
                 tracker: RunTracker) -> None:
        """The summary; waits for the calls still queued."""
        text = scheduler_summary_markdown(env_id, episodes, updates, scheduler_uri, mlflow_links(tracker))
        self.publisher.markdown("scheduler-summary", text, f"{env_id}: scheduler training")
        self.close()

    def close(self) -> None:
        """Wait for the calls still queued (again after `finished`: nothing left to wait for)."""
        self.publisher.close()

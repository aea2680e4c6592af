"""A training run as people look at it: Prefect artifacts of the `train` flow run (progress, a
table of the rounds, a final summary) and, in MLflow, plots and the policy as a pyfunc model.

What they say is rendered in models/report.py; here are only the calls. Publishing never fails
training: an error is a warning in the run's log. Prefect calls run on one background thread,
in order, so that a round never waits for the API; `close` waits for them.
"""

from __future__ import annotations

import contextvars
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flows.tracking import RunTracker
from models.report import (
    TABLE_EVERY,
    MlflowLinks,
    artifact_key,
    episodes_progress,
    failure_markdown,
    plot_rounds,
    round_rows,
    run_progress,
    scheduler_summary_markdown,
    summary_markdown,
    table_due,
)
from models.session import RunSummary, TrainingSession


def mlflow_links(tracker: RunTracker, model=None) -> MlflowLinks:
    """Where the tracker's run (and its logged model, a flows/policy_model.py LoggedPolicyModel) is."""
    return MlflowLinks(tracker.tracking_uri, tracker.experiment_id, tracker.run_id,
                       model_uri=model.model_uri if model else None,
                       registered=model.registered if model else None)


class RunArtifacts:
    """One training run's Prefect artifacts, keyed by its MLflow run id, and its MLflow plots."""

    def __init__(self, session: TrainingSession, tracker: RunTracker, logger, table_every: int = TABLE_EVERY):
        self.session, self.tracker, self.logger = session, tracker, logger
        self.table_every = table_every
        self.keys = {kind: artifact_key(kind, session.run_id) for kind in ("progress", "rounds", "summary")}
        self._progress_id: Any = None
        self._table_rounds = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="artifacts")
        self._pending: list[Future] = []
        self.timings: list[tuple[str, float]] = []
        """(artifact call, seconds) for every Prefect call made: what publishing costs."""
        self._warned: set[str] = set()
        self._publish("progress", self._progress)

    # -- the flow's hooks --------------------------------------------------------------------
    def round_done(self, session: TrainingSession | None = None) -> None:
        """After each round: progress; the round table every `table_every` rounds."""
        self._publish("progress", self._progress)
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
            self._warn("model", f"the policy was not logged as an MLflow model: {type(exc).__name__}: {exc}")
            self.tracker.set_tags({"minionsrl.warning": f"policy model not logged: {exc}"[:5000]})
            return None
        self.tracker.set_tags({"minionsrl.model_uri": model.model_uri})
        return model

    def finished(self, summary: RunSummary, model=None, plots: bool = True) -> None:
        """At the end: last table, progress at 100 %, the summary, then (plots) plots in MLflow."""
        links = mlflow_links(self.tracker, model)
        cfg = self.session.cfg
        self._publish("progress", self._progress)
        if self._table_rounds != self.session.round_index:
            self._publish_table()
        self._publish("summary", self._markdown,
                      summary_markdown(summary, links, cfg.target_return, cfg.budget_usd))
        if plots:
            self.log_plots()
        self.close()

    def failed(self, error: BaseException) -> None:
        """A failed run: its table so far, a summary naming the error, and its plots."""
        try:
            if isinstance(error, Exception):  # not on Ctrl-C: stop now
                message = f"{type(error).__name__}: {error}"
                self._publish_table()
                self._publish("summary", self._markdown, failure_markdown(
                    self.session.cfg.env_id, self.session.round_index, message, mlflow_links(self.tracker)))
                self.log_plots()
        finally:
            self.close()

    def log_plots(self) -> None:
        """PNGs of return, actors and cost per round, as MLflow artifacts under plots/."""
        try:
            with tempfile.TemporaryDirectory() as tmp:
                cfg = self.session.cfg
                for path in plot_rounds(self.session.progress.history, tmp, title=cfg.env_id,
                                        target_return=cfg.target_return):
                    self.tracker.log_artifact(path, "plots")
        except Exception as exc:
            self._warn("plots", f"plots not logged to MLflow: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Wait for the Prefect calls still queued."""
        for future in self._pending:
            future.result()
        self._pending.clear()
        self._pool.shutdown(wait=True)

    # -- Prefect calls (on the background thread) --------------------------------------------
    def _publish_table(self) -> None:
        self._table_rounds = self.session.round_index
        self._publish("rounds", self._table)

    def _publish(self, what: str, call, *args) -> None:
        """Queue `call` with what it needs from the session now; it runs in the flow run's
        context (contextvars copied), so the artifact belongs to this flow run."""
        snapshot = self._snapshot()
        context = contextvars.copy_context()
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(context.run, self._timed, what, call, snapshot, *args))

    def _snapshot(self) -> dict[str, Any]:
        s, cfg = self.session, self.session.cfg
        last = s.last
        return {"progress": run_progress(s.round_index, cfg.max_rounds, cfg.target_return,
                                         last.mean_return if last else float("nan"), s.stop_reason,
                                         s.progress.spent_usd, cfg.budget_usd),
                "rows": round_rows(s.progress.history, cfg.budget_usd), "rounds": s.round_index}

    def _timed(self, what: str, call, snapshot, *args) -> None:
        started = time.perf_counter()
        try:
            call(snapshot, *args)
        except Exception as exc:
            self._warn(what, f"Prefect artifact {what!r} not published: {type(exc).__name__}: {exc}")
        finally:
            self.timings.append((what, time.perf_counter() - started))

    def _progress(self, snapshot) -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        p = snapshot["progress"]
        if self._progress_id is None:
            self._progress_id = create_progress_artifact(p.percent, key=self.keys["progress"],
                                                         description=p.description)
        else:
            update_progress_artifact(self._progress_id, p.percent, description=p.description)

    def _table(self, snapshot) -> None:
        from prefect.artifacts import create_table_artifact

        if not snapshot["rows"]:
            return
        create_table_artifact(snapshot["rows"], key=self.keys["rounds"],
                              description=f"{self.session.cfg.env_id}: rounds 0..{snapshot['rounds'] - 1}")

    def _markdown(self, snapshot, text: str) -> None:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(text, key=self.keys["summary"], description=f"{self.session.cfg.env_id}: summary")

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:  # once per kind: a down API must not flood the log
            self._warned.add(what)
            self.logger.warning(message)


class EpisodeArtifacts:
    """A scheduler training run's Prefect artifacts: progress over its N episodes and a final
    summary. Called once per batch of episodes (each a whole training run), so synchronously."""

    def __init__(self, run_id: str, total: int, done: int, logger):
        self.total, self.logger = total, logger
        self.keys = {kind: artifact_key(kind, run_id) for kind in ("scheduler-progress", "scheduler-summary")}
        self._progress_id: Any = None
        self._failed = False
        self.episodes_done(done)

    def episodes_done(self, done: int, last_reward: float | None = None) -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        p = episodes_progress(done, self.total, last_reward)
        if self._progress_id is None:
            self._progress_id = self._safely(create_progress_artifact, p.percent,
                                             key=self.keys["scheduler-progress"], description=p.description)
        else:
            self._safely(update_progress_artifact, self._progress_id, p.percent, description=p.description)

    def finished(self, env_id: str, episodes: list[dict[str, Any]], updates: int, scheduler_uri: str,
                 tracker: RunTracker) -> None:
        from prefect.artifacts import create_markdown_artifact

        text = scheduler_summary_markdown(env_id, episodes, updates, scheduler_uri, mlflow_links(tracker))
        self._safely(create_markdown_artifact, text, key=self.keys["scheduler-summary"],
                     description=f"{env_id}: scheduler training")

    def _safely(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as exc:  # never fail the training for an artifact
            if not self._failed:
                self._failed = True
                self.logger.warning("Prefect artifact not published: %s: %s", type(exc).__name__, exc)
            return None

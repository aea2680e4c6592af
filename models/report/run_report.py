"""What a training run shows a person: its progress, a table of its rounds, a final summary and
plots, rendered from RoundRecord / RunSummary (models/run/session.py) as plain data and text; the
same for an IMPACT training (its chunks, models/impact/learner.py) and for an experiment (its runs).

No Prefect or MLflow here: flows/artifacts.py publishes these as Prefect artifacts and MLflow
files; tests check the rendering directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from models.impact.config import ImpactRunConfig
from models.impact.progress import ImpactChunkRecord, ImpactSummary
from models.run.records import STOP_BUDGET, STOP_MAX_ROUNDS, STOP_TARGET, RoundRecord, RunSummary
from models.scheduling.training import SchedulerEpisodeRecord

ArtifactRow = dict[str, str | float | int | None]
"""One row of a table artifact: column -> a JSON value (None where a figure is NaN)."""

TABLE_EVERY = 5
"""Rounds between two versions of the per-round table (and one at the end): each version is a
new artifact on the API holding every row so far."""

_KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def artifact_key(kind: str, run_id: str | None) -> str:
    """A Prefect artifact key for one run's artifact of `kind`: 'minionsrl-progress-1a2b3c4d'.

    Prefect keys hold only lowercase letters, digits and dashes; the MLflow run id's first 8
    characters keep one run's artifacts apart from another's (a resumed run keeps its key,
    and each publication adds a version under it)."""
    short = re.sub(r"[^a-z0-9]", "", (run_id or "").lower())[:8] or "norun"
    kind = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    key = f"minionsrl-{kind}-{short}"
    if not _KEY.match(key):
        raise ValueError(f"not a Prefect artifact key: {key!r}")
    return key


@dataclass(frozen=True)
class Progress:
    """A progress artifact's value (percent of K rounds) and its one-line description."""

    percent: float
    description: str


def run_progress(rounds_done: int, max_rounds: int, target_return: float, last_return: float,
                 stop_reason: str | None = None, spent_usd: float = 0.0,
                 budget_usd: float | None = None, done: float | None = None) -> Progress:
    """Rounds done of K (or `done`, the fraction of the nearer of K and S); 100 % once the run
    stopped, for whatever reason, with the reason."""
    percent = 100.0 if stop_reason else min(100.0, 100.0 * (rounds_done / max(max_rounds, 1) if done is None else done))
    ret = "no episode ended" if math.isnan(last_return) else f"return {last_return:.1f}"
    money = f"; ${spent_usd:.4g} of B=${budget_usd:.4g} spent" if budget_usd is not None else ""
    missed = f"({ret}, J={target_return:g} not reached)"
    head = {STOP_TARGET: f"J={target_return:g} reached at round {rounds_done - 1} ({ret})",
            STOP_BUDGET: f"stopped by the budget after {rounds_done} of K={max_rounds} rounds {missed}",
            STOP_MAX_ROUNDS: f"K={max_rounds} rounds done {missed}"}.get(stop_reason or "")
    if head is None:  # another stop (max_env_steps: the env-step budget S), or none yet
        head = (f"stopped by {stop_reason} after {rounds_done} rounds {missed}" if stop_reason
                else f"{rounds_done} of K={max_rounds} rounds done ({ret}, J={target_return:g})")
    return Progress(percent, head + money)


ROUND_COLUMNS = ("round", "actors", "return", "P_k (s)", "wall (s)", "cost ($)", "budget left ($)")


def round_rows(history: Sequence[RoundRecord], budget_usd: float) -> list[ArtifactRow]:
    """One row per round (ROUND_COLUMNS); budget left is B minus the rounds' costs so far (a
    round attempt a crash cut short is billed too but has no row). NaN returns become None
    (JSON has no NaN)."""
    rows, spent = [], 0.0
    for r in history:
        spent += r.cost_usd
        rows.append(dict(zip(ROUND_COLUMNS, (
            r.round_index, r.actors, None if math.isnan(r.mean_return) else round(r.mean_return, 2),
            round(r.round_s, 3), round(r.wall_s, 3), round(r.cost_usd, 7), round(budget_usd - spent, 7)),
            strict=True)))
    return rows


def table_due(rounds_done: int, stopped: bool, every: int = TABLE_EVERY) -> bool:
    """Publish the table every `every` rounds and once the run stopped."""
    return rounds_done > 0 and (stopped or rounds_done % every == 0)


MODEL_TRAINING_UI = "workflowType=machine_learning"
"""MLflow 3's UI opens in its GenAI mode (side bar of traces, judges, prompts) until told
otherwise; this query switches it to "Model training" (its workflowType URL parameter)."""


@dataclass(frozen=True)
class MlflowLinks:
    """Where the run and its model are in MLflow, for the summary."""

    tracking_uri: str
    experiment_id: str | None
    run_id: str | None
    model_uri: str | None = None
    """The logged pyfunc model (models:/<model id>), if it was logged."""
    registered: str | None = None
    """'<name> version <n>' when the model was registered."""
    ui_base: str = "http://127.0.0.1:5000"

    @property
    def ui_command(self) -> str | None:
        """The command that serves the store (None: the store is a server already)."""
        if self.tracking_uri.startswith(("http://", "https://")):
            return None
        return f"mlflow ui --backend-store-uri {self.tracking_uri} --host 127.0.0.1 --port 5000"

    @property
    def run_url(self) -> str:
        return f"{self._base}/#/experiments/{self.experiment_id}/runs/{self.run_id}?{MODEL_TRAINING_UI}"

    @property
    def runs_url(self) -> str:
        """The experiment's runs with return, time to J and cost as columns (flows/tracking.py
        RUNS_VIEW, the shared view every experiment carries)."""
        return (f"{self._base}/#/experiments/{self.experiment_id}/runs?viewStateShareKey=minionsrl"
                f"&{MODEL_TRAINING_UI}")

    @property
    def _base(self) -> str:
        return (self.tracking_uri if self.ui_command is None else self.ui_base).rstrip("/")


def _money(x: float) -> str:
    return f"${x:.6f}"


def _num(x: float, fmt: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _link(url: str) -> str:
    """A markdown link that shows its URL (Prefect's renderer shows a bare URL's '&' as '&amp;',
    so URLs with a query of two parts get a link text instead: mlflow_lines)."""
    return f"[{url}]({url})"


def open_hint(links: MlflowLinks) -> str:
    """How to open the run: the command that serves the store, then its URL (or the URL alone)."""
    return f"`{links.ui_command}`, then {_link(links.run_url)}" if links.ui_command else _link(links.run_url)


def mlflow_lines(links: MlflowLinks) -> list[str]:
    """A summary's MLflow section: the run, how to open it and the workload's runs view."""
    return ["## MLflow", "",
            f"Run `{links.run_id}` (experiment {links.experiment_id}) in `{links.tracking_uri}`.", "",
            f"Open it: {open_hint(links)}", "",
            f"All runs of the workload, with return, time to J and cost as columns: "
            f"[the runs table]({links.runs_url})", ""]


def summary_markdown(summary: RunSummary, links: MlflowLinks, target_return: float, budget_usd: float) -> str:
    """The final summary of a run as markdown: why it stopped, its figures, and where to look."""
    s = summary
    lines = [
        f"# {s.env_id} · {s.scheduler} · seed {s.seed}",
        "",
        f"**Stopped: {s.stop_reason}**" + (f" ({s.stop_detail})" if s.stop_detail else ""),
        "",
        f"**Wall time {_num(s.wall_time_s, '.2f')} s** on this machine; cloud clock "
        f"{_num(s.cloud_time_s, '.2f')} s (one core per actor, orchestration included), of which "
        f"{_percent(s.orchestration_share)} orchestration.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| rounds | {s.rounds} |",
        f"| target J reached | {'yes' if s.target_reached else 'no'} (J = {target_return:g}) |",
        f"| final return | {_num(s.final_return)} |",
        f"| best return | {_num(s.best_return)} |",
        f"| env steps | {s.env_steps} |",
        f"| wall time (this machine's clock) | {_num(s.wall_time_s, '.2f')} s |",
        f"| cloud clock (P_k + orchestration) | {_num(s.cloud_time_s, '.2f')} s |",
        f"| sum of P_k (learner + slowest actor) | {_num(s.time_to_stop_s, '.2f')} s |",
        f"| cost | {_money(s.cost_usd)} of B = ${budget_usd:g} |",
        f"| ↳ actors | {_money(s.actors_cost_usd)} |",
        f"| ↳ learner ({s.learner_device or 'n/a'}) | {_money(s.learner_cost_usd)} |",
        f"| ↳ start-up | {_money(s.startup_cost_usd)} |",
        f"| server cluster, same time | {_money(s.server_cluster_cost_usd)} with its start-up, "
        f"{_money(s.server_cluster_cost_no_startup_usd)} without |",
        "",
    ] + mlflow_lines(links)
    if links.model_uri:
        lines += [f"Policy model: `{links.model_uri}`"
                  + (f", registered as {links.registered}" if links.registered else ""), "",
                  "```python",
                  "import mlflow",
                  f"mlflow.set_tracking_uri({links.tracking_uri!r})",
                  f"policy = mlflow.pyfunc.load_model({links.model_uri!r})",
                  "actions = policy.predict(observations)  # a batch of raw observations",
                  "```", ""]
    return "\n".join(lines)


def failure_markdown(env_id: str, rounds_done: int, error: str, links: MlflowLinks, unit: str = "rounds") -> str:
    """The summary of a run that failed: how far it got (in `unit`: rounds, IMPACT's chunks) and why."""
    return "\n".join([f"# {env_id}: failed after {rounds_done} {unit}", "", "```", error[:2000], "```", "",
                      f"MLflow run `{links.run_id}` (tag `minionsrl.failure`): {open_hint(links)}", ""])


PLOTS = (("return", "mean episode return R_k"), ("actors", "actors I_k"), ("cost", "cost per round ($)"))


def plot_rounds(history: Sequence[RoundRecord], out_dir: str | Path, title: str = "",
                target_return: float | None = None) -> list[Path]:
    """PNG plots of return, actors and cost per round into out_dir: [return.png, actors.png,
    cost.png] (the return plot marks J). Nothing is drawn for a run without rounds.

    Drawn on matplotlib's Figure, not pyplot: no global figure state to share with a caller's
    own figures."""
    if not history:
        return []
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rounds = [r.round_index for r in history]
    series = {"return": [r.mean_return for r in history], "actors": [r.actors for r in history],
              "cost": [r.cost_usd for r in history]}
    paths = []
    for name, label in PLOTS:
        fig = Figure(figsize=(6, 3.5), dpi=100)
        ax = fig.subplots()
        if name == "actors":
            ax.step(rounds, series[name], where="mid")
        elif name == "cost":
            ax.bar(rounds, series[name])
        else:
            ax.plot(rounds, series[name], marker=".")
            if target_return is not None and math.isfinite(target_return):
                ax.axhline(target_return, linestyle="--", color="grey", label=f"J = {target_return:g}")
                ax.legend(loc="lower right")
        ax.set_xlabel("round k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds, not 0.5 of one
        ax.set_ylabel(label)
        ax.set_title(f"{title}: {label}" if title else label, fontsize=10)
        ax.grid(alpha=0.3)
        fig.subplots_adjust(left=0.15, right=0.97, bottom=0.14, top=0.91)  # tight_layout: +60% time
        path = out / f"{name}.png"
        fig.savefig(path)
        paths.append(path)
    return paths


# -- scheduler training (flows/scheduler_flows.py): one episode is one whole training run -------

def episodes_progress(done: int, total: int, last_reward: float | None = None) -> Progress:
    """Episodes done of N, with the last episode's reward."""
    reward = "" if last_reward is None or not math.isfinite(last_reward) else f", last reward {last_reward:.3g}"
    return Progress(min(100.0, 100.0 * done / max(total, 1)), f"{done} of {total} scheduler episodes done{reward}")


EPISODE_COLUMNS = ("episode", "reward", "rounds", "J reached", "time to stop (s)", "cost ($)", "mean actors")


def episode_rows(episodes: Sequence[SchedulerEpisodeRecord]) -> list[ArtifactRow]:
    """A scheduler training's table: one row per episode (EPISODE_COLUMNS; time is the sum of
    P_k), the figures its MLflow run logs as episode/... metrics. NaN becomes None (JSON)."""
    return [dict(zip(EPISODE_COLUMNS, (
        e.episode, _finite(e.reward, 4), e.rounds, "yes" if e.target_reached else "no",
        _finite(e.time_to_stop_s, 3), round(e.cost_usd, 7), _finite(e.actors_mean, 2)), strict=True))
        for e in episodes]


def scheduler_summary_markdown(env_id: str, episodes: Sequence[SchedulerEpisodeRecord], updates: int,
                               scheduler_uri: str, links: MlflowLinks) -> str:
    """A scheduler training run's summary: its episodes (reward, rounds, target, time, cost) and
    where the trained scheduler is."""
    lines = [f"# Scheduler training on {env_id}", "",
             f"{len(episodes)} episodes this run, {updates} agent updates in all.", "",
             "| episode | reward | rounds | J reached | time to stop (s) | cost ($) | mean actors |",
             "|---|---|---|---|---|---|---|"]
    for e in episodes:
        lines.append(f"| {e.episode} | {_num(e.reward, '.3g')} | {e.rounds} "
                     f"| {'yes' if e.target_reached else 'no'} | {_num(e.time_to_stop_s, '.2f')} "
                     f"| {e.cost_usd:.6f} | {_num(e.actors_mean)} |")
    lines += ["", f"Trained scheduler: `{scheduler_uri}` (use it: `--scheduler learned:{scheduler_uri}`)", "",
              f"MLflow run `{links.run_id}`: {open_hint(links)}", ""]
    return "\n".join(lines)


# -- IMPACT (flows/impact.py): the learner runs in chunks of learner steps ----------------------

def impact_progress(last: ImpactChunkRecord | None, cfg: ImpactRunConfig, stop_reason: str | None = None) -> Progress:
    """Progress toward whichever stop rule is nearest: env steps of max_env_steps, time (the run's
    cloud clock) of max_wall_s, chunks of max_chunks when set (J has no fraction to show); 100 % once stopped."""
    if last is None:
        return Progress(0.0, f"actors starting (J={cfg.target_return:g}, up to {cfg.max_env_steps} env steps "
                             f"or {cfg.max_wall_s:g} s)")
    chunks = last.chunk + 1
    nearest = max(last.env_steps / cfg.max_env_steps, last.cloud_s / cfg.max_wall_s,
                  chunks / cfg.max_chunks if cfg.max_chunks else 0.0)
    percent = 100.0 if stop_reason else min(100.0, 100.0 * nearest)
    ret = "no episode ended" if math.isnan(last.mean_return) else f"return {last.mean_return:.1f}"
    figures = (f"{last.learner_steps} learner steps, {ret} vs J={cfg.target_return:g}, "
               f"{last.env_steps} of {cfg.max_env_steps} env steps, {last.cloud_s:.1f} of {cfg.max_wall_s:g} s "
               f"{'on the cloud clock' if cfg.backend == 'virtual' else 'wall'}")
    head = f"stopped ({stop_reason}) after {chunks} chunks" if stop_reason else f"chunk {last.chunk}"
    return Progress(percent, f"{head}: {figures}")


_CLOCK_WORDS = {"virtual": "the virtual executor: a core per actor", "wall": "actors ran for real: the wall"}
IMPACT_CHUNK_COLUMNS = ("chunk", "learner steps", "env steps", "return", "policy lag", "cloud (s)",
                        "wall (s)", "server cluster ($)")


def impact_chunk_rows(records: Sequence[ImpactChunkRecord]) -> list[ArtifactRow]:
    """One row per chunk (IMPACT_CHUNK_COLUMNS), figures so far; NaN becomes None (JSON has no NaN)."""
    return [dict(zip(IMPACT_CHUNK_COLUMNS, (
        r.chunk, r.learner_steps, r.env_steps, _finite(r.mean_return, 2), _finite(r.policy_lag_mean, 2),
        round(r.cloud_s, 3), round(r.wall_s, 3), round(r.server_cluster_usd, 7)), strict=True)) for r in records]


def _finite(x: float, digits: int) -> float | None:
    return round(x, digits) if math.isfinite(x) else None


def impact_summary_markdown(s: ImpactSummary, links: MlflowLinks, target_return: float) -> str:
    """The final summary of an IMPACT training: why it stopped, its figures, its bill as the
    server cluster it runs on (serverless for reference), and where to look."""
    lines = [
        f"# {s.env_id} · IMPACT · seed {s.seed}",
        "",
        f"**Stopped: {s.stop_reason}**",
        "",
        "| figure | value |",
        "|---|---|",
        f"| chunks | {s.chunks} |",
        f"| learner steps | {s.learner_steps} |",
        f"| env steps | {s.env_steps} |",
        f"| target J reached | {'yes' if s.target_reached else 'no'} (J = {target_return:g}) |",
        f"| final return | {_num(s.final_return)} |",
        f"| time, cloud clock ({_CLOCK_WORDS.get(s.clock, s.clock)}) | {_num(s.cloud_s, '.2f')} s |",
        f"| wall time (this machine's clock) | {_num(s.wall_s, '.2f')} s |",
        f"| cost: server cluster for its cloud time | {_money(s.server_cluster_cost_usd)} with its start-up, "
        f"{_money(s.server_cluster_cost_no_startup_usd)} without |",
        f"| server cluster for this machine's wall, for reference | {_money(s.server_cluster_at_wall_usd)} |",
        f"| serverless, for reference | {_money(s.serverless_cost_usd)} |",
        f"| orchestration | {100 * s.orchestration_frac:.1f} % of the cloud time |",
        f"| learner device, actors replaced | {s.learner_device}, {s.actor_replacements} |",
        "",
    ]
    return "\n".join(lines + mlflow_lines(links))


# -- experiments (flows/experiments/): each run is one whole `train` run -------------------------

RUN_TABLE_EVERY = 2
"""Finished runs between two versions of an experiment's run table: a run is a whole training."""


@dataclass(frozen=True)
class ExperimentRun:
    """One finished run of an experiment: its label there (a scheduler, 'finetuned', ...)."""

    label: str
    summary: RunSummary


EXPERIMENT_RUN_COLUMNS = ("run", "scheduler", "seed", "target reached", "rounds", "wall (s)", "cloud clock (s)",
                          "sum of P_k (s)", "cost ($)")


def experiment_run_rows(runs: Sequence[ExperimentRun]) -> list[ArtifactRow]:
    """One row per finished run (EXPERIMENT_RUN_COLUMNS), its three times side by side."""
    return [dict(zip(EXPERIMENT_RUN_COLUMNS, (
        i, r.label, r.summary.seed, "yes" if r.summary.target_reached else "no", r.summary.rounds,
        *(_finite(t, 3) for t in (r.summary.wall_time_s, r.summary.cloud_time_s, r.summary.time_to_stop_s)),
        round(r.summary.cost_usd, 7)), strict=True)) for i, r in enumerate(runs)]


def experiment_run_result(run: ExperimentRun) -> str:
    """One run's result in a phrase, for the experiment's progress."""
    s = run.summary
    stop = f"J reached in {s.rounds} rounds" if s.target_reached else f"{s.stop_reason} after {s.rounds} rounds"
    return (f"{run.label} seed {s.seed}: {stop} (return {_num(s.final_return)}, "
            f"wall {_num(s.wall_time_s, '.2f')} s, cloud {_num(s.cloud_time_s, '.2f')} s, ${s.cost_usd:.6f})")


def experiment_progress(done: int, planned: int, last_result: str | None = None,
                        finished: bool = False) -> Progress:
    """Runs done of N planned, with the last run's result; 100 % once the experiment finished."""
    percent = 100.0 if finished else min(100.0, 100.0 * done / max(planned, 1))
    count = f"{done} of {planned} runs done" if done <= planned else f"{done} runs done ({planned} planned)"
    return Progress(percent, count + (f"; last: {last_result}" if last_result else ""))


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%" if math.isfinite(value) else "n/a"

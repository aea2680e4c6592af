"""The experiments of SPEC §7 (items 1, 2, 3, 5) as flows.

Each flow owns one MLflow parent run in one experiment (default `minionsrl-experiments`); every
training run it starts is nested under it, so the runs compare side by side in the MLflow UI.
Each ends with a plot saved as an MLflow artifact (plots/<name>.png) and as Prefect artifacts
(a table, a markdown summary and the image).

    python -m flows.experiments compare --seeds 0 1 2 3 4     # learned vs Max vs Adapt vs server
    python -m flows.experiments motivation                    # Fixed vs Increase vs Decrease
    python -m flows.experiments actors-curve                  # the learned scheduler's I_k
    python -m flows.experiments transfer --env Acrobot-v1     # fine-tune the packaged CartPole
                                                              # scheduler vs from scratch, 10 episodes each

Times are sums of P_k (one core per actor, SPEC §3), never this machine's wall time.
"""

from __future__ import annotations

import argparse
import base64
import inspect
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import (  # noqa: E402
    create_image_artifact,
    create_markdown_artifact,
    create_table_artifact,
)

from flows.local_api import prefect_api  # noqa: E402
from flows.scheduler_flows import (  # noqa: E402
    WORKLOAD_KEYS,
    add_workload_arguments,
    finetune_scheduler,
    scheduler_target,
    train_scheduler,
    workload_arguments,
)
from flows.tracking import RunTracker  # noqa: E402
from flows.train import train  # noqa: E402
from models.config import ConfigError  # noqa: E402
from models.cost import PriceTable  # noqa: E402
from models.learned_scheduler import SHIPPED  # noqa: E402

DEFAULT_EXPERIMENT = "minionsrl-experiments"
LEARNED = SHIPPED  # the packaged CartPole-v1 scheduler ('learned:cartpole')
SET_BY_EXPERIMENT = ("env", "scheduler", "seed", "tracking_uri", "experiment", "parent_run_id",
                     "checkpoint_dir", "resume")
"""`train` parameters an experiment sets itself; every other one may be given as workload."""
TRAIN_DEFAULTS = {name: p.default for name, p in inspect.signature(train.fn).parameters.items()
                  if name not in SET_BY_EXPERIMENT}

# -- pure helpers: statistics and tables -------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std of the finite values (NaN, NaN when there are none)."""
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return math.nan, math.nan
    return float(np.mean(xs)), float(np.std(xs))


def aggregate(label: str, summaries: list[dict[str, Any]], cost_key: str = "cost_usd") -> dict[str, Any]:
    """One row of a comparison: time to stop and cost over seeds, and how often J was reached."""
    time_m, time_s = mean_std([s.time_to_stop_s for s in summaries])
    cost_m, cost_s = mean_std([s[cost_key] for s in summaries])
    rounds_m, _ = mean_std([float(s.rounds) for s in summaries])
    actors_m, _ = mean_std([float(np.mean([h.actors for h in s.history]))
                            for s in summaries if s.history])
    return {"scheduler": label, "runs": len(summaries),
            "reached": sum(bool(s.target_reached) for s in summaries),
            "time_s_mean": time_m, "time_s_std": time_s, "cost_usd_mean": cost_m,
            "cost_usd_std": cost_s, "rounds_mean": rounds_m, "actors_mean": actors_m}


def phases(actors: list[float]) -> tuple[float, float, float]:
    """Mean actor count over the first, middle and last third of a run's rounds."""
    if not actors:
        return math.nan, math.nan, math.nan
    thirds = np.array_split(np.asarray(actors, dtype=float), 3)
    return tuple(float(np.mean(t)) if len(t) else math.nan for t in thirds)  # type: ignore[return-value]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(rows[0])

    def fmt(v: Any) -> str:
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def _strip(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without its per-round scheduler trace, for results.json."""
    return {k: v for k, v in summary.items() if k != "scheduler_trace"}


def stripped(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every label's summaries without their traces, for results.json."""
    return {label: [_strip(s) for s in summaries] for label, summaries in runs.items()}


def row_metrics(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, float]:
    """`<scheduler>/<key>` metrics of the table's rows, for the parent MLflow run."""
    return {f"{r['scheduler'].replace(' ', '_')}/{k}": r[k] for r in rows for k in keys}


def learned_spec(ref: str) -> str:
    """The `train` scheduler for a learned-scheduler checkpoint (path, packaged name, MLflow URI)."""
    return f"learned:{ref}"


# -- shared plumbing ---------------------------------------------------------------------------


class Experiment:
    """The parent MLflow run of one experiment flow, the `train` runs nested under it, and where
    its plot and tables go. A context manager: the run ends FINISHED, or FAILED on an exception.

    `workload` holds the `train` parameters every run of the experiment shares (i_max,
    target_return, budget_usd, max_rounds, fragment, local_workers, ppo, ...; left out: the
    env's preset); they are checked by name before the MLflow run starts.
    """

    def __init__(self, name: str, env: str, params: dict[str, Any], workload: dict[str, Any],
                 tracking_uri: str | None, experiment: str | None, checkpoint_dir: str | None):
        unknown = sorted(set(workload) - set(TRAIN_DEFAULTS))
        if unknown:
            raise ConfigError(f"{name}: unknown train parameter(s) {unknown}; valid: {sorted(TRAIN_DEFAULTS)}")
        self.name, self.env, self.workload, self.checkpoint_dir = name, env, dict(workload), checkpoint_dir
        self.tracker = RunTracker(tracking_uri)
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.run_id = self.tracker.start(self.experiment, f"{name}__{time.strftime('%Y%m%d-%H%M%S')}",
                                         params={"env": env, **params, **self.workload},
                                         tags={"minionsrl.kind": "experiment", "minionsrl.experiment": name})

    def __enter__(self) -> Experiment:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.tracker.finish("FAILED" if exc_type else "FINISHED")

    def setting(self, name: str) -> Any:
        """A workload value as the runs get it (None: the env's preset)."""
        return self.workload.get(name, TRAIN_DEFAULTS[name])

    def train(self, scheduler: str, seed: int) -> dict[str, Any]:
        """A nested `train` run of this experiment's env and workload."""
        return train(env=self.env, scheduler=scheduler, seed=seed, tracking_uri=self.tracker.tracking_uri,
                     experiment=self.experiment, parent_run_id=self.run_id,
                     checkpoint_dir=self.checkpoint_dir, **self.workload)

    def publish(self, fig, rows: list[dict[str, Any]], summary_md: str,
                results: dict[str, Any]) -> dict[str, str]:
        """The plot (MLflow + Prefect), the table (Prefect), results.json (MLflow)."""
        key = self.name.replace("_", "-").lower()
        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / f"{self.name}.png"
            fig.savefig(png, dpi=110, bbox_inches="tight")
            plt.close(fig)
            self.tracker.log_artifact(png, "plots")
            data = Path(tmp) / "results.json"
            data.write_text(json.dumps(results, indent=1, default=str, allow_nan=True))
            self.tracker.log_artifact(data, "results")
            encoded = base64.b64encode(png.read_bytes()).decode()
        plot_uri = f"runs:/{self.run_id}/plots/{self.name}.png"
        finite_rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                       for r in rows]
        create_table_artifact(finite_rows, key=f"{key}-table", description=f"{self.name}: results")
        create_markdown_artifact(
            f"# {self.name}\n\n{summary_md}\n\n{markdown_table(rows)}\n\n"
            f"Plot: MLflow artifact `{plot_uri}` in `{self.tracker.tracking_uri}` "
            f"(experiment `{self.experiment}`, run `{self.run_id}`).",
            key=f"{key}-summary", description=f"{self.name}: summary")
        create_image_artifact(f"data:image/png;base64,{encoded}", key=f"{key}-plot",
                              description=f"{self.name}: plot")
        return {"run_id": self.run_id, "plot": plot_uri}


def _bars(ax, rows: list[dict[str, Any]], key: str, ylabel: str) -> None:
    labels = [r["scheduler"] for r in rows]
    ax.bar(labels, [r[f"{key}_mean"] for r in rows], yerr=[r[f"{key}_std"] for r in rows], capsize=4,
           color=[f"C{i}" for i in range(len(rows))])
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", rotation=20)


def _actor_steps(ax, summary: dict[str, Any], **style: Any) -> None:
    """I_k as a step line over rounds, the last round drawn to its end."""
    actors = [h.actors for h in summary.history]
    if actors:
        ax.step(range(len(actors) + 1), actors + actors[-1:], where="post", **style)


# -- 1. Table 2: learned vs Max vs Adapt vs the server-based fixed cluster --------------------


@flow(name="compare-schedulers", persist_result=False, validate_parameters=True)
def compare_schedulers(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    learned: str = LEARNED,
    baselines: list[str] | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    **workload: Any,
) -> dict[str, Any]:
    """Time (sum of P_k) and cost to J for the learned scheduler, Max, Adapt and the server-based
    fixed cluster, mean and std over seeds (SPEC §7.1, the paper's Table 2).

    The server-based row is Fixed(32) (the paper's cluster has 32 actor cores), timed as it runs
    and billed as the server cluster, once with its billed start-up (summary
    `server_cluster_cost_usd`) and once without (`server_cluster_cost_no_startup_usd`); when
    i_max is 32 these are the Max runs themselves.
    IMPACT is not run here (no asynchronous learner exists yet).
    `workload`: `train` parameters of every run (i_max, target_return, budget_usd, ...).
    """
    logger = get_run_logger()
    seeds = [0, 1, 2, 3, 4] if seeds is None else seeds
    baselines = ["max", "adapt"] if baselines is None else baselines
    with Experiment("compare_schedulers", env, {"seeds": seeds, "learned": learned, "baselines": baselines},
                    workload, tracking_uri, experiment, checkpoint_dir) as exp:
        i_max = exp.setting("i_max")
        server_cores = PriceTable.load().server_actor_cores
        server_spec = "max" if i_max == server_cores else f"fixed:{min(server_cores, i_max)}"
        specs = {"learned": learned_spec(learned)}
        specs.update({b: b for b in baselines})
        if server_spec not in specs.values():
            specs[server_spec] = server_spec
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in specs}
        for seed in seeds:
            for label, spec in specs.items():
                s = exp.train(spec, seed)
                runs[label].append(s)
                logger.info("%s seed %d: %s in %d rounds, time %.2fs, cost $%.5f", label, seed,
                            s.stop_reason, s.rounds, s.time_to_stop_s, s.cost_usd)
        server_label = next(label for label, spec in specs.items() if spec == server_spec)
        rows = [aggregate(label, runs[label]) for label in specs]
        rows.append(aggregate("server cluster", runs[server_label], cost_key="server_cluster_cost_usd"))
        # the cluster's start-up is an assumed price-table value: report the cluster without it too
        rows.append(aggregate("server cluster without start-up", runs[server_label],
                              cost_key="server_cluster_cost_no_startup_usd"))
        by = {r["scheduler"]: r for r in rows}
        metrics = row_metrics(rows, ("time_s_mean", "time_s_std", "cost_usd_mean", "cost_usd_std"))
        metrics.update({f"{r['scheduler'].replace(' ', '_')}/reached_frac": r["reached"] / max(r["runs"], 1)
                        for r in rows})
        checks = {}
        if "max" in by:
            metrics["learned_vs_max/cost_ratio"] = by["learned"]["cost_usd_mean"] / by["max"]["cost_usd_mean"]
            metrics["learned_vs_max/time_ratio"] = by["learned"]["time_s_mean"] / by["max"]["time_s_mean"]
            checks["cost <= 0.56 x Max"] = metrics["learned_vs_max/cost_ratio"] <= 0.56
            checks["time <= 1.1 x Max"] = metrics["learned_vs_max/time_ratio"] <= 1.1
        if "adapt" in by:
            metrics["learned_vs_adapt/time_ratio"] = by["learned"]["time_s_mean"] / by["adapt"]["time_s_mean"]
            checks["time < Adapt"] = metrics["learned_vs_adapt/time_ratio"] < 1.0
        exp.tracker.log_metrics(metrics, step=0)

        fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(11, 4))
        _bars(ax_t, rows, "time_s", "time to stop, sum of P_k (s)")
        _bars(ax_c, rows, "cost_usd", "cost (USD)")
        ax_c.set_yscale("log")
        fig.suptitle(f"{env}: schedulers over seeds {seeds} (mean ± std; reached J: "
                     + ", ".join(f"{r['scheduler']} {r['reached']}/{r['runs']}" for r in rows) + ")",
                     fontsize=9)
        md = ("Time is the sum of P_k (one core per actor); serverless cost bills execution "
              "seconds (actors, learner on its own device, start-up); the server cluster is billed "
              "for all wall time, shown with and without its assumed start-up.\n\n"
              + "\n".join(f"- {k}: {'yes' if v else 'no'}" for k, v in checks.items()))
        out = exp.publish(fig, rows, md, {"rows": rows, "metrics": metrics, "checks": checks,
                                          "runs": stripped(runs)})
        return {"rows": rows, "metrics": metrics, "checks": checks, **out, "runs": runs}


# -- 2. The CartPole-v1 motivation: Fixed vs Increase vs Decrease ------------------------------


@flow(name="motivation", persist_result=False, validate_parameters=True)
def motivation(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    n: int = 8,
    step: int = 2,
    every: int = 2,
    max_rounds: int = 12,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    **workload: Any,
) -> dict[str, Any]:
    """Fixed(n) vs Increase vs Decrease (step actors every `every` rounds) at the same total
    actor budget over max_rounds rounds (SPEC §7.2). A run that reaches J stops early, so the
    table also reports the actor-rounds each actually used. `workload`: other `train` parameters."""
    seeds = [0, 1, 2] if seeds is None else seeds
    specs = {"fixed": f"fixed:{n}", "increase": f"increase:{n}:{step}:{every}",
             "decrease": f"decrease:{n}:{step}:{every}"}
    with Experiment("motivation", env, {"seeds": seeds, "specs": specs}, {**workload, "max_rounds": max_rounds},
                    tracking_uri, experiment, checkpoint_dir) as exp:
        runs = {label: [exp.train(spec, seed) for seed in seeds] for label, spec in specs.items()}
        rows = []
        for label, summaries in runs.items():
            row = aggregate(label, summaries)
            row["actor_rounds_mean"] = mean_std([sum(h.actors for h in s.history)
                                                 for s in summaries])[0]
            rows.append(row)
        exp.tracker.log_metrics(row_metrics(rows, ("time_s_mean", "cost_usd_mean", "actor_rounds_mean")), step=0)
        fig, (ax_r, ax_a, ax_t) = plt.subplots(1, 3, figsize=(15, 4))
        for i, (label, summaries) in enumerate(runs.items()):
            for j, s in enumerate(summaries):
                t = np.cumsum([h.round_s for h in s.history])
                ax_r.plot(t, [h.mean_return for h in s.history], color=f"C{i}",
                          alpha=0.7, label=label if j == 0 else None)
            _actor_steps(ax_a, summaries[0], color=f"C{i}", label=label)
        ax_r.set_xlabel("sum of P_k (s)")
        ax_r.set_ylabel("mean episode return")
        ax_r.legend()
        ax_a.set_xlabel("round")
        ax_a.set_ylabel(f"actors (seed {seeds[0]})")
        ax_a.legend()
        _bars(ax_t, rows, "time_s", "time to stop, sum of P_k (s)")
        fig.suptitle(f"{env}: Fixed({n}) vs Increase vs Decrease (±{step} every {every} rounds, "
                     f"equal actor budget over {max_rounds} rounds)", fontsize=9)
        md = "Equal total actor budget over max_rounds; runs stop at J, see actor_rounds_mean."
        out = exp.publish(fig, rows, md, {"rows": rows, "runs": stripped(runs)})
        return {"rows": rows, "runs": runs, **out}


# -- 3. The learned scheduler's actor count per round -----------------------------------------


@flow(name="actors-curve", persist_result=False, validate_parameters=True)
def actors_curve(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    learned: str = LEARNED,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    **workload: Any,
) -> dict[str, Any]:
    """I_k per round of the learned scheduler (greedy), with the return it drove (SPEC §7.3).

    Reports the mean actor count over the first, middle and last third of each run: the paper
    saw many, fewer, more; this reports what appears, it does not force a shape.
    `workload`: `train` parameters of every run.
    """
    seeds = [0, 1, 2, 3, 4] if seeds is None else seeds
    with Experiment("actors_curve", env, {"seeds": seeds, "learned": learned}, workload, tracking_uri,
                    experiment, checkpoint_dir) as exp:
        runs = [exp.train(learned_spec(learned), seed) for seed in seeds]
        rows = []
        for seed, s in zip(seeds, runs, strict=True):
            actors = [h.actors for h in s.history]
            early, middle, late = phases(actors)
            rows.append({"seed": seed, "rounds": s.rounds, "reached": bool(s.target_reached),
                         "actors": json.dumps([int(a) for a in actors]), "early": early,
                         "middle": middle, "late": late,
                         "shape": ("many-fewer-more" if early > middle < late else
                                   "flat" if early == middle == late else "other")})
        mean_phases = [mean_std([r[k] for r in rows])[0] for k in ("early", "middle", "late")]
        exp.tracker.log_metrics({"phase/early_mean": mean_phases[0], "phase/middle_mean": mean_phases[1],
                                 "phase/late_mean": mean_phases[2]}, step=0)
        fig, (ax_a, ax_r) = plt.subplots(1, 2, figsize=(12, 4))
        longest = max((len(s.history) for s in runs), default=0)
        for i, (seed, s) in enumerate(zip(seeds, runs, strict=True)):
            _actor_steps(ax_a, s, color=f"C{i}", alpha=0.8, label=f"seed {seed}")
            ax_r.plot([h.mean_return for h in s.history], color=f"C{i}", alpha=0.8)
        if longest:
            padded = [[h.actors for h in s.history] for s in runs]
            mean_curve = [np.mean([p[k] for p in padded if k < len(p)]) for k in range(longest)]
            ax_a.plot(range(longest), mean_curve, "k--", label="mean")
        ax_a.set_xlabel("round k")
        ax_a.set_ylabel("actors I_k")
        ax_a.set_ylim(0, exp.setting("i_max") + 1)
        ax_a.legend(fontsize=7)
        ax_r.set_xlabel("round k")
        ax_r.set_ylabel("mean episode return")
        fig.suptitle(f"{env}: learned scheduler ({learned}); mean I over thirds of the run: "
                     f"{mean_phases[0]:.1f} / {mean_phases[1]:.1f} / {mean_phases[2]:.1f}", fontsize=9)
        md = (f"Mean actors over the first/middle/last third of the runs: {mean_phases[0]:.2f} / "
              f"{mean_phases[1]:.2f} / {mean_phases[2]:.2f}. Shapes: "
              + ", ".join(f"seed {r['seed']}: {r['shape']}" for r in rows))
        out = exp.publish(fig, rows, md, {"rows": rows, "runs": [_strip(s) for s in runs]})
        return {"rows": rows, "phases": mean_phases, **out}


# -- 5. Scheduler transfer: fine-tune vs from scratch -----------------------------------------


@flow(name="scheduler-transfer", persist_result=False, validate_parameters=True)
def scheduler_transfer(
    env: str = "Acrobot-v1",
    source: str = LEARNED,
    finetune_episodes: int = 10,
    scratch_episodes: int | None = None,
    batch_episodes: int = 2,
    eval_seeds: list[int] | None = None,
    target_return: float | None = None,
    seed: int = 0,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
    **workload: Any,
) -> dict[str, Any]:
    """Fine-tune `source` (default the packaged CartPole-v1 scheduler) on `env` for
    `finetune_episodes` against a scheduler trained there from scratch for `scratch_episodes`
    (default: as many; SPEC §7.5, the paper: 10 vs 100), then evaluate both greedy, and the
    untouched source zero-shot, on the held-out eval_seeds. Reports scheduler-training wall time.

    Both trainings see the same workload seeds (seed + episode); J is target_return, else the
    env's preset target, else gymnasium's reward_threshold (Acrobot-v1: -100), for the training
    episodes and the evaluation alike. `workload`: the scheduler workload's other `train`
    parameters (i_max, budget_usd, max_rounds, fragment, ppo, local_workers).
    """
    logger = get_run_logger()
    unknown = sorted(set(workload) - set(WORKLOAD_KEYS))
    if unknown:
        raise ConfigError(f"scheduler-transfer: unknown workload parameter(s) {unknown}; valid: {WORKLOAD_KEYS}")
    eval_seeds = [1000, 1001, 1002] if eval_seeds is None else eval_seeds
    scratch_episodes = finetune_episodes if scratch_episodes is None else scratch_episodes
    work = {**workload, "target_return": target_return}
    work["target_return"] = scheduler_target(env, work)
    with Experiment("scheduler_transfer", env, {"source": source, "finetune_episodes": finetune_episodes,
                                                "scratch_episodes": scratch_episodes, "eval_seeds": eval_seeds},
                    work, tracking_uri, experiment, checkpoint_dir) as exp:
        common = {"env": env, "batch_episodes": batch_episodes, "seed": seed,
                  "tracking_uri": exp.tracker.tracking_uri, "checkpoint_dir": checkpoint_dir, **work}
        trained = {"finetuned": finetune_scheduler(source=source, episodes=finetune_episodes, **common),
                   "scratch": train_scheduler(episodes=scratch_episodes, **common)}
        logger.info("scheduler training wall time: fine-tune %.0fs, scratch %.0fs",
                    trained["finetuned"]["wall_s"], trained["scratch"]["wall_s"])
        candidates = {"finetuned": trained["finetuned"]["checkpoint"], "scratch": trained["scratch"]["checkpoint"],
                      "zero-shot": source}
        evals = {label: [exp.train(learned_spec(ref), s) for s in eval_seeds] for label, ref in candidates.items()}
        rows = [aggregate(label, summaries) for label, summaries in evals.items()]
        for r in rows:
            r["scheduler_training_wall_s"] = trained[r["scheduler"]]["wall_s"] if r["scheduler"] in trained else 0.0
            r["scheduler_episodes"] = trained[r["scheduler"]]["episodes_done"] if r["scheduler"] in trained else 0
        exp.tracker.log_metrics(row_metrics(rows, ("time_s_mean", "cost_usd_mean", "scheduler_training_wall_s")),
                                step=0)
        fig, (ax_l, ax_t, ax_c) = plt.subplots(1, 3, figsize=(15, 4))
        for i, (label, res) in enumerate(trained.items()):
            ax_l.plot([e["episode"] for e in res["episodes"]], [e["episode/reward"] for e in res["episodes"]],
                      "o-", color=f"C{i}", label=f"{label} ({res['wall_s']:.0f}s)")
        ax_l.set_xlabel("scheduler episode")
        ax_l.set_ylabel("episode reward")
        ax_l.legend()
        _bars(ax_t, rows, "time_s", "time to stop, sum of P_k (s)")
        _bars(ax_c, rows, "cost_usd", "cost (USD)")
        fig.suptitle(f"{env} (J = {work['target_return']}): fine-tune {Path(source).name} for {finetune_episodes} "
                     f"episodes vs {scratch_episodes} from scratch; evaluated greedy on seeds {eval_seeds}",
                     fontsize=9)
        tuned, scratch = trained["finetuned"], trained["scratch"]
        saved = 1 - tuned["wall_s"] / scratch["wall_s"] if scratch["wall_s"] > 0 else math.nan
        md = (f"Scheduler training wall time: fine-tune {tuned['wall_s']:.0f}s vs scratch "
              f"{scratch['wall_s']:.0f}s ({saved:.0%} less).")
        out = exp.publish(fig, rows, md, {"rows": rows, "finetune": tuned, "scratch": scratch,
                                          "evals": stripped(evals)})
        return {"rows": rows, "finetune": tuned, "scratch": scratch, **out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one of the experiments of SPEC §7.")
    parser.add_argument("experiment", choices=("compare", "motivation", "actors-curve", "transfer"))
    parser.add_argument("--env", help="default: CartPole-v1 (transfer: Acrobot-v1)")
    parser.add_argument("--seeds", type=int, nargs="*", help="the runs' seeds (transfer: evaluation seeds)")
    parser.add_argument("--learned", default=LEARNED,
                        help="scheduler checkpoint (path, packaged name or MLflow URI); transfer: the source")
    parser.add_argument("--finetune-episodes", type=int, default=10)
    parser.add_argument("--scratch-episodes", type=int, help="default: as many as --finetune-episodes")
    parser.add_argument("--batch-episodes", type=int, help="transfer: episodes per scheduler update (2)")
    parser.add_argument("--experiment-name")
    add_workload_arguments(parser)
    args = parser.parse_args(argv)
    more = ("env", "batch_episodes") if args.experiment == "transfer" else ("env",)
    options = {"experiment": args.experiment_name, **workload_arguments(args, *more)}
    with prefect_api():
        if args.experiment == "compare":
            result = compare_schedulers(seeds=args.seeds, learned=args.learned, **options)
        elif args.experiment == "motivation":
            result = motivation(seeds=args.seeds, **options)
        elif args.experiment == "actors-curve":
            result = actors_curve(seeds=args.seeds, learned=args.learned, **options)
        else:
            result = scheduler_transfer(source=args.learned, finetune_episodes=args.finetune_episodes,
                                        scratch_episodes=args.scratch_episodes, eval_seeds=args.seeds,
                                        **options)
    print(markdown_table(result["rows"]))
    print(f"\nplot: {result['plot']} (MLflow parent run {result['run_id']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

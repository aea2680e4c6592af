"""The experiments of SPEC §7 (items 1, 2, 3, 5) as flows.

Each flow owns one MLflow parent run in one experiment (default `minionsrl-experiments`); every
training run it starts is nested under it, so the runs compare side by side in the MLflow UI.
Each ends with a plot saved as an MLflow artifact (plots/<name>.png) and as Prefect artifacts
(a table, a markdown summary and the image).

    python -m flows.experiments compare --seeds 0 1 2 3 4     # learned vs Max vs Adapt vs server
    python -m flows.experiments motivation                    # Fixed vs Increase vs Decrease
    python -m flows.experiments actors-curve                  # the learned scheduler's I_k
    python -m flows.experiments transfer --env Acrobot-v1     # fine-tune vs from scratch

Times are sums of P_k (one core per actor, SPEC §3), never this machine's wall time.
"""

from __future__ import annotations

import argparse
import base64
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
from flows.scheduler_flows import finetune_scheduler, train_scheduler  # noqa: E402
from flows.tracking import RunTracker  # noqa: E402
from flows.train import train  # noqa: E402
from models.cost import PriceTable  # noqa: E402

DEFAULT_EXPERIMENT = "minionsrl-experiments"
LEARNED = "learned"  # the packaged CartPole-v1 scheduler

# -- pure helpers: statistics and tables -------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std of the finite values (NaN, NaN when there are none)."""
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return math.nan, math.nan
    return float(np.mean(xs)), float(np.std(xs))


def aggregate(label: str, summaries: list[dict[str, Any]], cost_key: str = "cost_usd") -> dict[str, Any]:
    """One row of a comparison: time to stop and cost over seeds, and how often J was reached."""
    time_m, time_s = mean_std([s["time_to_stop_s"] for s in summaries])
    cost_m, cost_s = mean_std([s[cost_key] for s in summaries])
    rounds_m, _ = mean_std([float(s["rounds"]) for s in summaries])
    actors_m, _ = mean_std([float(np.mean([h["sched/actors"] for h in s["history"]]))
                            for s in summaries if s["history"]])
    return {"scheduler": label, "runs": len(summaries),
            "reached": sum(bool(s["target_reached"]) for s in summaries),
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
    """A summary without its per-round trace, for results.json."""
    return {k: v for k, v in summary.items() if k != "scheduler_trace"}


# -- shared plumbing ---------------------------------------------------------------------------


class Experiment:
    """The parent MLflow run of one experiment flow, and where its plot and tables go."""

    def __init__(self, name: str, params: dict[str, Any], tracking_uri: str | None,
                 experiment: str | None):
        self.name = name
        self.tracker = RunTracker(tracking_uri)
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.run_id = self.tracker.start(self.experiment, f"{name}__{time.strftime('%Y%m%d-%H%M%S')}",
                                         params=params, tags={"minionsrl.kind": "experiment",
                                                              "minionsrl.experiment": name})

    def train(self, **kwargs: Any) -> dict[str, Any]:
        """A nested `train` run in this experiment."""
        return train(tracking_uri=self.tracker.tracking_uri, experiment=self.experiment,
                     parent_run_id=self.run_id, **kwargs)

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
        return {"plot": plot_uri}

    def finish(self, status: str) -> None:
        self.tracker.finish(status)


def _workload(i_max: int, target_return: float | None, budget_usd: float | None,
              max_rounds: int | None, fragment: int | None, local_workers: int | None) -> dict[str, Any]:
    return {"i_max": i_max, "target_return": target_return, "budget_usd": budget_usd,
            "max_rounds": max_rounds, "fragment": fragment, "local_workers": local_workers}


def _bars(ax, rows: list[dict[str, Any]], key: str, ylabel: str) -> None:
    labels = [r["scheduler"] for r in rows]
    ax.bar(labels, [r[f"{key}_mean"] for r in rows], yerr=[r[f"{key}_std"] for r in rows], capsize=4,
           color=[f"C{i}" for i in range(len(rows))])
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", rotation=20)


def _actor_steps(ax, summary: dict[str, Any], **style: Any) -> None:
    """I_k as a step line over rounds, the last round drawn to its end."""
    actors = [h["sched/actors"] for h in summary["history"]]
    if actors:
        ax.step(range(len(actors) + 1), actors + actors[-1:], where="post", **style)


# -- 1. Table 2: learned vs Max vs Adapt vs the server-based fixed cluster --------------------


@flow(name="compare-schedulers", persist_result=False, validate_parameters=True)
def compare_schedulers(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    learned: str = LEARNED,
    baselines: list[str] | None = None,
    i_max: int = 32,
    target_return: float | None = None,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    fragment: int | None = None,
    local_workers: int | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Time (sum of P_k) and cost to J for the learned scheduler, Max, Adapt and the server-based
    fixed cluster, mean and std over seeds (SPEC §7.1, the paper's Table 2).

    The server-based row is Fixed(32) (the paper's cluster has 32 actor cores), timed as it runs
    and billed as the server cluster (summary `server_cluster_cost_usd`, which includes its
    billed start-up); when i_max is 32 these are the Max runs themselves.
    IMPACT is not run here (no asynchronous learner exists yet).
    """
    logger = get_run_logger()
    seeds = [0, 1, 2, 3, 4] if seeds is None else seeds
    baselines = ["max", "adapt"] if baselines is None else baselines
    work = _workload(i_max, target_return, budget_usd, max_rounds, fragment, local_workers)
    exp = Experiment("compare_schedulers", {"env": env, "seeds": seeds, "learned": learned,
                                            "baselines": baselines, **work}, tracking_uri, experiment)
    status = "FAILED"
    try:
        server_cores = PriceTable.load().server_actor_cores
        server_spec = "max" if i_max == server_cores else f"fixed:{min(server_cores, i_max)}"
        specs = {"learned": f"learned:{learned}" if learned != LEARNED else LEARNED}
        specs.update({b: b for b in baselines})
        if server_spec not in specs.values():
            specs[server_spec] = server_spec
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in specs}
        for seed in seeds:
            for label, spec in specs.items():
                s = exp.train(env=env, scheduler=spec, seed=seed, checkpoint_dir=checkpoint_dir, **work)
                runs[label].append(s)
                logger.info("%s seed %d: %s in %d rounds, time %.2fs, cost $%.5f", label, seed,
                            s["stop_reason"], s["rounds"], s["time_to_stop_s"], s["cost_usd"])
        server_label = next(label for label, spec in specs.items() if spec == server_spec)
        rows = [aggregate(label, runs[label]) for label in specs]
        rows.append(aggregate("server cluster", runs[server_label], cost_key="server_cluster_cost_usd"))
        by = {r["scheduler"]: r for r in rows}
        metrics: dict[str, float] = {}
        for r in rows:
            tag = r["scheduler"].replace(" ", "_")
            metrics.update({f"{tag}/time_s_mean": r["time_s_mean"], f"{tag}/time_s_std": r["time_s_std"],
                            f"{tag}/cost_usd_mean": r["cost_usd_mean"], f"{tag}/cost_usd_std": r["cost_usd_std"],
                            f"{tag}/reached_frac": r["reached"] / max(r["runs"], 1)})
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
              "seconds; the server cluster is billed for start-up and all wall time.\n\n"
              + "\n".join(f"- {k}: {'yes' if v else 'no'}" for k, v in checks.items()))
        out = exp.publish(fig, rows, md, {"rows": rows, "metrics": metrics, "checks": checks,
                                          "runs": {k: [_strip(s) for s in v] for k, v in runs.items()}})
        status = "FINISHED"
        return {"run_id": exp.run_id, "rows": rows, "metrics": metrics, "checks": checks, **out,
                "runs": runs}
    finally:
        exp.finish(status)


# -- 2. The CartPole-v1 motivation: Fixed vs Increase vs Decrease ------------------------------


@flow(name="motivation", persist_result=False, validate_parameters=True)
def motivation(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    n: int = 8,
    step: int = 2,
    every: int = 2,
    max_rounds: int = 12,
    i_max: int = 32,
    target_return: float | None = None,
    budget_usd: float | None = None,
    fragment: int | None = None,
    local_workers: int | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Fixed(n) vs Increase vs Decrease (step actors every `every` rounds) at the same total
    actor budget over max_rounds rounds (SPEC §7.2). A run that reaches J stops early, so the
    table also reports the actor-rounds each actually used."""
    seeds = [0, 1, 2] if seeds is None else seeds
    work = _workload(i_max, target_return, budget_usd, max_rounds, fragment, local_workers)
    specs = {"fixed": f"fixed:{n}", "increase": f"increase:{n}:{step}:{every}",
             "decrease": f"decrease:{n}:{step}:{every}"}
    exp = Experiment("motivation", {"env": env, "seeds": seeds, "specs": specs, **work},
                     tracking_uri, experiment)
    status = "FAILED"
    try:
        runs = {label: [exp.train(env=env, scheduler=spec, seed=seed, checkpoint_dir=checkpoint_dir, **work)
                        for seed in seeds] for label, spec in specs.items()}
        rows = []
        for label, summaries in runs.items():
            row = aggregate(label, summaries)
            row["actor_rounds_mean"] = mean_std([sum(h["sched/actors"] for h in s["history"])
                                                 for s in summaries])[0]
            rows.append(row)
        exp.tracker.log_metrics({f"{r['scheduler']}/{k}": r[k] for r in rows
                                 for k in ("time_s_mean", "cost_usd_mean", "actor_rounds_mean")}, step=0)
        fig, (ax_r, ax_a, ax_t) = plt.subplots(1, 3, figsize=(15, 4))
        for i, (label, summaries) in enumerate(runs.items()):
            for j, s in enumerate(summaries):
                t = np.cumsum([h["time/round_s"] for h in s["history"]])
                ax_r.plot(t, [h["rollout/ep_return_mean"] for h in s["history"]], color=f"C{i}",
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
        out = exp.publish(fig, rows, md, {"rows": rows, "runs": {k: [_strip(s) for s in v]
                                                                   for k, v in runs.items()}})
        status = "FINISHED"
        return {"run_id": exp.run_id, "rows": rows, "runs": runs, **out}
    finally:
        exp.finish(status)


# -- 3. The learned scheduler's actor count per round -----------------------------------------


@flow(name="actors-curve", persist_result=False, validate_parameters=True)
def actors_curve(
    env: str = "CartPole-v1",
    seeds: list[int] | None = None,
    learned: str = LEARNED,
    i_max: int = 32,
    target_return: float | None = None,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    fragment: int | None = None,
    local_workers: int | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """I_k per round of the learned scheduler (greedy), with the return it drove (SPEC §7.3).

    Reports the mean actor count over the first, middle and last third of each run: the paper
    saw many, fewer, more; this reports what appears, it does not force a shape.
    """
    seeds = [0, 1, 2, 3, 4] if seeds is None else seeds
    work = _workload(i_max, target_return, budget_usd, max_rounds, fragment, local_workers)
    spec = LEARNED if learned == LEARNED else f"learned:{learned}"
    exp = Experiment("actors_curve", {"env": env, "seeds": seeds, "learned": learned, **work},
                     tracking_uri, experiment)
    status = "FAILED"
    try:
        runs = [exp.train(env=env, scheduler=spec, seed=seed, checkpoint_dir=checkpoint_dir, **work)
                for seed in seeds]
        rows = []
        for seed, s in zip(seeds, runs, strict=True):
            actors = [h["sched/actors"] for h in s["history"]]
            early, middle, late = phases(actors)
            rows.append({"seed": seed, "rounds": s["rounds"], "reached": bool(s["target_reached"]),
                         "actors": json.dumps([int(a) for a in actors]), "early": early,
                         "middle": middle, "late": late,
                         "shape": ("many-fewer-more" if early > middle < late else
                                   "flat" if early == middle == late else "other")})
        mean_phases = [mean_std([r[k] for r in rows])[0] for k in ("early", "middle", "late")]
        exp.tracker.log_metrics({"phase/early_mean": mean_phases[0], "phase/middle_mean": mean_phases[1],
                                 "phase/late_mean": mean_phases[2]}, step=0)
        fig, (ax_a, ax_r) = plt.subplots(1, 2, figsize=(12, 4))
        longest = max((len(s["history"]) for s in runs), default=0)
        for i, (seed, s) in enumerate(zip(seeds, runs, strict=True)):
            _actor_steps(ax_a, s, color=f"C{i}", alpha=0.8, label=f"seed {seed}")
            ax_r.plot([h["rollout/ep_return_mean"] for h in s["history"]], color=f"C{i}", alpha=0.8)
        if longest:
            padded = [[h["sched/actors"] for h in s["history"]] for s in runs]
            mean_curve = [np.mean([p[k] for p in padded if k < len(p)]) for k in range(longest)]
            ax_a.plot(range(longest), mean_curve, "k--", label="mean")
        ax_a.set_xlabel("round k")
        ax_a.set_ylabel("actors I_k")
        ax_a.set_ylim(0, i_max + 1)
        ax_a.legend(fontsize=7)
        ax_r.set_xlabel("round k")
        ax_r.set_ylabel("mean episode return")
        fig.suptitle(f"{env}: learned scheduler ({learned}); mean I over thirds of the run: "
                     f"{mean_phases[0]:.1f} / {mean_phases[1]:.1f} / {mean_phases[2]:.1f}", fontsize=9)
        md = (f"Mean actors over the first/middle/last third of the runs: {mean_phases[0]:.2f} / "
              f"{mean_phases[1]:.2f} / {mean_phases[2]:.2f}. Shapes: "
              + ", ".join(f"seed {r['seed']}: {r['shape']}" for r in rows))
        out = exp.publish(fig, rows, md, {"rows": rows, "runs": [_strip(s) for s in runs]})
        status = "FINISHED"
        return {"run_id": exp.run_id, "rows": rows, "phases": mean_phases, **out}
    finally:
        exp.finish(status)


# -- 5. Scheduler transfer: fine-tune vs from scratch -----------------------------------------


@flow(name="scheduler-transfer", persist_result=False, validate_parameters=True)
def scheduler_transfer(
    env: str = "Acrobot-v1",
    source: str = LEARNED,
    finetune_episodes: int = 10,
    scratch_episodes: int = 30,
    batch_episodes: int = 2,
    eval_seeds: list[int] | None = None,
    i_max: int = 32,
    target_return: float | None = -100.0,
    budget_usd: float | None = None,
    max_rounds: int | None = None,
    fragment: int | None = None,
    local_workers: int | None = None,
    seed: int = 0,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Fine-tune `source` on `env` for `finetune_episodes` against a scheduler trained there from
    scratch for `scratch_episodes` (SPEC §7.5; the paper: 10 vs 100), then evaluate both greedy
    (and the untouched source, zero-shot) on eval_seeds. Reports scheduler-training wall time.

    target_return defaults to -100 (gymnasium's reward_threshold for Acrobot-v1); set it for
    another env.
    """
    logger = get_run_logger()
    eval_seeds = [1000, 1001, 1002] if eval_seeds is None else eval_seeds
    work = _workload(i_max, target_return, budget_usd, max_rounds, fragment, local_workers)
    exp = Experiment("scheduler_transfer", {"env": env, "source": source, "finetune_episodes": finetune_episodes,
                                            "scratch_episodes": scratch_episodes, "eval_seeds": eval_seeds,
                                            **work}, tracking_uri, experiment)
    status = "FAILED"
    try:
        common = {"env": env, "batch_episodes": batch_episodes, "seed": seed,
                  "tracking_uri": exp.tracker.tracking_uri, "checkpoint_dir": checkpoint_dir, **work}
        tuned = finetune_scheduler(source=source, episodes=finetune_episodes, **common)
        scratch = train_scheduler(episodes=scratch_episodes, **common)
        logger.info("scheduler training wall time: fine-tune %.0fs, scratch %.0fs", tuned["wall_s"], scratch["wall_s"])
        candidates = {"finetuned": tuned["checkpoint"], "scratch": scratch["checkpoint"], "zero-shot": source}
        evals = {label: [exp.train(env=env, scheduler="learned" if ref == LEARNED else f"learned:{ref}",
                                   seed=s, checkpoint_dir=checkpoint_dir, **work) for s in eval_seeds]
                 for label, ref in candidates.items()}
        rows = [aggregate(label, summaries) for label, summaries in evals.items()]
        for r in rows:
            r["scheduler_training_wall_s"] = {"finetuned": tuned["wall_s"], "scratch": scratch["wall_s"]}.get(
                r["scheduler"], 0.0)
            r["scheduler_episodes"] = {"finetuned": finetune_episodes, "scratch": scratch_episodes}.get(
                r["scheduler"], 0)
        exp.tracker.log_metrics({f"{r['scheduler']}/{k}": r[k] for r in rows
                                 for k in ("time_s_mean", "cost_usd_mean", "scheduler_training_wall_s")}, step=0)
        fig, (ax_l, ax_t, ax_c) = plt.subplots(1, 3, figsize=(15, 4))
        for i, (label, res) in enumerate((("finetuned", tuned), ("scratch", scratch))):
            ax_l.plot([e["episode"] for e in res["episodes"]], [e["episode/reward"] for e in res["episodes"]],
                      "o-", color=f"C{i}", label=f"{label} ({res['wall_s']:.0f}s)")
        ax_l.set_xlabel("scheduler episode")
        ax_l.set_ylabel("episode reward")
        ax_l.legend()
        _bars(ax_t, rows, "time_s", "time to stop, sum of P_k (s)")
        _bars(ax_c, rows, "cost_usd", "cost (USD)")
        fig.suptitle(f"{env}: fine-tune {Path(source).name} for {finetune_episodes} episodes vs {scratch_episodes} "
                     f"from scratch; evaluated greedy on seeds {eval_seeds}", fontsize=9)
        saved = 1 - tuned["wall_s"] / scratch["wall_s"] if scratch["wall_s"] > 0 else math.nan
        md = (f"Scheduler training wall time: fine-tune {tuned['wall_s']:.0f}s vs scratch "
              f"{scratch['wall_s']:.0f}s ({saved:.0%} less).")
        out = exp.publish(fig, rows, md, {"rows": rows, "finetune": tuned, "scratch": scratch,
                                          "evals": {k: [_strip(s) for s in v] for k, v in evals.items()}})
        status = "FINISHED"
        return {"run_id": exp.run_id, "rows": rows, "finetune": tuned, "scratch": scratch, **out}
    finally:
        exp.finish(status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one of the experiments of SPEC §7.")
    parser.add_argument("experiment", choices=("compare", "motivation", "actors-curve", "transfer"))
    parser.add_argument("--env")
    parser.add_argument("--seeds", type=int, nargs="*")
    parser.add_argument("--learned", default=LEARNED, help="scheduler checkpoint (path or MLflow URI)")
    parser.add_argument("--i-max", type=int, default=32)
    parser.add_argument("--target-return", type=float)
    parser.add_argument("--budget-usd", type=float)
    parser.add_argument("--max-rounds", type=int)
    parser.add_argument("--fragment", type=int)
    parser.add_argument("--local-workers", type=int)
    parser.add_argument("--finetune-episodes", type=int, default=10)
    parser.add_argument("--scratch-episodes", type=int, default=30)
    parser.add_argument("--tracking-uri")
    parser.add_argument("--experiment-name")
    args = parser.parse_args(argv)
    common = {"i_max": args.i_max, "budget_usd": args.budget_usd, "fragment": args.fragment,
              "local_workers": args.local_workers, "tracking_uri": args.tracking_uri,
              "experiment": args.experiment_name}
    if args.target_return is not None:
        common["target_return"] = args.target_return
    with prefect_api():
        if args.experiment == "compare":
            result = compare_schedulers(env=args.env or "CartPole-v1", seeds=args.seeds, learned=args.learned,
                                        max_rounds=args.max_rounds, **common)
        elif args.experiment == "motivation":
            result = motivation(env=args.env or "CartPole-v1", seeds=args.seeds,
                                **({"max_rounds": args.max_rounds} if args.max_rounds else {}), **common)
        elif args.experiment == "actors-curve":
            result = actors_curve(env=args.env or "CartPole-v1", seeds=args.seeds, learned=args.learned,
                                  max_rounds=args.max_rounds, **common)
        else:
            result = scheduler_transfer(env=args.env or "Acrobot-v1", source=args.learned,
                                        finetune_episodes=args.finetune_episodes,
                                        scratch_episodes=args.scratch_episodes,
                                        eval_seeds=args.seeds, max_rounds=args.max_rounds, **common)
    print(markdown_table(result["rows"]))
    print(f"\nplot: {result['plot']} (MLflow parent run {result['run_id']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

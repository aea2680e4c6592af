"""The learner on CUDA, checked on a machine with a GPU; needs torch, gymnasium, ale-py and mujoco,
not Prefect or MLflow (a GPU machine lent for minutes has no package registry to install them from).

    python -m benchmarks.gpu_check --minutes 1.5 --out gpu_check.json

1. Same update, two devices: one PPO update of the Hopper-v5 learner (MLP, Gaussian head,
   locomotion preset) and of the Qbert learner (Nature CNN) from the same seed, on the same real
   fragments, on the CPU (one thread) and on CUDA: the losses and the weights after the update
   agree to float tolerance (TF32 convolutions on CUDA), and each side's update seconds.
2. Qbert's Atari rows with the learner on CUDA (issue 35, point 5): learned (the shipped CartPole
   scheduler, transferred without fine-tuning: no Qbert scheduler exists), Max (32 actors) and
   Fixed(8), each the training session's round loop (models/run/session.py: the rounds of the
   `train` flow without Prefect's orchestration or MLflow) with actors in one process per core,
   for up to --minutes each, on held-out seed 100. Per round: actors, P_k, the learner's seconds,
   the return; then what a whole run to J would take at that pace (a projection, labelled so).
Without CUDA it runs the same on the CPU and says so (a smoke test of the script itself).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time
from dataclasses import dataclass, field

import torch

from models.envs.batch import env_spaces
from models.rl.ppo import Learner
from models.rl.rollout import ActorJob, RolloutBatch, run_actor
from models.run.presets import resolve_parameters
from models.run.session import TrainingSession

QBERT = "QbertNoFrameskip-v4"
SYSTEMS = (("learned (cartpole-v9, transferred)", "learned"), ("Max = Fixed(32)", "max"), ("Fixed(8)", "fixed:8"))


@dataclass
class DeviceAgreement:
    env_id: str
    samples: int
    cpu_update_s: float
    cuda_update_s: float
    max_abs_weight_diff: float
    weight_change_norm: float
    diff_over_change: float
    """||w_cuda - w_cpu|| / ||w_cpu - w_before||: how far apart the two updates land, against how
    far one update moves the weights."""
    loss_cpu: float
    loss_cuda: float


@dataclass
class SystemRows:
    system: str
    scheduler: str
    rounds: list[dict[str, float]] = field(default_factory=list)
    stop_reason: str | None = None


def _fragments(cfg, jobs: int) -> list[RolloutBatch]:
    """Real fragments sampled by the run's own actor code (initial weights, CPU)."""
    learner = Learner(env_spaces(cfg.env_id), cfg.ppo, seed=cfg.seed, device="cpu")
    weights, norm = learner.weights(), learner.norm_state()
    return [run_actor(ActorJob(env_id=cfg.env_id, round_index=0, actor_index=i, seed=1000 + i,
                               steps_per_env=cfg.steps_per_env, envs_per_actor=cfg.envs_per_actor,
                               hidden=cfg.ppo.hidden, weights=weights, norm=norm))
            for i in range(jobs)]


def _updated(cfg, batches: list[RolloutBatch], device: str) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    learner = Learner(env_spaces(cfg.env_id), cfg.ppo, seed=cfg.seed, device=device)
    before = learner.flat.flat.detach().to("cpu", copy=True)
    learner.update(batches, 0)  # warms the device up (kernels, cuDNN); a fresh learner times the same update
    learner = Learner(env_spaces(cfg.env_id), cfg.ppo, seed=cfg.seed, device=device)
    stats = learner.update(batches, 0)
    return before, learner.flat.flat.detach().cpu(), stats["time/learner_s"], stats["train/loss"]


def device_agreement(env_id: str, params: dict[str, object], jobs: int, cuda: str) -> DeviceAgreement:
    cfg = resolve_parameters({"env": env_id, "seed": 100, **params})
    batches = _fragments(cfg, jobs)
    before, w_cpu, cpu_s, loss_cpu = _updated(cfg, batches, "cpu")
    _, w_cuda, cuda_s, loss_cuda = _updated(cfg, batches, cuda)
    change = float((w_cpu - before).norm())
    return DeviceAgreement(env_id, sum(b.steps for b in batches), cpu_s, cuda_s,
                           float((w_cuda - w_cpu).abs().max()), change,
                           float((w_cuda - w_cpu).norm()) / max(change, 1e-12), loss_cpu, loss_cuda)


def atari_rows(label: str, spec: str, minutes: float, pool, cuda: str, fragment: int | None,
               max_rounds: int | None) -> SystemRows:
    cfg = resolve_parameters({"env": QBERT, "seed": 100, "scheduler": spec, "learner_device": cuda,
                              "fragment": fragment, "max_rounds": max_rounds})
    session = TrainingSession(cfg)
    rows = SystemRows(label, spec)
    deadline = time.perf_counter() + 60 * minutes
    while session.stop_reason is None and time.perf_counter() < deadline:
        actors = session.scheduler.choose(session.state())
        if not session.admit_round(actors):
            break
        started = time.perf_counter()
        batches = pool.map(run_actor, session.jobs(actors, session.learner.weights()), chunksize=1)
        stats = session.learner.update(batches, session.round_index)
        metrics = session.record(batches, stats, time.perf_counter() - started)
        row = {"round": float(session.round_index - 1), "actors": float(actors)}
        row.update({k: float(metrics[k]) for k in ("time/round_s", "time/round_wall_s", "time/learner_s",
                                                   "time/round_cloud_s", "rollout/ep_return_mean",
                                                   "rollout/env_steps", "cost/round_usd")})
        rows.rounds.append(row)
        print(f"  {label}: round {int(row['round'])}, {actors} actors, P_k {row['time/round_s']:.2f} s, "
              f"learner {row['time/learner_s']:.3f} s on {session.learner_device}, return "
              f"{row['rollout/ep_return_mean']:.1f} (J {cfg.target_return:g})", flush=True)
    rows.stop_reason = session.stop_reason
    return rows


def _projection(rows: SystemRows, target: float, max_rounds: int) -> str:
    if not rows.rounds:
        return "no round finished"
    cloud = sum(r["time/round_cloud_s"] for r in rows.rounds) / len(rows.rounds)
    wall = sum(r["time/round_wall_s"] for r in rows.rounds) / len(rows.rounds)
    best = max(r["rollout/ep_return_mean"] for r in rows.rounds)
    reached = rows.stop_reason == "target_reached"
    return (f"{len(rows.rounds)} rounds, best return {best:.1f} (J {target:g}{', reached' if reached else ''}); "
            f"{cloud:.2f} s cloud and {wall:.2f} s wall per round here; projected: K = {max_rounds} rounds "
            f"would take {max_rounds * cloud / 60:.1f} min on the cloud clock")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=1.5, help="per Atari system")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--skip-rows", action="store_true", help="only the device agreement")
    parser.add_argument("--skip-agreement", action="store_true", help="only the Atari rows")
    parser.add_argument("--systems", nargs="*", help="scheduler specs of the rows to run (default: all three)")
    parser.add_argument("--fragment", type=int, help="smoke tests: a shorter Qbert fragment than the preset's")
    parser.add_argument("--max-rounds", type=int, help="smoke tests: stop each system after this many rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cuda = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if cuda == "cuda" else "no CUDA device: the CPU stands in"
    print(f"device: {name}; torch {torch.__version__}; {os.cpu_count()} cores; {platform.processor()}", flush=True)
    report: dict[str, object] = {"device": name, "torch": torch.__version__, "cores": os.cpu_count(),
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    agreements = [] if args.skip_agreement else [device_agreement("Hopper-v5", {"preset": "locomotion"}, 2, cuda),
                                                 device_agreement(QBERT, {}, 2, cuda)]
    for a in agreements:
        print(f"{a.env_id}: {a.samples} samples; update CPU (1 thread) {a.cpu_update_s:.3f} s, "
              f"{cuda} {a.cuda_update_s:.3f} s ({a.cpu_update_s / a.cuda_update_s:.1f}x); loss {a.loss_cpu:.5f} "
              f"vs {a.loss_cuda:.5f}; weights max |diff| {a.max_abs_weight_diff:.2e}, diff/change "
              f"{a.diff_over_change:.3f}", flush=True)
    report["agreement"] = [a.__dict__ for a in agreements]
    if not args.skip_rows:
        processes = max((os.cpu_count() or 2) - 1, 1)
        report["actor_processes"] = processes
        target = resolve_parameters({"env": QBERT}).target_return
        max_rounds = resolve_parameters({"env": QBERT}).max_rounds
        with mp.get_context("spawn").Pool(processes) as pool:
            for label, spec in [s for s in SYSTEMS if not args.systems or s[1] in args.systems]:
                rows = atari_rows(label, spec, args.minutes, pool, cuda, args.fragment, args.max_rounds)
                print(f"{label}: {_projection(rows, target, max_rounds)}", flush=True)
                report.setdefault("atari", []).append({**rows.__dict__, "projection": _projection(rows, target, max_rounds)})
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

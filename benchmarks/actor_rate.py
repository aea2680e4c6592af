"""BENCHMARKS: an actor's sampling rate against a bare env + policy loop on one core.

Same env (`models.envs.batch.make_env(env_id, training=True)`: for Atari ids the DeepMind
preprocessing of models/envs/atari.py), same batch of envs, same network weights, one process
pinned to one core with one torch thread. Peers measured in the same run, interleaved:
- bare loop, torch policy: env.step per env + a torch forward and torch.multinomial per step
  (for Atari, the Nature CNN of `ActorCritic`);
- bare loop, numpy policy: the same loop calling the same numpy sampler our actors use (MLP
  policies only; an image policy's sampler is the torch forward above, so there is no such peer).
The bare loops build and reset their envs before the clock starts.
Ours: `run_actor` on an `ActorJob` (seeded, reset envs, weight load, buffers, episode
bookkeeping), rate over its sampling phase and over the whole call, twice per repetition: with
newly built envs (a cold actor process), then with the envs its previous job kept (a warm
worker: local pool, Dask, warm work-pool server). Median of `--repeats`. Rates are env steps/s;
an Atari step is `frame_skip` (4) emulator frames, so frames/s = 4 x steps/s.

`--envs` and `--steps` (env steps per measurement, split over the envs) default to the env's
preset (`envs_per_actor` and `fragment` in models/data/presets.toml), i.e. one real actor job.
Writes benchmarks/results/actor_rate_<env id>.json per env (every repetition, the medians, the
load average before and after).

    .venv/bin/python -m benchmarks.actor_rate --env CartPole-v1 --envs 1 8 --steps 8192
    .venv/bin/python -m benchmarks.actor_rate --env GravitarNoFrameskip-v4 SpaceInvadersNoFrameskip-v4 QbertNoFrameskip-v4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from models.envs.batch import close_idle_envs, env_spaces, make_env
from models.rl.policy import ActorCritic, weights_to_bytes
from models.rl.rollout import ActorJob, run_actor
from models.run.presets import preset_for

RESULTS = Path(__file__).resolve().parent / "results"


def bare_loop(env_id: str, n_envs: int, steps_per_env: int, act) -> float:
    envs = [make_env(env_id, training=True) for _ in range(n_envs)]
    obs = np.stack([e.reset(seed=i)[0] for i, e in enumerate(envs)])
    started = time.perf_counter()
    for _ in range(steps_per_env):
        actions, _ = act(obs)
        for i, env in enumerate(envs):
            o, _, term, trunc, _ = env.step(actions[i])
            if term or trunc:
                o, _ = env.reset()
            obs[i] = o
    elapsed = time.perf_counter() - started
    for env in envs:
        env.close()
    return n_envs * steps_per_env / elapsed


def frame_skip_of(env_id: str) -> int:
    """Emulator frames per env step: the `frame_skip` of a wrapper in the stack (Atari: 4), else 1."""
    env = make_env(env_id, training=True)
    try:
        layer = env
        while layer is not None:
            skip = getattr(layer, "frame_skip", None)
            if isinstance(skip, int):
                return skip
            layer = getattr(layer, "env", None)
        return 1
    finally:
        env.close()


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__}


def load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def measure_env(env_id: str, envs_list: list[int], steps: int, repeats: int) -> dict:
    policy = ActorCritic(env_spaces(env_id))
    weights = weights_to_bytes(policy)
    peers = {"bare_torch": policy.act}
    if not policy.is_image:
        peers["bare_numpy"] = policy.sampler(seed=0)
    rows = []
    for n in envs_list:
        steps_per_env = steps // n
        runs: dict[str, list[float]] = {
            k: [] for k in (*peers, "ours_sampling", "ours_whole", "ours_whole_kept_envs")}
        phases: dict[str, list[float]] = {k: [] for k in (
            "startup_s", "weight_load_s", "sampling_s", "whole_s", "kept_envs_startup_s")}
        for r in range(repeats):
            for name, act in peers.items():
                runs[name].append(bare_loop(env_id, n, steps_per_env, act))
            job = ActorJob(env_id, 0, 0, r, steps_per_env, n, policy.hidden, weights)
            close_idle_envs()  # a cold actor: its envs are built in the job
            t0 = time.perf_counter()
            batch = run_actor(job)
            total = time.perf_counter() - t0
            runs["ours_sampling"].append(batch.steps / batch.timings.sampling_s)
            runs["ours_whole"].append(batch.steps / total)
            for key in ("startup_s", "weight_load_s", "sampling_s"):
                phases[key].append(getattr(batch.timings, key))
            phases["whole_s"].append(total)
            t0 = time.perf_counter()  # a warm worker's next job: the same envs, seeded and reset
            kept = run_actor(job)
            runs["ours_whole_kept_envs"].append(kept.steps / (time.perf_counter() - t0))
            phases["kept_envs_startup_s"].append(kept.timings.startup_s)
        med = {k: statistics.median(v) for k, v in runs.items()}
        row = {"envs_per_actor": n, "steps_per_env": steps_per_env, "steps": n * steps_per_env,
               "runs_steps_per_s": runs, "median_steps_per_s": med, "ours_phases_s": phases,
               "sampling_over_bare_torch": med["ours_sampling"] / med["bare_torch"],
               "whole_over_bare_torch": med["ours_whole"] / med["bare_torch"],
               "whole_kept_envs_over_bare_torch": med["ours_whole_kept_envs"] / med["bare_torch"]}
        if "bare_numpy" in med:
            row["sampling_over_bare_numpy"] = med["ours_sampling"] / med["bare_numpy"]
            row["whole_over_bare_numpy"] = med["ours_whole"] / med["bare_numpy"]
        rows.append(row)
    return {"image_policy": policy.is_image, "rows": rows}


def print_table(env_id: str, result: dict) -> None:
    rows, skip = result["rows"], result["frame_skip"]
    if not result["image_policy"]:
        print("| envs per actor | bare loop + torch policy | bare loop + numpy policy | our actor, sampling | our actor, whole job | ours / bare torch | ours / bare numpy |")
        print("|---|---|---|---|---|---|---|")
        for row in rows:
            m = row["median_steps_per_s"]
            print(f"| {row['envs_per_actor']} | {m['bare_torch']:,.0f} | {m['bare_numpy']:,.0f} | "
                  f"{m['ours_sampling']:,.0f} | {m['ours_whole']:,.0f} | "
                  f"{row['sampling_over_bare_torch']:.2f} | {row['sampling_over_bare_numpy']:.2f} |")
        return
    print(f"env steps/s (frames/s = {skip} x steps/s)\n")
    print("| env | envs per actor | steps | bare loop + CNN, steps/s (frames/s) | our actor, sampling, steps/s | our actor, whole job, new envs, steps/s (frames/s) | whole job, kept envs, steps/s | sampling / bare | whole job / bare (new envs; kept envs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        m = row["median_steps_per_s"]
        print(f"| {env_id} | {row['envs_per_actor']} | {row['steps']} | {m['bare_torch']:,.0f} "
              f"({skip * m['bare_torch']:,.0f}) | {m['ours_sampling']:,.0f} | {m['ours_whole']:,.0f} "
              f"({skip * m['ours_whole']:,.0f}) | {m['ours_whole_kept_envs']:,.0f} | "
              f"{row['sampling_over_bare_torch']:.2f} | {row['whole_over_bare_torch']:.2f}; "
              f"{row['whole_kept_envs_over_bare_torch']:.2f} |")
    for row in rows:
        ph = {k: statistics.median(v) for k, v in row["ours_phases_s"].items()}
        print(f"\n{row['envs_per_actor']} envs: our actor's phases (medians): start-up (build and reset "
              f"the envs) {ph['startup_s']:.3f} s (kept envs: reset only, {ph['kept_envs_startup_s']:.3f} s), "
              f"weight load {ph['weight_load_s']:.3f} s, sampling {ph['sampling_s']:.3f} s, "
              f"whole call {ph['whole_s']:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", nargs="+", default=["CartPole-v1"], help="one or more env ids")
    parser.add_argument("--envs", type=int, nargs="+", default=None,
                        help="envs per actor (default: the preset's envs_per_actor)")
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per measurement, over all envs (default: the preset's fragment)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--results-dir", default=str(RESULTS), help="where actor_rate_<env>.json goes")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    for env_id in args.env:
        preset = preset_for(env_id)
        envs_list = args.envs or [int(preset["envs_per_actor"])]
        steps = args.steps or int(preset["fragment"])
        load_before = load_average()
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        result = measure_env(env_id, envs_list, steps, args.repeats)
        wall = time.perf_counter() - t0
        result.update({"env": env_id, "frame_skip": frame_skip_of(env_id), "repeats": args.repeats,
                       "core": args.core, "torch_threads": 1,
                       "started_utc": started.isoformat(timespec="seconds"), "wall_s": wall,
                       "load_average_before": load_before, "load_average_after": load_average(),
                       "machine": machine(), "command": [sys.executable, "-m", "benchmarks.actor_rate", *sys.argv[1:]]})
        la = " / ".join(f"{x:.2f}" for x in result["load_average_after"] or [])
        print(f"\n{env_id}, {steps} env steps per measurement, median of {args.repeats}, pinned to "
              f"core {args.core}; {started:%Y-%m-%d %H:%M} UTC, {wall:.0f} s, load average after {la}\n")
        print_table(env_id, result)
        path = out_dir / f"actor_rate_{env_id.replace('/', '_')}.json"
        path.write_text(json.dumps(result, indent=1))
        print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()

"""BENCHMARKS (a): wall time to mean return 475 on CartPole-v1, ours (through Prefect) vs SB3 PPO.

Both are measured in the same process run, on the same machine, alternating seeds, with the
same stop rule: the mean return of the episodes that completed within each window of
`window_steps` env steps (our round size at Fixed(8) x 512 steps) reaches 475. SB3 uses the
RL-Zoo CartPole-v1 hyperparameters. Both use one torch thread.

    .venv/bin/python -m benchmarks.cartpole_vs_sb3 --seeds 0 1 2

While the temporary API starts (not counted), both sides' one-off imports are done, as
`python -m flows.train` does for ours (flows/train.py warm_up: MLflow's store, torch's
optimiser, the actors' fork server); the console, too, is the CLI's (task runs' INFO lines go
only to the API: printing them from 8 threads at once cost ~20-40 ms a round).

Ours runs in two layouts of the same 8 env streams x 512 steps per round (`--layouts`):
`preset`, the CartPole preset's Fixed(8) x 512 with one env per actor (on this machine's 2
worker processes: 4 waves of 2 actors), and `packed`, Fixed(2) x 2048 with 4 envs per actor
(one wave; SB3 steps its 8 envs in one process). Same PPO settings, same samples per round;
only the actors' count and size differ. The layouts take turns going first after each seed's
SB3 run (the process's first training pays one-off costs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from benchmarks.cpu_meter import CpuMeter, cpu_s_per_1k_steps


def sb3_time_to_target(seed: int, target: float = 475.0, window_steps: int = 4096,
                       max_steps: int = 300_000, subproc: bool = False) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.window: list[float] = []
            self.steps_in_window = 0
            self.reached_at: int | None = None

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.window.append(info["episode"]["r"])
            self.steps_in_window += self.training_env.num_envs
            if self.steps_in_window >= window_steps:
                mean = float(np.mean(self.window)) if self.window else float("nan")
                self.window, self.steps_in_window = [], 0
                if mean >= target:
                    self.reached_at = self.num_timesteps
                    return False
            return True

    def linear(start: float):
        return lambda progress: progress * start

    torch.set_num_threads(1)
    with CpuMeter() as meter:
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed, vec_env_cls=SubprocVecEnv if subproc else DummyVecEnv)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                    n_epochs=20, ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2),
                    seed=seed, device="cpu", verbose=0)
        callback = StopAtTarget()
        model.learn(total_timesteps=max_steps, callback=callback)
        env.close()
    steps = callback.reached_at or model.num_timesteps
    return {"seed": seed, "wall_s": meter.reading.wall_s, "reached": callback.reached_at is not None,
            "env_steps": steps, "processes": "1 learner + 8 env" if subproc else "1 (learner and 8 envs)",
            "cpu_s": meter.reading.cpu_s, "cpu_s_per_1k_steps": cpu_s_per_1k_steps(meter.reading.cpu_s, steps),
            "load_at_start": meter.reading.load_at_start}


# the same 8 env streams of 512 steps per round, laid out as actors two ways (module docstring)
LAYOUTS = {"preset": {"scheduler": "fixed:8"},
           "packed": {"scheduler": "fixed:2", "fragment": 2048, "envs_per_actor": 4}}


def ours_time_to_target(seed: int, tracking_uri: str, layout: str = "preset") -> dict:
    from flows.train import train

    with CpuMeter() as meter:
        called_at = time.time()
        summary = train(env="CartPole-v1", seed=seed, tracking_uri=tracking_uri,
                        experiment="benchmark/cartpole-vs-sb3", **LAYOUTS[layout])
        returned_at = time.time()
    return {"seed": seed, "layout": layout, "wall_s": returned_at - called_at,
            "processes": f"1 flow + learner, {os.cpu_count()} actor workers, 1 Prefect API server",
            "cpu_s": meter.reading.cpu_s,
            "cpu_s_per_1k_steps": cpu_s_per_1k_steps(meter.reading.cpu_s, summary.env_steps),
            "load_at_start": meter.reading.load_at_start,
            "reached": summary.target_reached, "env_steps": summary.env_steps,
            "rounds": summary.rounds, "sum_round_s": summary.time_to_stop_s,
            "round_wall_s": summary.wall_time_s,
            # issue 15's start-up (call to first round) and shut-down (last round to return)
            "startup_s": summary.rounds_started_at - called_at,
            "shutdown_s": returned_at - summary.rounds_finished_at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--layouts", nargs="+", choices=sorted(LAYOUTS), default=["preset", "packed"],
                        help="how ours lays out a round's 8 env streams as actors (module docstring)")
    parser.add_argument("--sb3-subproc", action="store_true",
                        help="SB3's 8 envs each in its own process (SubprocVecEnv), not all in the learner's")
    args = parser.parse_args()
    from deployments.local_api import prefect_api
    from flows.cli import quiet_console
    from flows.tracking import default_tracking_uri
    from flows.train import warm_up

    quiet_console()  # the console as `python -m flows.train` has it (round chatter goes only to the API)

    tracking_uri = args.tracking_uri or default_tracking_uri()
    t0 = time.perf_counter()
    ours: dict[str, list[dict]] = {layout: [] for layout in args.layouts}
    sb3: list[dict] = []

    def while_starting() -> None:  # as `python -m flows.train` does; SB3's imports likewise
        warm_up()
        import stable_baselines3  # noqa: F401

    with prefect_api(while_starting=while_starting):
        print(f"temporary Prefect API up in {time.perf_counter() - t0:.1f} s (not counted below)")
        for seed in args.seeds:
            sb3.append(sb3_time_to_target(seed, subproc=args.sb3_subproc))
            print("sb3 ", sb3[-1], flush=True)
            turn = args.layouts if len(sb3) % 2 else args.layouts[::-1]
            for layout in turn:
                ours[layout].append(ours_time_to_target(seed, tracking_uri, layout))
                print("ours", ours[layout][-1], flush=True)
    med_sb3 = statistics.median(r["wall_s"] for r in sb3)
    print(f"\nSB3 ({sb3[0]['processes']}): median wall to 475 {med_sb3:.1f} s, reached "
          f"{sum(r['reached'] for r in sb3)}/{len(sb3)}, median env steps "
          f"{statistics.median(r['env_steps'] for r in sb3):.0f}, median CPU s per 1k env steps (machine busy, "
          f"all processes) {statistics.median(r['cpu_s_per_1k_steps'] for r in sb3):.3f}")
    for layout, runs in ours.items():
        med = statistics.median(r["wall_s"] for r in runs)
        print(f"ours ({layout}, {LAYOUTS[layout]}): median wall to 475 {med:.1f} s, ratio to SB3 "
              f"{med / med_sb3:.2f} (issue 15: goal <= 0.5), reached {sum(r['reached'] for r in runs)}/{len(runs)}, "
              f"median env steps {statistics.median(r['env_steps'] for r in runs):.0f}, median start-up "
              f"(call to first round) {statistics.median(r['startup_s'] for r in runs):.2f} s, shut-down "
              f"(last round to return) {statistics.median(r['shutdown_s'] for r in runs):.2f} s "
              "(goal: each under 1.5 s), median CPU s per 1k env steps (machine busy, all processes: "
              f"{runs[0]['processes']}) {statistics.median(r['cpu_s_per_1k_steps'] for r in runs):.3f}")


if __name__ == "__main__":
    main()

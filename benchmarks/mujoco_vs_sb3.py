"""MuJoCo (Hopper-v5 by default): ours (the preset's Fixed(N), through the `train` flow) against Stable-Baselines3
PPO peers, for the same number of env steps, in one run. Issue 5 compared the project's tuned
Hopper preset with RL-Zoo's Hopper PPO at R >= 1000; issue 17 showed that return is Hopper's
standing plateau, so every evaluation here also says what the body did (models/envs/locomotion.py):
forward displacement and the sum of the forward-reward term, per episode.

Both sides use one torch thread and train for exactly the same number of env steps (rounded down
to whole rounds of ours, and whole rollouts of each peer). Figures per seed and side:

- wall_s: ours, the whole `train` flow call (actor processes, MLflow, checkpoints, rounds; the
  temporary Prefect API's start-up is not counted); SB3, model construction + learn(). Both less
  the seconds of the periodic evaluations (--eval-every), which neither side needs to train.
- last_return: ours, R_k of the last round (mean return of the episodes that finished inside
  it); SB3, the same statistic over its last 8 x fragment env steps (Monitor episodes), and
  also SB3's usual rollout/ep_rew_mean (its last <= 100 episodes).
- best_return: ours, the best R_k; SB3, the best window of the same size.
- first_target_steps: env steps at the end of the first window (round) whose R >= --target.
- eval_*: the final policy, deterministic, on whole episodes with frozen observation statistics
  (not in wall_s): return, forward displacement (mean and min over episodes, metres), mean
  forward-reward sum. Both sides are played by the same loop (models/rl/evaluation.py run_episodes).
- With --eval-every N: every N rounds (ours: the train flow's eval_every; SB3: every N x 8 x
  fragment steps, at the start of the next rollout, i.e. after the update) the same evaluation;
  `evals` lists them and `to_target` is the first whose return >= --target and whose every
  episode moved forward (displacement min > 0), with its env steps and its wall time less the
  evaluations' own seconds (ours: the MLflow timestamp of that round's metrics from the call
  of the `train` flow; SB3: the clock from model construction).

Peers (--peers): `rlzoo`, RL-Zoo's tuned PPO (rl-baselines3-zoo hyperparams/ppo.yml, the -v3
entries in RLZOO below: VecNormalize of obs and reward with gamma = PPO's gamma as RL-Zoo passes
it, n_envs 1, log_std_init -2, ortho_init False, ReLU, pi/vf [256, 256]); `cleanrl`, SB3 PPO set
up as CleanRL's ppo_continuous_action.py (1 env, 2048 steps per rollout, minibatch 64, 10
epochs, lr 3e-4 annealed linearly over CleanRL's 1M steps, gamma 0.99, lambda 0.95, clip 0.2,
value clipping 0.2, ent 0, vf 0.5, grad norm 0.5, obs and reward normalisation clipped at 10,
64x64 tanh, log-std 0).

    .venv/bin/python -m benchmarks.mujoco_vs_sb3 --seeds 0 1 2                 # issue 5's run
    .venv/bin/python -m benchmarks.mujoco_vs_sb3 --variant locomotion --steps 1000000 \\
        --seeds 0 1 2 3 4 --peers rlzoo cleanrl --eval-every 2                  # issue 17's

With --before REF, ours also runs at the commit REF (a git worktree; benchmarks/before_after.py),
both ours sides in fresh processes: before and after in one run (issue 37).

Long runs resume: the results JSON is written after every run, and a later call with the same
settings skips each (side, seed) already there (--fresh starts over); a crash loses at most the
run in flight. --report-only prints the table of what is there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.before_after import ROOT, call_in, checkout, commit_of, head_commit
from benchmarks.cpu_meter import CpuMeter, CpuReading, cpu_s_per_1k_steps

RESULTS = Path(__file__).resolve().parent / "results"


def preset_actors(preset: dict) -> int:
    """N of the preset's fixed:N scheduler: ours runs Fixed(N) x the preset's fragment."""
    kind, _, n = str(preset["scheduler"]).partition(":")
    if kind != "fixed" or not n.isdigit():
        raise SystemExit(f"this benchmark runs a preset's Fixed(N); the preset has {preset['scheduler']!r}")
    return int(n)

PEERS = ("rlzoo", "cleanrl")

# rl-baselines3-zoo hyperparams/ppo.yml (-v3 ids; tuned for 1M steps, Humanoid for 10M).
RLZOO = {
    "Hopper-v5": dict(n_steps=512, batch_size=32, gamma=0.999, learning_rate=9.80828e-05,
                      ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
                      max_grad_norm=0.7, vf_coef=0.835671),
    "HalfCheetah-v5": dict(n_steps=512, batch_size=64, gamma=0.98, learning_rate=2.0633e-05,
                           ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                           max_grad_norm=0.8, vf_coef=0.58096),
    "Humanoid-v5": dict(n_steps=512, batch_size=256, gamma=0.95, learning_rate=3.56987e-05,
                        ent_coef=0.00238306, clip_range=0.3, n_epochs=5, gae_lambda=0.9,
                        max_grad_norm=2.0, vf_coef=0.431892),
}
PER_EPISODE_KEYS = ("curve", "evals", "eval_returns", "eval_lengths", "eval_forward_displacement",
                    "eval_forward_reward_sum")
def peer_label(peer: str, n_envs: int) -> str:
    """A row's `who`: the peer, with its env process count when it has more than one env."""
    return peer if n_envs == 1 else f"{peer}-{n_envs}env"


def peer_name(who: str) -> str:
    peer, _, envs = who.partition("-")
    name = PEER_NAMES[peer]
    return f"{name}, {envs.removesuffix('env')} env processes" if envs else name


PEER_NAMES = {"ours": "MinionsRL, the preset's Fixed(N), train flow", "rlzoo": "SB3 PPO, RL-Zoo settings",
              "cleanrl": "SB3 PPO, CleanRL's settings",
              "oursbefore": "MinionsRL at the --before commit, the same settings"}
BEFORE = "oursbefore"


def window_means(ends: list[int], returns: list[float], window: int, total: int) -> list[float]:
    """Mean return of the episodes ending inside each consecutive window of `window` steps."""
    out = []
    for start in range(0, total - window + 1, window):
        inside = [r for e, r in zip(ends, returns, strict=True) if start < e <= start + window]
        out.append(float(np.mean(inside)) if inside else math.nan)
    return out


def first_reaching(means: list[float], window: int, target: float) -> int | None:
    for k, m in enumerate(means):
        if not math.isnan(m) and m >= target:
            return (k + 1) * window
    return None


def eval_fields(ev) -> dict:
    """A models.rl.evaluation.Evaluation as a result row's eval_* fields (per episode too)."""
    motion = ev.motion
    out = {"eval_return": ev.return_mean, "eval_std": ev.return_std}
    if motion is not None:
        out |= {"eval_displacement_mean": motion.forward_displacement_mean,
                "eval_displacement_min": motion.forward_displacement_min,
                "eval_forward_reward_mean": motion.forward_reward_sum_mean}
    return out | ev.as_row()


def eval_point(env_steps: int, wall_s: float, ev) -> dict:
    """One periodic evaluation: when (env steps, wall s less evaluations) and what it saw."""
    motion = ev.motion
    return {"env_steps": env_steps, "wall_s": wall_s, "return": ev.return_mean,
            "displacement_mean": motion.forward_displacement_mean if motion else None,
            "displacement_min": motion.forward_displacement_min if motion else None}


def first_locomotion(evals: list[dict], target: float) -> dict | None:
    """The first evaluation at or above the target whose every episode moved forward (an env
    without a locomotion probe: the return alone)."""
    for e in evals:
        moved = e["displacement_min"] is None or e["displacement_min"] > 0
        if not math.isnan(e["return"]) and e["return"] >= target and moved:
            return {"env_steps": e["env_steps"], "wall_s": e["wall_s"]}
    return None


def sb3_model(peer: str, env_id: str, seed: int, steps: int, n_envs: int = 1):
    """The peer's PPO and its (training) VecNormalize env. With n_envs > 1 the envs step in as
    many subprocesses (SubprocVecEnv), one per core as ours has one actor per core, and the
    rollout keeps its size: n_steps per env is the published rollout / n_envs."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    def vec_env():
        cls = SubprocVecEnv if n_envs > 1 else DummyVecEnv
        return make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=cls)

    def per_env(rollout: int) -> int:
        if rollout % n_envs:
            raise SystemExit(f"a rollout of {rollout} steps does not split over {n_envs} envs")
        return rollout // n_envs

    if peer == "rlzoo":
        if env_id not in RLZOO:
            raise SystemExit(f"no RL-Zoo settings for {env_id} here; known: {sorted(RLZOO)}")
        hp = {**RLZOO[env_id], "n_steps": per_env(RLZOO[env_id]["n_steps"])}
        env = VecNormalize(vec_env(), gamma=hp["gamma"])
        model = PPO("MlpPolicy", env, **hp, seed=seed, device="cpu", verbose=0,
                    policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                       net_arch=dict(pi=[256, 256], vf=[256, 256])))
        return model, env
    cleanrl_total = 1_000_000  # CleanRL anneals lr over its full 1M steps

    def lr(progress_remaining: float) -> float:
        done = (1.0 - progress_remaining) * steps
        return 3e-4 * max(1.0 - done / cleanrl_total, 0.0)

    env = VecNormalize(vec_env(), gamma=0.99, clip_obs=10.0, clip_reward=10.0)
    model = PPO("MlpPolicy", env, n_steps=per_env(2048), batch_size=64, n_epochs=10, learning_rate=lr,
                gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=0.2, ent_coef=0.0,
                vf_coef=0.5, max_grad_norm=0.5, seed=seed, device="cpu", verbose=0,
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                   activation_fn=torch.nn.Tanh, log_std_init=0.0))
    return model, env


def sb3_evaluate(model, vec_env, env_id: str, episodes: int, seed: int):
    """The SB3 policy played by our evaluation loop: deterministic actions on observations
    normalised with the training env's statistics (not updated), raw rewards."""
    from models.rl.evaluation import run_episodes

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(vec_env.normalize_obs(obs), deterministic=True)[0]

    return run_episodes(act, env_id, episodes, seed)


def progress_log(started: float, eval_every_steps: int, evaluate, stop_at: float | None = None):
    """An SB3 callback: (env step, return) of every finished episode, and with eval_every_steps
    an evaluation at the start of each rollout after a multiple of it (after the update). With
    stop_at (J), training stops at the first evaluation that reaches the locomotion J."""
    from stable_baselines3.common.callbacks import BaseCallback

    class ProgressLog(BaseCallback):
        def __init__(self):
            super().__init__()
            self.ends: list[int] = []
            self.returns: list[float] = []
            self.evals: list[dict] = []
            self.eval_s = 0.0
            self._last_eval_at = 0

        def _on_step(self) -> bool:
            if stop_at is not None and first_locomotion(self.evals, stop_at) is not None:
                return False  # SB3 ends learn() here, one env step into the next rollout
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.ends.append(self.num_timesteps)
                    self.returns.append(float(info["episode"]["r"]))
            return True

        def _on_rollout_start(self) -> None:
            self.maybe_evaluate()

        def maybe_evaluate(self) -> None:
            n = self.num_timesteps
            if not eval_every_steps or n == 0 or n % eval_every_steps or n == self._last_eval_at:
                return
            self._last_eval_at = n
            ev = evaluate(n)
            self.eval_s += ev.wall_s
            self.evals.append(eval_point(n, time.perf_counter() - started - self.eval_s, ev))

    return ProgressLog()


# Kept for benchmarks.mujoco_curves and older callers: an episode log without evaluations.
def episode_log():
    return progress_log(time.perf_counter(), 0, None)


def sb3_run(peer: str, env_id: str, seed: int, steps: int, window: int, eval_episodes: int,
            target: float, eval_every: int, stop_at_target: bool = False, n_envs: int = 1) -> dict:
    torch.set_num_threads(1)
    with CpuMeter() as meter:
        started = time.perf_counter()
        model, env = sb3_model(peer, env_id, seed, steps, n_envs)
        # eval seeds as ours: 10,000 + the number of our rounds done (window = one round of ours)
        log = progress_log(started, eval_every * window,
                           lambda n: sb3_evaluate(model, env, env_id, eval_episodes, 10_000 + n // window),
                           stop_at=target if stop_at_target else None)
        model.learn(total_timesteps=steps, callback=log)
        log.maybe_evaluate()  # the last update has no rollout after it
        env.close()  # SubprocVecEnv's processes end inside the measured stretch
    wall = meter.reading.wall_s - log.eval_s

    ev = sb3_evaluate(model, env, env_id, eval_episodes, 10_000 + seed)
    means = window_means(log.ends, log.returns, window, model.num_timesteps)
    finite = [m for m in means if not math.isnan(m)]
    return {"who": peer, "seed": seed, "wall_s": wall, "eval_s_in_training": log.eval_s,
            "env_steps": int(model.num_timesteps), "processes": f"1 learner + {n_envs} env" if n_envs > 1
            else "1 (learner and env)", **cpu_fields(meter.reading, log.eval_s, int(model.num_timesteps)),
            "last_return": means[-1] if means else math.nan,
            "ep_rew_mean_100": float(np.mean(log.returns[-100:])) if log.returns else math.nan,
            "best_return": max(finite) if finite else math.nan,
            "first_target_steps": first_reaching(means, window, target),
            "evals": log.evals, "to_target": first_locomotion(log.evals, target),
            **eval_fields(ev), "curve": means}


def cpu_fields(reading: CpuReading, eval_s: float, env_steps: int) -> dict:
    """The machine's busy CPU seconds of a run, less its evaluations (one core each, the rest
    idle), per 1k env steps; the load average at its start says whether the machine was quiet."""
    cpu_s = max(reading.cpu_s - eval_s, 0.0)
    return {"cpu_s": cpu_s, "cpu_s_per_1k_steps": cpu_s_per_1k_steps(cpu_s, env_steps),
            "load_at_start": reading.load_at_start, "machine_cores": reading.cores}


def local_workers() -> int:
    """The local backend's worker processes: one per core (tasks/local_pool.py's default)."""
    return os.cpu_count() or 1


def evaluate_final_policy(env_id: str, summary, episodes: int, seed: int):
    """A `train` run's final policy, deterministic, on whole episodes with frozen obs statistics
    (eval seeds 10,000 + seed: never the training seeds). A models.rl.evaluation.Evaluation."""
    from models.envs.batch import env_spaces
    from models.rl.evaluation import evaluate_policy
    from models.rl.normalization import RunningMeanStd
    from models.rl.policy import ActorCritic
    from models.run.checkpoint import load_policy

    artifact = load_policy(Path(summary.checkpoint).with_name("final_policy.pt"))
    policy = ActorCritic(env_spaces(env_id), artifact.hidden, init_weights=False)
    policy.load_state_dict(artifact.policy)
    obs_rms = RunningMeanStd.from_moments(artifact.obs_rms) if artifact.obs_rms else None
    return evaluate_policy(policy, env_id, episodes, seed=10_000 + seed, obs_rms=obs_rms)


def train_evals(summary, tracking_uri: str, called_at: float) -> list[dict]:
    """The train flow's periodic evaluations, from its MLflow run: env steps after the round,
    wall s from the flow's call (epoch s) to the round's metrics less the evaluations so far."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)

    def history(key: str) -> dict[int, tuple[float, int]]:
        return {m.step: (m.value, m.timestamp) for m in client.get_metric_history(summary.run_id, key)}

    returns, eval_s = history("eval/return_mean"), history("time/eval_s")  # eval_s: every evaluation
    disp_mean, disp_min = history("eval/forward_displacement_mean"), history("eval/forward_displacement_min")
    steps = np.cumsum([h.env_steps for h in summary.history]).tolist()
    out, spent = [], 0.0
    for k in sorted(returns):
        spent += eval_s.get(k, (0.0, 0))[0]
        value, stamp = returns[k]
        out.append({"env_steps": int(steps[k]), "wall_s": stamp / 1000 - called_at - spent, "return": value,
                    "displacement_mean": disp_mean[k][0] if k in disp_mean else None,
                    "displacement_min": disp_min[k][0] if k in disp_min else None})
    return out


def eval_seconds(summary, tracking_uri: str) -> float:
    """Seconds the train flow spent in its periodic evaluations."""
    from mlflow.tracking import MlflowClient

    return float(sum(m.value for m in MlflowClient(tracking_uri).get_metric_history(summary.run_id, "time/eval_s")))


def ours_run(env_id: str, seed: int, rounds: int, tracking_uri: str, eval_episodes: int,
             target: float, eval_every: int, variant: str | None, ppo: dict | None = None,
             stop_at_target: bool = False) -> dict:
    from flows.train import train
    from models.run.presets import preset_for

    torch.set_num_threads(1)
    preset = preset_for(env_id, variant)
    with CpuMeter() as meter:
        started, called_at = time.perf_counter(), time.time()
        # Run the full step budget (target far away) so that both sides train equally long, or with
        # stop_at_target until an evaluation reaches the locomotion J (as the SB3 side stops).
        summary = train(env=env_id, preset=variant, scheduler=preset["scheduler"], seed=seed, max_rounds=rounds,
                        target_return=target if stop_at_target else 1e9, stop_at_eval=stop_at_target,
                        budget_usd=1e6, tracking_uri=tracking_uri,
                        fragment=int(preset["fragment"]), ppo={**preset["ppo"], **(ppo or {})},
                        eval_every=eval_every, eval_episodes=eval_episodes if eval_every else None,
                        experiment=f"benchmark/{env_id}{'-' + variant if variant else ''}-vs-sb3")
    wall = time.perf_counter() - started
    evals = train_evals(summary, tracking_uri, called_at) if eval_every else []
    eval_s = eval_seconds(summary, tracking_uri) if eval_every else 0.0
    wall -= eval_s

    ev = evaluate_final_policy(env_id, summary, eval_episodes, seed)
    curve = [h.mean_return for h in summary.history]
    steps = np.cumsum([h.env_steps for h in summary.history]).tolist()
    finite = [m for m in curve if not math.isnan(m)]
    first = next((s for s, m in zip(steps, curve, strict=True)
                  if not math.isnan(m) and m >= target), None)
    return {"who": "ours", "seed": seed, "wall_s": wall, "eval_s_in_training": eval_s,
            "env_steps": summary.env_steps, "processes": f"1 flow + learner, {local_workers()} actor workers, "
            "1 Prefect API server", **cpu_fields(meter.reading, eval_s, summary.env_steps),
            "round_wall_s": summary.wall_time_s, "sum_round_s": summary.time_to_stop_s,
            "last_return": summary.final_return, "best_return": max(finite) if finite else math.nan,
            "first_target_steps": first, "evals": evals, "to_target": first_locomotion(evals, target),
            **eval_fields(ev), "curve": curve}


def run_order(seed_index: int, runs: list) -> list:
    """The (side, run) pairs of one seed: ours first on even seed indices, last on odd ones."""
    return runs if seed_index % 2 == 0 else runs[::-1]


# Settings that results files written before them lack, with the value those runs had.
SETTINGS_ADDED_LATER = {"stop_at_target": False, "peer_envs": [1], "before": None}


def resumable_rows(out: Path, settings: dict) -> list[dict]:
    """The finished runs of an earlier call with the same settings (env, variant, J, steps,
    evaluation, PPO overrides), to skip; none if the file is absent or its settings differ."""
    if not out.exists():
        return []
    saved = json.loads(out.read_text())
    differs = {k: (saved.get(k, SETTINGS_ADDED_LATER.get(k)), v) for k, v in settings.items()
               if saved.get(k, SETTINGS_ADDED_LATER.get(k)) != v}
    if differs:
        print(f"{out} holds runs of other settings {differs}: starting over (it will be overwritten)", flush=True)
        return []
    return list(saved.get("rows", []))


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return statistics.median(values) if values else math.nan


def _spread(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def cpu_spread(rows: list[dict]) -> str:
    """CPU-seconds per 1k env steps, median [min, max]; rows from before it was measured lack it."""
    values = [r["cpu_s_per_1k_steps"] for r in rows if r.get("cpu_s_per_1k_steps") is not None]
    if not values:
        return "not measured"
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def table(env_id: str, steps: int, seeds: list[int], rows: list[dict], target: float,
          eval_episodes: int, eval_every: int) -> str:
    whos = ["ours"] + sorted({r["who"] for r in rows} - {"ours"})
    lines = [
        f"{env_id}, {steps} env steps each, seeds {seeds}: medians over seeds [min, max]",
        "",
        f"| | wall s | last R (last window) | best R | final eval (det., {eval_episodes} ep.) "
        f"| eval displacement m: mean; min | steps to R>={target:g} (training R) | reached "
        "| processes | CPU s per 1k env steps (machine busy, all processes) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for who in whos:
        group = [r for r in rows if r["who"] == who]
        reached = sum(r["first_target_steps"] is not None for r in group)
        firsts = [r["first_target_steps"] for r in group if r["first_target_steps"] is not None]
        lines.append(f"| {peer_name(who)} | {_spread(group, 'wall_s')} | {_median(group, 'last_return'):.0f} "
                     f"| {_median(group, 'best_return'):.0f} | {_spread(group, 'eval_return')} "
                     f"| {_median(group, 'eval_displacement_mean'):.2f}; "
                     f"{_median(group, 'eval_displacement_min'):.2f} "
                     f"| {statistics.median(firsts) if firsts else 'n/a'} | {reached}/{len(group)} "
                     f"| {group[0].get('processes', 'not recorded')} | {cpu_spread(group)} |")
    if eval_every:
        lines += ["", f"Periodic evaluation every {eval_every} rounds: first eval with return >= {target:g} "
                  "and every episode moving forward (displacement min > 0)", "",
                  "| | reached | env steps to it | wall s to it (evaluations excluded) |", "|---|---|---|---|"]
        for who in whos:
            group = [r for r in rows if r["who"] == who]
            hits = [r["to_target"] for r in group if r["to_target"]]
            lines.append(f"| {peer_name(who)} | {len(hits)}/{len(group)} "
                         f"| {_spread(hits, 'env_steps')} | {_spread(hits, 'wall_s')} |")
    ours = [r for r in rows if r["who"] == "ours"]
    for who in whos[1:]:
        ratio = _median(ours, "wall_s") / _median([r for r in rows if r["who"] == who], "wall_s")
        lines.append(f"\nwall-time ratio ours/{who} over the whole budget (medians): {ratio:.2f}")
        if eval_every:
            lines.append(to_target_ratio(rows, who))
    return "\n".join(lines)


def _wall_to_target(rows: list[dict], who: str) -> dict[int, float]:
    """Seed -> wall seconds to the locomotion J (inf where the run never reached it)."""
    return {r["seed"]: r["to_target"]["wall_s"] if r.get("to_target") else math.inf
            for r in rows if r["who"] == who}


def to_target_ratio(rows: list[dict], peer: str) -> str:
    """Wall time to J, ours against `peer`, over the seeds both sides ran: the ratio of the
    medians (a run that never reached J counts as infinitely slow) and each seed's ratio."""
    ours, theirs = _wall_to_target(rows, "ours"), _wall_to_target(rows, peer)
    seeds = sorted(ours.keys() & theirs.keys())
    if not seeds:
        return f"wall-time ratio ours/{peer} to J: no seed run by both"
    med_ours = statistics.median(ours[s] for s in seeds)
    med_theirs = statistics.median(theirs[s] for s in seeds)
    ratio = med_ours / med_theirs if math.isfinite(med_theirs) else math.nan
    per_seed = ", ".join(f"{s}: {ours[s] / theirs[s]:.2f}" if math.isfinite(ours[s] + theirs[s])
                         else f"{s}: {'ours' if math.isinf(ours[s]) else peer} never reached J" for s in seeds)
    return (f"wall-time ratio ours/{peer} to J (medians over seeds {seeds}; never reached = inf): "
            f"{ratio:.2f} ({med_ours:.1f} s / {med_theirs:.1f} s); per seed {per_seed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=150_000,
                        help="env steps for both (rounded down to whole rounds of ours)")
    parser.add_argument("--variant", default=None,
                        help="a preset variant for ours, e.g. 'locomotion' (models/data/presets.toml)")
    parser.add_argument("--ppo", type=json.loads, default=None,
                        help='PPO values laid over the preset\'s for ours, as JSON, e.g. \'{"init_log_std": 0.0}\'')
    parser.add_argument("--target", type=float, default=None,
                        help="J for the steps-to-target figures (default: the variant's J; "
                             "without a variant 1000, issue 5's)")
    parser.add_argument("--peers", nargs="*", default=["rlzoo"], choices=PEERS)
    parser.add_argument("--peer-envs", type=int, nargs="+", default=[1],
                        help="envs of each SB3 peer, each in its own subprocess when > 1 (issue 33: as "
                             "many env processes as ours has actor cores); the rollout keeps its size; "
                             "several counts run each peer once per count")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every N rounds during training, both sides (0: only at the end)")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--stop-at-target", action="store_true",
                        help="stop each run at its first evaluation that reaches J with every episode "
                             "moving forward (needs --eval-every): wall time to J in a fraction of the "
                             "budget's time; the step budget still sets the lr schedule")
    parser.add_argument("--before", default=None, metavar="REF",
                        help="also run ours at this commit (a git worktree, benchmarks/before_after.py), "
                             "before and after in one run; both ours sides then run in fresh processes")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--out", default=None,
                        help="results JSON (default benchmarks/results/<env>[-variant]_vs_sb3.json)")
    parser.add_argument("--fresh", action="store_true",
                        help="start over: ignore the runs already in --out (by default a run of the same "
                             "settings skips every (side, seed) it holds, so a long benchmark resumes)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: print the table of the runs already in --out")
    args = parser.parse_args()

    from deployments.local_api import prefect_api
    from flows.tracking import default_tracking_uri
    from models.run.presets import preset_for

    preset = preset_for(args.env, args.variant)
    target = args.target if args.target is not None else (
        float(preset["target_return"]) if args.variant else 1000.0)
    fragment = int(preset["fragment"])
    actors = preset_actors(preset)
    window = actors * fragment
    rounds = args.steps // window
    steps = rounds * window
    tracking_uri = args.tracking_uri or default_tracking_uri()
    label = f"{args.env}-{args.variant}" if args.variant else args.env
    # issue 5's file name kept for its run
    if args.stop_at_target and not args.eval_every:
        parser.error("--stop-at-target stops at an evaluation: give --eval-every")
    out = Path(args.out) if args.out else RESULTS / (
        "hopper_vs_sb3.json" if label == "Hopper-v5" else
        f"{label}_vs_sb3{'_to_target' if args.stop_at_target else ''}.json")
    print(f"{args.env}{' (' + args.variant + ')' if args.variant else ''}: {rounds} rounds x {actors} "
          f"actors x {fragment} steps = {steps} env steps each; J = {target:g}; SB3 window for "
          f"R_k-like figures: {window} steps; peers {args.peers}", flush=True)
    settings = {"env": args.env, "variant": args.variant, "scheduler": preset["scheduler"],
                "fragment": fragment, "carry_episodes": preset["carry_episodes"], "preset_ppo": preset["ppo"],
                "target": target, "steps": steps,
                "eval_every": args.eval_every, "eval_episodes": args.eval_episodes, "ppo_overrides": args.ppo,
                "stop_at_target": args.stop_at_target, "peer_envs": args.peer_envs,
                "before": commit_of(args.before) if args.before else None}
    rows = [] if args.fresh else resumable_rows(out, settings)
    if rows:
        print(f"resuming {out}: {len(rows)} runs done: "
              f"{sorted((r['who'], r['seed']) for r in rows)}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(complete: bool) -> None:  # after every run: a long benchmark that dies keeps its rows
        out.write_text(json.dumps({**settings, "seeds": args.seeds, "peers": args.peers,
                                   "complete": complete, "rows": rows}, indent=1))

    peer_runs = [(peer, n) for peer in args.peers for n in args.peer_envs]
    whos = ["ours", *([BEFORE] if args.before else []), *(peer_label(p, n) for p, n in peer_runs)]
    t0 = time.perf_counter()
    with contextlib.nullcontext() if args.report_only else prefect_api() as api_url:
        if not args.report_only:
            print(f"temporary Prefect API up in {time.perf_counter() - t0:.1f} s (not counted)", flush=True)
        before_dir = checkout(args.before)[0] if args.before and not args.report_only else None
        api = {"PREFECT_API_URL": api_url or ""}
        for i, seed in enumerate([] if args.report_only else args.seeds):
            ours_kwargs = dict(env_id=args.env, seed=seed, rounds=rounds, tracking_uri=tracking_uri,
                               eval_episodes=args.eval_episodes, target=target, eval_every=args.eval_every,
                               variant=args.variant, ppo=args.ppo, stop_at_target=args.stop_at_target)
            if args.before:  # both sides in fresh processes, each in its own checkout
                runs = [lambda k=ours_kwargs: {**call_in(ROOT, "benchmarks.mujoco_vs_sb3:ours_run", k, api),
                                               "commit": head_commit()},
                        lambda k=ours_kwargs: {**call_in(before_dir, "benchmarks.mujoco_vs_sb3:ours_run", k, api),
                                               "who": BEFORE, "commit": settings["before"]}]
            else:
                runs = [lambda k=ours_kwargs: {**ours_run(**k), "commit": head_commit()}]
            runs += [lambda s=seed, p=peer, n=n: {**sb3_run(p, args.env, s, steps, window, args.eval_episodes,
                                                            target, args.eval_every, args.stop_at_target, n),
                                                  "who": peer_label(p, n)}
                     for peer, n in peer_runs]
            # the order reverses every other seed, so a drift in the machine's speed (up to 1.7x
            # within an hour here) does not always fall on the same side
            for who, run in run_order(i, list(zip(whos, runs, strict=True))):
                if any(r["who"] == who and r["seed"] == seed for r in rows):
                    continue  # done in an earlier call
                row = run()
                rows.append(row)
                save(complete=False)
                brief = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()
                         if k not in PER_EPISODE_KEYS}
                print(brief, flush=True)

    asked = [r for r in rows if r["seed"] in args.seeds and r["who"] in whos]
    if not asked:
        print(f"no finished runs of these settings in {out}")
        return
    done = {(r["who"], r["seed"]) for r in asked}
    complete = done == {(w, seed) for w in whos for seed in args.seeds}
    text = table(args.env, steps, sorted({r["seed"] for r in asked}), asked, target, args.eval_episodes,
                 args.eval_every)
    print("\n" + text)
    save(complete=complete)
    out.with_suffix(".md").write_text(text + "\n")
    print(f"\nwritten: {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

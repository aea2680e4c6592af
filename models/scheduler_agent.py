"""The learned actor scheduler of SPEC §4: a PPO agent that chooses I_k each round.

Read top to bottom:
1. state normalisation: the 7 raw numbers of RoundState -> 7 bounded features;
2. the reward: r_k = -beta * P_k, plus (max_k R_k - J) at the last decision when J was missed;
3. the agent: policy and value nets (2 x 64, tanh), categorical over I_max, PPO over whole
   episodes (one episode = one complete training run of the workload) with GAE;
4. `LearnedScheduler`: the Scheduler protocol around an agent, greedy or sampling, with a trace;
5. checkpoints: one torch file with the weights, the optimiser and how it was trained.

Pure torch/numpy: no Prefect, no MLflow, no environment. The flows in flows/scheduler_flows.py run the
episodes and call `SchedulerAgent.update` with what `LearnedScheduler.trace` recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from models.checkpoint import load_checkpoint, save_checkpoint
from models.config import ConfigError
from models.schedulers import RoundState

FORMAT = "minionsrl.scheduler/1"
SHIPPED = "cartpole"  # `learned` alone, or `learned:cartpole`, means the packaged checkpoint
STOP_TARGET, STOP_BUDGET = "target_reached", "budget_spent"  # as flows/session.py writes them

# -- 1. state normalisation ------------------------------------------------------------------

FEATURES = ("round_frac", "loss", "return_progress", "policy_kl", "learner_time", "actor_time",
            "budget_frac")
"""The 7 features, in order; each is bounded whatever the raw number (NaN, +-inf, 1e300)."""


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _squash(x: float, squash) -> float:
    """squash(x) for finite x; 0 for NaN; +-1 for +-inf (the limits of every squash used here)."""
    x = float(x)
    if math.isnan(x):
        return 0.0
    if math.isinf(x):
        return math.copysign(1.0, x)
    return float(squash(x))


def symlog(x: float) -> float:
    """sign(x) * log(1 + |x|): keeps small values linear and large ones readable."""
    return math.copysign(math.log1p(abs(x)), x)


@dataclass(frozen=True)
class NormaliserConfig:
    """Constants of the normalisation; stored in every checkpoint so that it is never guessed."""

    loss_scale: float = 3.0
    """loss feature = tanh(symlog(L) / loss_scale): |L| = 20 gives 0.76."""
    kl_ref: float = 0.02
    """KL feature = tanh(KL / kl_ref): a typical PPO step moves the policy by about 0.01-0.02."""
    time_scale: float = 2.0
    """time features = tanh(ln(t / t_ref) / time_scale): 0 at the reference, +-0.46 at e^{+-1}."""
    progress_low: float = -1.0
    progress_high: float = 1.5
    """return progress is clipped to [progress_low, progress_high]."""


class StateNormaliser:
    """Raw RoundState -> 7 features in [-1, 1.5], the same meaning on every workload.

    Workload references (J, K, B) come from the run, not the checkpoint, so a scheduler trained
    on one task reads another task's state on the same scale (this is what transfer needs).
    Per-episode references (the first finite return and the first round's times) are kept
    here and reset with `reset()`; they are part of `state_dict()`.

    1. round_frac      k / K, clipped to [0, 1].
    2. loss            tanh(symlog(L_{k-1}) / loss_scale); NaN -> 0.
    3. return_progress (R_{k-1} - R_ref) / (J - R_ref), R_ref the first finite mean return of
                       this run: 0 at the start, 1 at the target, clipped to
                       [progress_low, progress_high]. A round with no finished episode (NaN)
                       keeps the last known progress; 0 before any. If R_ref >= J, 1.
    4. policy_kl       tanh(max(KL, 0) / kl_ref); NaN -> 0.
    5. learner_time    tanh(ln(P^l_{k-1} / P^l_ref) / time_scale), P^l_ref the first positive
                       learner time of this run: the learner's time relative to its first round
                       (scale-free across machines and workloads); 0 when unknown or <= 0.
    6. actor_time      the same for the mean actor time P^a_{k-1}.
    7. budget_frac     b_k / B clipped to [0, 1]; 1 when B is unset or infinite, or b_k is NaN.
    """

    def __init__(self, target_return: float, max_rounds: int, budget_usd: float | None,
                 config: NormaliserConfig | None = None):
        self.target_return = float(target_return)
        self.max_rounds = max(int(max_rounds), 1)
        self.budget_usd = budget_usd
        self.config = config or NormaliserConfig()
        self.reset()

    def reset(self) -> None:
        self.return_ref: float | None = None
        self.learner_ref: float | None = None
        self.actor_ref: float | None = None
        self.progress = 0.0

    def __call__(self, state: RoundState) -> np.ndarray:
        c = self.config
        k = _finite(state.round_index)
        round_frac = 0.0 if k is None else min(max(k / self.max_rounds, 0.0), 1.0)

        loss_f = _squash(state.last_loss, lambda x: math.tanh(symlog(x) / c.loss_scale))

        ret = _finite(state.last_return)
        if ret is not None:
            if self.return_ref is None:
                self.return_ref = ret
            gap = self.target_return - self.return_ref
            if gap > 0:
                progress = (ret - self.return_ref) / gap  # NaN only for inf/inf: read as 0
                self.progress = 0.0 if math.isnan(progress) else min(max(progress, c.progress_low),
                                                                      c.progress_high)
            else:
                self.progress = 1.0
        elif not math.isnan(state.last_return):  # +-inf: as far as the clip allows
            self.progress = c.progress_high if state.last_return > 0 else c.progress_low

        kl_f = _squash(max(state.policy_kl, 0.0), lambda x: math.tanh(x / c.kl_ref))

        learner_f, self.learner_ref = self._time(state.last_learner_s, self.learner_ref)
        actor_f, self.actor_ref = self._time(state.last_actor_s, self.actor_ref)

        budget = self.budget_usd
        if budget is None or not math.isfinite(budget) or budget <= 0 or math.isnan(state.budget_left_usd):
            budget_f = 1.0
        else:
            budget_f = min(max(state.budget_left_usd / budget, 0.0), 1.0)

        out = np.array([round_frac, loss_f, self.progress, kl_f, learner_f, actor_f, budget_f],
                       dtype=np.float32)
        return np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)

    def _time(self, t: float, ref: float | None) -> tuple[float, float | None]:
        if math.isnan(t) or t <= 0:
            return 0.0, ref
        if math.isinf(t):
            return 1.0, ref
        if ref is None:
            ref = t
        return math.tanh((math.log(t) - math.log(ref)) / self.config.time_scale), ref

    def state_dict(self) -> dict[str, Any]:
        return {"return_ref": self.return_ref, "learner_ref": self.learner_ref,
                "actor_ref": self.actor_ref, "progress": self.progress}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("return_ref", "learner_ref", "actor_ref", "progress"):
            setattr(self, key, state[key])


# -- 2. the reward ---------------------------------------------------------------------------

def terminal_penalty(best_return: float, target_return: float) -> float:
    """max_k R_k - J (SPEC §4). With no finished episode at all (best is NaN or -inf) the
    return is taken as 0, i.e. -|J|."""
    best = _finite(best_return)
    return best - target_return if best is not None else -abs(target_return)


def episode_rewards(round_times: Sequence[float], decisions: int, *, target_reached: bool,
                    budget_spent: bool, best_return: float, target_return: float,
                    beta: float = 0.1) -> np.ndarray:
    """Per-decision rewards of one scheduler episode.

    r_k = -beta * P_k for every round that ran. A decision whose round was never started (the
    budget check refused it: then decisions == len(round_times) + 1) earns 0 for time. The last
    decision also gets (max_k R_k - J) when J was not reached or the budget ran out.
    """
    if not 0 < beta < 1:
        raise ConfigError(f"beta must be in (0, 1), got {beta}")
    if decisions not in (len(round_times), len(round_times) + 1):
        raise ValueError(f"{decisions} decisions cannot match {len(round_times)} rounds")
    rewards = np.zeros(decisions, dtype=np.float64)
    for k, p in enumerate(round_times):
        rewards[k] = -beta * float(p)
    if decisions and (not target_reached or budget_spent):
        rewards[-1] += terminal_penalty(best_return, target_return)
    return rewards


def rewards_from_summary(summary, beta: float = 0.1) -> np.ndarray:
    """The rewards of one episode from a `train` summary whose scheduler was learned.

    Uses the summary's per-round history (time/round_s = P_k), stop reason, best return, and
    the scheduler trace (its decisions and the run's J).
    """
    trace = summary.scheduler_trace
    if not trace or "steps" not in trace:
        raise ValueError("the run's summary has no learned-scheduler trace")
    return episode_rewards([h.round_s for h in summary.history], len(trace["steps"]),
                           target_reached=summary.target_reached,
                           budget_spent=summary.stop_reason == STOP_BUDGET,
                           best_return=summary.best_return,
                           target_return=trace["target_return"], beta=beta)


# -- 3. the agent ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AgentConfig:
    """Hyperparameters of the scheduler's PPO (SPEC §4; the authors' later code for the defaults)."""

    learning_rate: float = 1e-3
    """Adam step size (the paper used 5e-3; the authors' later code 1e-3)."""
    beta: float = 0.1
    """Weight of the round time in the reward r_k = -beta * P_k; in (0, 1)."""
    gamma: float = 0.99
    """Discount over rounds."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO surrogate clip range."""
    update_epochs: int = 10
    """Passes over a batch of episodes per update."""
    minibatch_size: int = 256
    """Decisions per gradient step (a batch smaller than this is one minibatch)."""
    ent_coef: float = 0.01
    """Entropy bonus: keeps the categorical from collapsing before it has seen enough episodes."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of both nets (SPEC: two layers of 64, tanh)."""

    def validate(self) -> None:
        checks = [
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (0 < self.beta < 1, "beta must be in (0, 1)"),
            (0 < self.gamma <= 1, "gamma must be in (0, 1]"),
            (0 <= self.gae_lambda <= 1, "gae_lambda must be in [0, 1]"),
            (self.clip_coef > 0, "clip_coef must be > 0"),
            (self.update_epochs >= 1, "update_epochs must be >= 1"),
            (self.minibatch_size >= 1, "minibatch_size must be >= 1"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "hidden must be positive widths"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"scheduler agent: {message}")

    def replace(self, overrides: dict[str, Any] | None) -> AgentConfig:
        if not overrides:
            return self
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown scheduler agent parameter(s) {unknown}; valid: {sorted(known)}")
        values = dict(overrides)
        if "hidden" in values:
            values["hidden"] = tuple(values["hidden"])
        cfg = AgentConfig(**{**asdict(self), **values})
        cfg.validate()
        return cfg


def _mlp(n_in: int, n_out: int, hidden: tuple[int, ...], out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layer = nn.Linear(width, h)
        nn.init.orthogonal_(layer.weight, math.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers += [layer, nn.Tanh()]
        width = h
    head = nn.Linear(width, n_out)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, head)


@dataclass
class Episode:
    """One scheduler episode: what the scheduler saw and did, and what it earned."""

    obs: np.ndarray  # (T, 7) float32
    actions: np.ndarray  # (T,) int, action a means I = a + 1
    logps: np.ndarray  # (T,) behaviour log-probabilities
    values: np.ndarray  # (T,) value estimates in reward units
    rewards: np.ndarray  # (T,)

    @classmethod
    def from_trace(cls, trace: dict[str, Any], rewards: Sequence[float]) -> Episode:
        steps = trace["steps"]
        if len(steps) != len(rewards):
            raise ValueError(f"trace has {len(steps)} decisions, rewards {len(rewards)}")
        return cls(obs=np.asarray([s["obs"] for s in steps], dtype=np.float32).reshape(len(steps), -1),
                   actions=np.asarray([s["action"] for s in steps], dtype=np.int64),
                   logps=np.asarray([s["logp"] for s in steps], dtype=np.float32),
                   values=np.asarray([s["value"] for s in steps], dtype=np.float32),
                   rewards=np.asarray(rewards, dtype=np.float32))

    @property
    def total_reward(self) -> float:
        return float(self.rewards.sum())


def compute_gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns of one complete episode (it terminates: the value after it is 0)."""
    adv = np.zeros(len(rewards), dtype=np.float64)
    last = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + values


@dataclass
class ReturnScale:
    """Running mean and std of the value targets: the value net learns them standardised, so a
    penalty of -475 (CartPole) and a time cost of -0.3 train the same net without retuning."""

    count: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, x: np.ndarray) -> None:
        for v in np.asarray(x, dtype=np.float64).ravel():
            self.count += 1
            d = v - self.mean
            self.mean += d / self.count
            self.m2 += d * (v - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count > 1 and self.m2 > 0 else 1.0


class SchedulerAgent:
    """Policy pi(a|s) over a in [0, I_max) (I = a + 1) and value V(s), trained by PPO."""

    def __init__(self, i_max: int, config: AgentConfig | None = None, seed: int = 0,
                 n_features: int = len(FEATURES)):
        if i_max < 1:
            raise ConfigError("i_max must be >= 1")
        self.config = config or AgentConfig()
        self.config.validate()
        self.i_max, self.n_features = int(i_max), n_features
        torch.manual_seed(seed)
        self.policy = _mlp(n_features, self.i_max, self.config.hidden, out_gain=0.01)
        self.value = _mlp(n_features, 1, self.config.hidden, out_gain=1.0)
        self.optimizer = torch.optim.Adam(list(self.policy.parameters()) + list(self.value.parameters()),
                                          lr=self.config.learning_rate, eps=1e-5)
        self.scale = ReturnScale()
        self.updates = 0
        self.episodes_seen = 0

    # -- acting --------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, greedy: bool = False,
            generator: torch.Generator | None = None) -> tuple[int, float, float]:
        """(action, log-probability, value in reward units) for one observation."""
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        logits = self.policy(x)[0]
        logp_all = torch.log_softmax(logits, dim=-1)
        if greedy:
            action = int(torch.argmax(logp_all))
        else:
            action = int(torch.multinomial(logp_all.exp(), 1, generator=generator))
        value = float(self.value(x)[0, 0]) * self.scale.std + self.scale.mean
        return action, float(logp_all[action]), value

    @torch.no_grad()
    def probabilities(self, obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(-1, self.n_features)
        return torch.softmax(self.policy(x), dim=-1).numpy()

    # -- learning ------------------------------------------------------------------------
    def update(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """One PPO update on a batch of complete episodes. Returns train/... statistics."""
        cfg = self.config
        episodes = [e for e in episodes if len(e.rewards)]
        if not episodes:
            return {}
        advs, rets = zip(*(compute_gae(e.rewards.astype(np.float64), e.values.astype(np.float64),
                                       cfg.gamma, cfg.gae_lambda) for e in episodes), strict=True)
        obs = torch.as_tensor(np.concatenate([e.obs for e in episodes]), dtype=torch.float32)
        actions = torch.as_tensor(np.concatenate([e.actions for e in episodes]), dtype=torch.int64)
        old_logp = torch.as_tensor(np.concatenate([e.logps for e in episodes]), dtype=torch.float32)
        adv = torch.as_tensor(np.concatenate(advs), dtype=torch.float32)
        returns_np = np.concatenate(rets)
        self.scale.update(returns_np)
        target = torch.as_tensor((returns_np - self.scale.mean) / self.scale.std, dtype=torch.float32)
        if len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)

        n = len(actions)
        mb = min(cfg.minibatch_size, n)
        generator = torch.Generator().manual_seed(self.updates)
        stats: dict[str, list[float]] = {k: [] for k in ("loss", "pg_loss", "v_loss", "entropy",
                                                         "approx_kl", "clipfrac")}
        for _ in range(cfg.update_epochs):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, mb):
                idx = order[start:start + mb]
                logits = self.policy(obs[idx])
                logp_all = torch.log_softmax(logits, dim=-1)
                new_logp = logp_all.gather(1, actions[idx, None])[:, 0]
                entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                log_ratio = new_logp - old_logp[idx]
                ratio = log_ratio.exp()
                pg_loss = torch.max(-adv[idx] * ratio,
                                    -adv[idx] * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                v_loss = 0.5 * (self.value(obs[idx])[:, 0] - target[idx]).pow(2).mean()
                loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(list(self.policy.parameters()) + list(self.value.parameters()),
                                         cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    stats["approx_kl"].append(float(((ratio - 1) - log_ratio).mean()))
                    stats["clipfrac"].append(float(((ratio - 1).abs() > cfg.clip_coef).float().mean()))
                for key, value in (("loss", loss), ("pg_loss", pg_loss), ("v_loss", v_loss),
                                   ("entropy", entropy)):
                    stats[key].append(float(value.detach()))
        self.updates += 1
        self.episodes_seen += len(episodes)
        values = np.concatenate([e.values for e in episodes])
        var_ret = float(np.var(returns_np))
        out = {f"train/{k}": float(np.mean(v)) for k, v in stats.items()}
        out["train/explained_variance"] = (float(1 - np.var(returns_np - values) / var_ret)
                                           if var_ret > 0 else math.nan)
        out["train/episode_reward_mean"] = float(np.mean([e.total_reward for e in episodes]))
        out["train/decisions"] = float(n)
        return out

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "value": self.value.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scale": asdict(self.scale),
                "updates": self.updates, "episodes_seen": self.episodes_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.value.load_state_dict(state["value"])
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scale = ReturnScale(**state["scale"])
        self.updates = int(state["updates"])
        self.episodes_seen = int(state["episodes_seen"])


# -- 4. the scheduler ------------------------------------------------------------------------

MODES = ("greedy", "sample")


class LearnedScheduler:
    """The Scheduler protocol around a SchedulerAgent.

    mode 'greedy' takes the most probable I (evaluation, production); 'sample' draws from the
    policy (exploration while the scheduler trains) with its own seeded generator. `trace()`
    returns every decision of the run: the features it saw, the action, its log-probability and
    the value estimate, as plain lists and floats (JSON- and pickle-friendly).
    """

    name = "learned"

    def __init__(self, agent: SchedulerAgent, normaliser: StateNormaliser, mode: str = "greedy",
                 seed: int = 0, source: str | None = None):
        if mode not in MODES:
            raise ConfigError(f"learned scheduler mode must be one of {MODES}, got {mode!r}")
        self.agent, self.normaliser, self.mode, self.source = agent, normaliser, mode, source
        self.seed = seed
        self.generator = torch.Generator().manual_seed(int(seed))
        self.steps: list[dict[str, Any]] = []

    def choose(self, state: RoundState) -> int:
        obs = self.normaliser(state)
        action, logp, value = self.agent.act(obs, greedy=self.mode == "greedy", generator=self.generator)
        self.steps.append({"round": int(state.round_index), "obs": [float(x) for x in obs],
                           "action": action, "actors": action + 1, "logp": logp, "value": value})
        return action + 1

    def trace(self) -> dict[str, Any]:
        n = self.normaliser
        return {"mode": self.mode, "source": self.source, "i_max": self.agent.i_max,
                "target_return": n.target_return, "max_rounds": n.max_rounds,
                "budget_usd": n.budget_usd, "features": list(FEATURES),
                "steps": [dict(s) for s in self.steps]}

    def reset(self) -> None:
        """Forget the run (a new episode): trace and per-run references."""
        self.steps = []
        self.normaliser.reset()

    def state_dict(self) -> dict[str, Any]:
        # The weights too: a resumed run must act exactly as before even if the file it came
        # from has been overwritten by a later update since.
        return {"mode": self.mode, "steps": [dict(s) for s in self.steps],
                "normaliser": self.normaliser.state_dict(), "rng": self.generator.get_state(),
                "policy": self.agent.policy.state_dict(), "value": self.agent.value.state_dict(),
                "scale": asdict(self.agent.scale)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mode = state["mode"]
        self.steps = [dict(s) for s in state["steps"]]
        self.normaliser.load_state_dict(state["normaliser"])
        self.generator.set_state(state["rng"])
        self.agent.policy.load_state_dict(state["policy"])
        self.agent.value.load_state_dict(state["value"])
        self.agent.scale = ReturnScale(**state["scale"])


# -- 5. checkpoints --------------------------------------------------------------------------

def save_scheduler(path: str | Path, agent: SchedulerAgent, *,
                   normaliser: NormaliserConfig | None = None, meta: dict[str, Any] | None = None) -> Path:
    """Write a scheduler checkpoint atomically: weights, optimiser, and how it was trained.

    meta is free-form and JSON-friendly, e.g. {"trained_on": [{"env": "CartPole-v1",
    "episodes": 60}], "command": "..."}.
    """
    return save_checkpoint(path, {
        "format": FORMAT,
        "i_max": agent.i_max,
        "features": list(FEATURES),
        "normaliser": asdict(normaliser or NormaliserConfig()),
        "agent_config": asdict(agent.config),
        "agent": agent.state_dict(),
        "meta": dict(meta or {}),
    })


def load_scheduler(path: str | Path, config_overrides: dict[str, Any] | None = None
                   ) -> tuple[SchedulerAgent, NormaliserConfig, dict[str, Any]]:
    """(agent, normaliser constants, meta) from a checkpoint; overrides e.g. a new learning rate
    for fine-tuning. The optimiser state is kept unless the learning rate changes."""
    try:
        payload = load_checkpoint(path)
    except FileNotFoundError:
        raise ConfigError(f"no scheduler checkpoint at {path}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a scheduler checkpoint ({FORMAT})")
    stored = payload["agent_config"]
    stored["hidden"] = tuple(stored["hidden"])
    config = AgentConfig(**stored).replace(config_overrides)
    agent = SchedulerAgent(payload["i_max"], config)
    state = dict(payload["agent"])
    if config.learning_rate != stored["learning_rate"]:
        state["optimizer"] = None
    agent.load_state_dict(state)
    return agent, NormaliserConfig(**payload["normaliser"]), dict(payload["meta"])


def shipped_checkpoint(name: str = SHIPPED) -> Path:
    """Path of a scheduler packaged in models/data/schedulers/."""
    path = Path(str(resources.files("models.data").joinpath("schedulers", f"{name}.pt")))
    if not path.exists():
        raise ConfigError(f"no packaged scheduler named {name!r} (looked for {path})")
    return path


MLFLOW_SCHEMES = ("runs:/", "models:/", "mlflow-artifacts:/")


def is_mlflow_uri(ref: str) -> bool:
    """True for a reference only an MLflow store can resolve (runs:/, models:/, http(s)://, ...).

    file:// URIs and plain paths are local and resolved here."""
    ref = ref.strip()
    return ref.startswith(MLFLOW_SCHEMES) or ("://" in ref and not ref.startswith("file://"))


def resolve_checkpoint(ref: str) -> Path:
    """A local scheduler checkpoint from a file path, a file:// URI or a packaged name.

    MLflow URIs (runs:/<id>/scheduler/scheduler.pt, models:/...) are not resolved here: which
    MLflow store they name is the run's business, so the flows download them from the run's
    tracking URI first (flows/train.py `localise_scheduler_spec`) and pass the local path.
    """
    ref = ref.strip()
    if ref in ("", SHIPPED):
        return shipped_checkpoint(SHIPPED)
    if is_mlflow_uri(ref):
        raise ConfigError(f"scheduler checkpoint {ref!r} is an MLflow URI: download it from its "
                          "tracking store first (flows/train.py localise_scheduler_spec does; "
                          "train(scheduler='learned:<uri>') does it with its tracking_uri)")
    if ref.startswith("file://"):
        from urllib.parse import unquote, urlparse

        ref = unquote(urlparse(ref).path)
    path = Path(ref).expanduser()
    if not path.exists():
        raise ConfigError(f"no scheduler checkpoint at {path}")
    return path


def parse_learned_spec(spec: str) -> tuple[str, str]:
    """'learned[:<ref>][:sample|:greedy]' -> (ref, mode); the ref keeps its case and colons."""
    rest = spec.strip()[len("learned"):]
    rest = rest[1:] if rest.startswith(":") else rest
    mode = "greedy"
    head, sep, tail = rest.rpartition(":")
    if sep and tail.lower() in MODES:
        rest, mode = head, tail.lower()
    elif rest.lower() in MODES:
        rest, mode = "", rest.lower()
    return rest, mode


def make_learned_scheduler(spec: str, i_max: int, max_rounds: int, target_return: float,
                           budget_usd: float | None = None, seed: int = 0) -> LearnedScheduler:
    """The scheduler for 'learned[:<path or packaged name>][:sample]' on this workload (an MLflow
    URI must have been localised by the flow first: see `resolve_checkpoint`)."""
    ref, mode = parse_learned_spec(spec)
    path = resolve_checkpoint(ref)
    agent, norm_config, _ = load_scheduler(path)
    if agent.i_max != i_max:
        raise ConfigError(f"scheduler {path} was trained for i_max={agent.i_max}; this run has "
                          f"i_max={i_max}: pass i_max={agent.i_max} or train a scheduler for {i_max}")
    normaliser = StateNormaliser(target_return, max_rounds, budget_usd, norm_config)
    return LearnedScheduler(agent, normaliser, mode=mode, seed=seed, source=str(ref or SHIPPED))

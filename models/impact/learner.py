"""IMPACT (Luo et al., ICLR 2020): an asynchronous learner with a circular buffer, a target network
and V-trace, next to our synchronous PPO (models/rl/ppo.py). Pure torch/numpy: no Prefect, no MLflow.

Phases of one learner step (`ImpactLearner.step`):
1. batch: `batch_fragments` fragments drawn from the circular buffer (`FragmentBuffer`); each
   fragment is used at most `max_reuse` times, then evicted; a full buffer overwrites its oldest.
2. targets: V-trace (models/impact/vtrace.py) with the *target network* as the judged policy pi and the
   actor's behaviour policy mu, values from the learner's current critic (as RLlib's APPO).
3. loss: the IMPACT surrogate, ratio = clip(mu/pi_target, 0, is_clip) * pi_theta/mu inside PPO's
   clip, value loss against the V-trace targets, entropy bonus. It is models/rl/ppo.py `ppo_loss`
   with an anchor log-prob (`impact_anchor_logp`), so the clipped surrogate has one home.
4. every `target_update_every` learner steps the target network becomes a hard copy of the policy.

Versions: the learner's version is its number of learner steps; an actor tags each fragment with
the version of the weights it sampled with, and policy lag = learner version - that version.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
import tomllib
from collections import deque
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import torch

from models.billing.cost import PriceTable, server_cluster_cost
from models.envs.batch import EnvSpaces, check_env_id, env_spaces
from models.errors import ConfigError, NonFiniteError
from models.impact.vtrace import vtrace
from models.rl.gae import next_values_for
from models.rl.normalization import NormLayout, NormStats, RunningMeanStd, merged_with_deltas, shipped_stats
from models.rl.policy import ActorCritic
from models.rl.ppo import LossCoefficients, ppo_loss, select_device
from models.rl.rollout import RolloutBatch

IMPACT_BACKENDS = ("local", "dask")
STOP_TARGET, STOP_ENV_STEPS, STOP_WALL, STOP_CHUNKS = "target_reached", "env_steps", "wall_limit", "max_chunks"


@dataclass(frozen=True)
class ImpactConfig:
    """IMPACT's hyperparameters (names follow the paper and RLlib's APPO where they exist)."""

    learning_rate: float = 5e-4
    """Adam step size (RLlib APPO: 5e-4)."""
    gamma: float = 0.99
    """Discount factor."""
    vtrace_lambda: float = 1.0
    """lambda of the V-trace traces c_t (IMPALA: 1)."""
    rho_bar: float = 1.0
    """Truncation of the importance weight rho in V-trace targets and advantages (IMPALA: 1)."""
    c_bar: float = 1.0
    """Truncation of the trace coefficients c (IMPALA: 1); must be <= rho_bar."""
    is_clip: float = 2.0
    """The surrogate's clip(mu / pi_target, 0, is_clip) (IMPACT paper, RLlib APPO: 2)."""
    clip_coef: float = 0.4
    """PPO clip range around the target network's ratio (RLlib APPO clip_param: 0.4)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: float = 40.0
    """Global gradient-norm clip (RLlib APPO grad_clip: 40)."""
    norm_adv: bool = False
    """Standardise advantages within a batch (RLlib APPO does not)."""
    target_update_every: int = 2
    """Learner steps between hard copies of the policy into the target network (SPEC §5: 2)."""
    max_reuse: int = 2
    """K: each fragment is used by at most this many learner steps, then evicted."""
    buffer_fragments: int = 16
    """N: capacity of the circular buffer in fragments; a full buffer overwrites its oldest."""
    batch_fragments: int = 4
    """Fragments per learner step (one gradient step)."""
    fragment: int = 512
    """Env steps in one fragment (over all of an actor's envs)."""
    envs_per_actor: int = 1
    """Envs one actor steps in lockstep (divides fragment)."""
    actors: int = 2
    """Actor processes, sampling continuously."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the policy and value MLPs (models/rl/policy.py ActorCritic)."""
    init_log_std: float = 0.0
    """Initial log-std of a Gaussian policy (PPOConfig's name; it travels with the weights)."""
    normalize_obs: bool = False
    """Observations normalised with running statistics merged across actors (as PPO's)."""
    normalize_reward: bool = False
    """Rewards scaled by the running std of the discounted return, merged across actors."""

    def validate(self) -> None:
        _check(self.learning_rate > 0, "impact.learning_rate must be > 0")
        _check(0 < self.gamma <= 1, "impact.gamma must be in (0, 1]")
        _check(0 <= self.vtrace_lambda <= 1, "impact.vtrace_lambda must be in [0, 1]")
        _check(self.rho_bar > 0, "impact.rho_bar must be > 0")
        _check(0 < self.c_bar <= self.rho_bar, "impact.c_bar must be in (0, rho_bar] (Espeholt et al.)")
        _check(self.is_clip >= 1, "impact.is_clip must be >= 1")
        _check(0 < self.clip_coef < 1, "impact.clip_coef must be in (0, 1)")
        _check(self.vf_coef >= 0 and self.ent_coef >= 0, "impact.vf_coef and ent_coef must be >= 0")
        _check(self.max_grad_norm > 0, "impact.max_grad_norm must be > 0")
        _check(self.target_update_every >= 1, "impact.target_update_every must be >= 1")
        _check(1 <= self.max_reuse <= 100, "impact.max_reuse must be in [1, 100]")
        _check(self.buffer_fragments >= 1, "impact.buffer_fragments must be >= 1")
        _check(1 <= self.batch_fragments <= self.buffer_fragments,
               "impact.batch_fragments must be in [1, buffer_fragments]")
        _check(self.fragment >= 1 and self.envs_per_actor >= 1, "impact.fragment and envs_per_actor must be >= 1")
        _check(self.fragment % self.envs_per_actor == 0,
               f"impact.fragment ({self.fragment}) must be a multiple of envs_per_actor ({self.envs_per_actor})")
        _check(1 <= self.actors <= 1024, "impact.actors must be in [1, 1024]")
        _check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden),
               "impact.hidden must list positive layer widths")
        _check(math.isfinite(self.init_log_std) and -10 <= self.init_log_std <= 2,
               "impact.init_log_std must be a number in [-10, 2]")

    @property
    def normalizes(self) -> bool:
        return self.normalize_obs or self.normalize_reward

    def norm_layout(self, obs_shape: tuple[int, ...]) -> NormLayout | None:
        """How the learner's normaliser statistics travel beside the weights (None: not at all)."""
        if not self.normalizes:
            return None
        return NormLayout(tuple(obs_shape) if self.normalize_obs else None, self.normalize_reward, self.gamma)

    @property
    def steps_per_env(self) -> int:
        return self.fragment // self.envs_per_actor


@dataclass(frozen=True)
class ImpactRunConfig:
    """Every parameter of one IMPACT training (the `impact` flow's parameters, resolved)."""

    env_id: str
    """Gymnasium env id."""
    target_return: float
    """J: stop once the mean of the last `return_window` completed episodes reaches it."""
    max_env_steps: int
    """Env-step budget: stop once actors have delivered this many steps."""
    max_wall_s: float
    """Wall-clock limit of the training (learner and actors), seconds."""
    chunk_steps: int = 50
    """Learner steps per `learn-chunk-{i}` Prefect task (one MLflow step per chunk)."""
    max_chunks: int = 0
    """Stop after this many chunks (smoke tests); 0: no limit."""
    return_window: int = 10
    """Completed episodes in the return that J is compared with (about what a PPO round of
    8 x 512 CartPole steps completes near J)."""
    seed: int = 0
    """Run seed; actor i's envs seed from (seed, i, its generation)."""
    learner_device: str = "auto"
    """auto (CUDA when present), cpu or cuda."""
    backend: str = "local"
    """Where actors run: local (persistent processes here) or dask (long-running Dask tasks)."""
    dask_address: str | None = None
    """dask: scheduler address of a running cluster; None: a LocalCluster with one worker per actor."""
    impact: ImpactConfig = field(default_factory=ImpactConfig)
    prices: PriceTable = field(default_factory=PriceTable.load)
    tracking_uri: str = ""
    experiment: str = ""
    parent_run_id: str | None = None
    """MLflow run to nest this run under (the compare experiment's parent run)."""

    def validate(self) -> None:
        _check(math.isfinite(self.target_return), "target_return must be a finite number")
        _check(self.max_env_steps >= 1, "max_env_steps must be >= 1")
        _check(self.max_wall_s > 0, "max_wall_s must be > 0 seconds")
        _check(self.chunk_steps >= 1, "chunk_steps must be >= 1")
        _check(self.return_window >= 1, "return_window must be >= 1")
        _check(self.max_chunks >= 0, "max_chunks must be >= 0 (0: no limit)")
        _check(self.seed >= 0, "seed must be >= 0")
        _check(self.learner_device in ("auto", "cpu", "cuda"), "learner_device must be 'auto', 'cpu' or 'cuda'")
        _check(self.backend != "work-pool", "IMPACT cannot run on the 'work-pool' backend: its actors are one "
                                            "flow run per job, ephemeral and one-shot per round by design, and "
                                            "IMPACT needs always-on actors that stream fragments; use local or dask")
        _check(self.backend in IMPACT_BACKENDS, f"unknown backend {self.backend!r} for IMPACT; "
                                                f"supported: {', '.join(IMPACT_BACKENDS)}")
        _check(self.dask_address is None or self.backend == "dask", "dask_address applies to the dask backend only")
        self.impact.validate()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["impact"]["hidden"] = list(self.impact.hidden)
        return out


# -- presets ---------------------------------------------------------------------------------

@functools.cache
def _impact_presets() -> dict[str, Any]:
    return tomllib.loads(resources.files("models.data").joinpath("impact_presets.toml").read_text())


def impact_preset(env_id: str) -> dict[str, Any]:
    """The IMPACT preset for env_id (models/data/impact_presets.toml) over the default one."""
    table = _impact_presets()
    merged = copy.deepcopy(table["default"])
    specific = copy.deepcopy(table.get(env_id, {}))
    merged["impact"] = {**merged.get("impact", {}), **specific.pop("impact", {})}
    merged.update(specific)
    return merged


_RUN_KEYS = ("target_return", "max_env_steps", "max_wall_s", "chunk_steps", "return_window")


def resolve_impact_config(given: dict[str, Any]) -> ImpactRunConfig:
    """The impact flow's given parameters (not None) over the env's preset; ConfigError on bad input."""
    given = dict(given)
    env_id = given.pop("env", None) or "CartPole-v1"
    check_env_id(env_id)
    if len(env_spaces(env_id).obs_shape) != 1:
        raise ConfigError(f"IMPACT here supports vector observations (MLP policies) only; {env_id} has images")
    preset = impact_preset(env_id)
    overrides = given.pop("impact", None) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"impact must be a mapping of IMPACT parameters, got {overrides!r}")
    values = {**preset["impact"], **overrides}
    known = {f.name for f in dataclasses.fields(ImpactConfig)}
    unknown = sorted(set(values) - known)
    _check(not unknown, f"unknown IMPACT parameter(s) {unknown}; valid: {sorted(known)}")
    if "hidden" in values:
        values["hidden"] = tuple(values["hidden"])
    for name, value in values.items():
        default = getattr(ImpactConfig, name, None)
        if isinstance(default, bool):
            _check(isinstance(value, bool), f"impact.{name} must be true or false, got {value!r}")
        elif isinstance(default, int | float):
            _check(isinstance(value, int | float) and not isinstance(value, bool),
                   f"impact.{name} must be a number, got {value!r}")
            if isinstance(default, int):
                _check(float(value).is_integer(), f"impact.{name} must be an integer, got {value!r}")
            values[name] = type(default)(value)
    prices_file = given.pop("prices_file", None)
    run = {key: preset[key] for key in _RUN_KEYS}
    run.update(given)
    run.setdefault("experiment", f"minionsrl/{env_id}")
    fields = {f.name for f in dataclasses.fields(ImpactRunConfig)}
    unknown = sorted(set(run) - fields)
    _check(not unknown, f"unknown impact run parameter(s) {unknown}")
    try:
        cfg = ImpactRunConfig(env_id=env_id, impact=ImpactConfig(**values),
                              prices=PriceTable.load(prices_file), **run)
    except TypeError as exc:
        raise ConfigError(f"impact run parameters: {exc}") from exc
    cfg.validate()
    return cfg


# -- what actors send --------------------------------------------------------------------------

@dataclass(frozen=True)
class ImpactFragment:
    """One actor's fragment with the version of the weights that sampled it."""

    batch: RolloutBatch
    behaviour_version: int
    actor_index: int
    actor_generation: int = 0
    """0 for the first process of actor slot i, +1 for every replacement."""


class FragmentBuffer:
    """IMPACT's circular buffer: at most `capacity` fragments, each used at most `max_reuse` times.

    `sample` draws distinct fragments uniformly; a fragment is evicted once used `max_reuse`
    times. `add` on a full buffer overwrites the oldest fragment (counted in `dropped_unused`
    when it was never used). `evicted_uses` records how often each evicted fragment was used.
    """

    def __init__(self, capacity: int, max_reuse: int, rng: np.random.Generator):
        self.capacity, self.max_reuse, self.rng = capacity, max_reuse, rng
        self._entries: deque[list] = deque()  # [fragment, uses]
        self.evicted_uses: list[int] = []
        self.dropped_unused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, fragment: ImpactFragment) -> None:
        if len(self._entries) >= self.capacity:
            _, uses = self._entries.popleft()
            self.evicted_uses.append(uses)
            self.dropped_unused += uses == 0
        self._entries.append([fragment, 0])

    def sample(self, k: int) -> list[ImpactFragment]:
        k = min(k, len(self._entries))
        picked = sorted(self.rng.choice(len(self._entries), size=k, replace=False).tolist())
        out = []
        for i in picked:
            entry = self._entries[i]
            entry[1] += 1
            out.append(entry[0])
        for i in reversed(picked):  # evict the spent ones (highest index first keeps indices valid)
            if self._entries[i][1] >= self.max_reuse:
                self.evicted_uses.append(self._entries[i][1])
                del self._entries[i]
        return out

    def uses(self) -> list[int]:
        """Uses so far of the fragments still in the buffer, oldest first."""
        return [uses for _, uses in self._entries]


def impact_anchor_logp(behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
                       is_clip: float) -> torch.Tensor:
    """The log-prob that PPO's ratio is taken against, so that exp(new - anchor) equals IMPACT's
    clip(mu/pi_target, 0, is_clip) * pi_theta/mu: where mu/pi_target <= is_clip the anchor is
    log pi_target, else log mu - log is_clip (mu > 0 for a sampled action, so 0 is never hit)."""
    return torch.maximum(target_logp, behaviour_logp - math.log(is_clip))


def weights_vector(module: torch.nn.Module) -> np.ndarray:
    """All of a module's state as one float32 vector (what actors read from shared memory)."""
    return torch.cat([v.detach().cpu().reshape(-1).float() for v in module.state_dict().values()]).numpy()


def load_weights_vector(module: torch.nn.Module, vector: np.ndarray) -> None:
    """Inverse of weights_vector, for a module built the same way."""
    state, offset = {}, 0
    for name, value in module.state_dict().items():
        n = value.numel()
        state[name] = torch.as_tensor(vector[offset:offset + n]).reshape(value.shape).to(value.dtype)
        offset += n
    if offset != len(vector):
        raise ValueError(f"weights vector has {len(vector)} values, the module {offset}")
    module.load_state_dict(state)


class ImpactLearner:
    """The policy, its target network, the buffer and the optimiser; one `step` per gradient step."""

    def __init__(self, spaces: EnvSpaces, cfg: ImpactConfig, seed: int = 0, device: str = "auto"):
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        if len(spaces.obs_shape) != 1:
            raise ConfigError("IMPACT here supports vector observations (MLP policies) only")
        self.cfg = cfg
        self.device = select_device(device)
        self.policy = ActorCritic(spaces, cfg.hidden, init_log_std=cfg.init_log_std).to(self.device)
        self.target = copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate, eps=1e-5)
        self.buffer = FragmentBuffer(cfg.buffer_fragments, cfg.max_reuse, np.random.default_rng(seed))
        self.version = 0  # learner steps done
        self.target_version = 0  # the learner version the target network is a copy of
        self.coefficients = LossCoefficients(clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef,
                                             ent_coef=cfg.ent_coef, norm_adv=cfg.norm_adv)
        self.obs_rms = RunningMeanStd(spaces.obs_shape) if cfg.normalize_obs else None
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None

    def add(self, fragment: ImpactFragment) -> None:
        # Merged on arrival, not when sampled: a fragment is reused up to K times, its data counts once.
        # Training uses the fragment's observations as its actor normalised them (PPO's rule): the
        # behaviour log-probs, target and current network then all score the same inputs.
        deltas = fragment.batch.norm_deltas
        self.obs_rms = merged_with_deltas(self.obs_rms, [deltas.obs])
        self.ret_rms = merged_with_deltas(self.ret_rms, [deltas.reward])
        self.buffer.add(fragment)

    def norm_state(self) -> NormStats | None:
        """The merged statistics actors normalise with next, published with the weights."""
        return shipped_stats(self.obs_rms, self.ret_rms, self.cfg.gamma)

    def weights_vector(self) -> np.ndarray:
        return weights_vector(self.policy)

    # -- targets ------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self, fragments: list[ImpactFragment]):
        batches = [f.batch for f in fragments]
        for b in batches:
            if not (np.isfinite(b.rewards).all() and np.isfinite(b.obs).all()):
                raise NonFiniteError(f"actor {b.actor_index} returned non-finite rewards or observations")
        lengths = {b.rewards.shape[0] for b in batches}
        if len(lengths) != 1:
            raise ValueError(f"fragments of different lengths cannot be batched: {sorted(lengths)}")
        obs = np.concatenate([b.obs for b in batches], axis=1)
        t_len, n_envs = obs.shape[:2]
        offsets = np.cumsum([0] + [b.rewards.shape[1] for b in batches[:-1]])
        trunc_index = np.concatenate([b.trunc_index + np.array([0, off]) for b, off in zip(batches, offsets, strict=True)])
        trunc_obs = np.concatenate([b.trunc_obs for b in batches])
        last_obs = np.concatenate([b.last_obs for b in batches])
        flat = t_len * n_envs
        all_obs = self._tensor(np.concatenate([obs.reshape(flat, *obs.shape[2:]), last_obs, trunc_obs]))
        all_values = self.policy.value(all_obs).cpu().numpy().astype(np.float64)
        values = all_values[:flat].reshape(t_len, n_envs)
        next_values = next_values_for(values, all_values[flat:flat + n_envs], trunc_index,
                                      all_values[flat + n_envs:])
        actions = np.concatenate([b.actions for b in batches], axis=1)
        actions_t = torch.as_tensor(actions.reshape(flat, *actions.shape[2:]), device=self.device)
        target_logp = self.target.evaluate(all_obs[:flat], actions_t)[0]
        behaviour_logp = np.concatenate([b.logp for b in batches], axis=1)
        vt = vtrace(behaviour_logp, target_logp.cpu().numpy().reshape(t_len, n_envs),
                    np.concatenate([b.rewards for b in batches], axis=1), values, next_values,
                    np.concatenate([b.terminated for b in batches], axis=1),
                    np.concatenate([b.truncated for b in batches], axis=1),
                    self.cfg.gamma, self.cfg.rho_bar, self.cfg.c_bar, self.cfg.vtrace_lambda)
        lag = np.repeat([self.version - f.behaviour_version for f in fragments],
                        [t_len * b.rewards.shape[1] for b in batches])
        return (all_obs[:flat], actions_t, self._tensor(behaviour_logp.reshape(flat)), target_logp,
                self._tensor(vt.advantages.reshape(flat)), self._tensor(vt.vs.reshape(flat)), vt, lag)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    # -- one learner step -----------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """One gradient step on a batch from the buffer; returns train/... and impact/... figures."""
        if len(self.buffer) == 0:
            raise RuntimeError("learner step with an empty buffer")
        t0 = time.perf_counter()
        cfg = self.cfg
        fragments = self.buffer.sample(cfg.batch_fragments)
        obs, actions, behaviour_logp, target_logp, advantages, vs, vt, lag = self._prepare(fragments)
        new_logp, entropy, new_values = self.policy.evaluate(obs, actions)
        anchor = impact_anchor_logp(behaviour_logp, target_logp, cfg.is_clip)
        out = ppo_loss(new_logp, anchor, advantages, new_values, None, vs, entropy, self.coefficients)
        if not torch.isfinite(out.loss):
            raise NonFiniteError(f"learner step {self.version}: the IMPACT loss is {float(out.loss)}")
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        if not torch.isfinite(grad_norm):
            raise NonFiniteError(f"learner step {self.version}: the gradient norm is {float(grad_norm)}")
        self.optimizer.step()
        self.version += 1
        if self.version % cfg.target_update_every == 0:
            self.target.load_state_dict(self.policy.state_dict())
            self.target_version = self.version
        with torch.no_grad():
            is_ratio = (behaviour_logp - target_logp).exp()
        stats = {
            "train/loss": float(out.loss.detach()), "train/policy_loss": float(out.policy_loss.detach()),
            "train/value_loss": float(out.value_loss.detach()), "train/entropy": float(out.entropy.detach()),
            "train/approx_kl": float(out.approx_kl), "train/clipfrac": float(out.clipfrac),
            "train/grad_norm": float(grad_norm),
            "impact/policy_lag_mean": float(lag.mean()), "impact/policy_lag_max": float(lag.max()),
            "impact/rho_mean": float(vt.rhos.mean()),
            "impact/rho_clipped_frac": float((vt.rhos > cfg.rho_bar).mean()),
            "impact/c_clipped_frac": float((vt.rhos > cfg.c_bar).mean()),
            "impact/is_ratio_clipped_frac": float((is_ratio > cfg.is_clip).float().mean()),
            "impact/vtrace_target_mean": float(vt.vs.mean()),
            "impact/batch_env_steps": float(len(lag)),
            "time/learner_step_s": time.perf_counter() - t0,
        }
        return stats


class StatsAccumulator:
    """Per-step learner figures over a chunk: means, except *_max (max) and batch_env_steps (sum)."""

    def __init__(self):
        self._sums: dict[str, float] = {}
        self._n = 0

    def add(self, stats: dict[str, float]) -> None:
        self._n += 1
        for key, value in stats.items():
            if key.endswith("_max"):
                self._sums[key] = max(self._sums.get(key, -math.inf), value)
            else:
                self._sums[key] = self._sums.get(key, 0.0) + value

    def result(self) -> dict[str, float]:
        if not self._n:
            return {}
        out = {}
        for key, value in self._sums.items():
            summed = key.endswith("_max") or key in ("impact/batch_env_steps", "time/learner_step_s")
            out[key] = value if summed else value / self._n
        out["train/grad_steps"] = float(self._n)
        return out


# -- the run's progress and stop rules -----------------------------------------------------------

@dataclass
class ImpactProgress:
    """Env steps and episodes delivered by actors, and the three stop rules (J, steps, wall)."""

    target_return: float
    max_env_steps: int
    max_wall_s: float
    return_window: int
    env_steps: int = 0
    fragments: int = 0
    episodes: int = 0
    recent_returns: deque = field(default_factory=deque)
    stop_reason: str | None = None

    def record(self, fragment: ImpactFragment) -> None:
        self.fragments += 1
        self.env_steps += fragment.batch.steps
        for r in fragment.batch.episode_returns:
            self.episodes += 1
            self.recent_returns.append(float(r))
            if len(self.recent_returns) > self.return_window:
                self.recent_returns.popleft()

    @property
    def mean_return(self) -> float:
        """Mean of the last return_window completed episodes (NaN before any)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else math.nan

    def check(self, wall_s: float) -> str | None:
        """Set and return the stop reason, if any rule holds (J needs a full window)."""
        if self.stop_reason is None:
            if len(self.recent_returns) >= self.return_window and self.mean_return >= self.target_return:
                self.stop_reason = STOP_TARGET
            elif self.env_steps >= self.max_env_steps:
                self.stop_reason = STOP_ENV_STEPS
            elif wall_s >= self.max_wall_s:
                self.stop_reason = STOP_WALL
        return self.stop_reason


@dataclass(frozen=True)
class ImpactChunkRecord:
    """One learner chunk's figures, as the progress and the chunk table show them."""

    chunk: int
    learner_steps: int
    """Learner steps done so far (the learner's version)."""
    env_steps: int
    """Env steps the actors delivered so far."""
    mean_return: float
    """Mean of the last return_window completed episodes (NaN before any)."""
    policy_lag_mean: float
    wall_s: float
    """The training's wall time so far, actors' start-up included."""
    server_cluster_usd: float
    """The server cluster's bill so far, with its start-up."""


@dataclass(frozen=True)
class ImpactSummary:
    """What one IMPACT training did, for callers, the CLI and its summary artifact."""

    run_id: str
    env_id: str
    seed: int
    stop_reason: str
    env_steps: int
    learner_steps: int
    chunks: int
    final_return: float
    wall_s: float
    server_cluster_cost_usd: float
    server_cluster_cost_no_startup_usd: float
    serverless_cost_usd: float
    orchestration_frac: float
    """(Prefect task overhead + MLflow logging) / wall time, on the machine it ran on."""
    actor_replacements: int
    learner_device: str
    tracking_uri: str

    @property
    def target_reached(self) -> bool:
        return self.stop_reason == STOP_TARGET


@dataclass(frozen=True)
class ImpactBill:
    """IMPACT billed as the fixed server cluster it runs on, and for reference as serverless."""

    server_cluster_usd: float
    """The cluster for the whole wall time, idle included, with its start-up (models/billing/cost.py)."""
    server_cluster_no_startup_usd: float
    serverless_actors_usd: float
    """Actor-seconds (each actor's busy sampling time) x the actor container's price."""
    serverless_learner_usd: float
    """Learner-seconds x the learner container's price on the device it ran on."""
    always_on_pool_usd: float
    """The run's own always-on processes at container prices: actors + learner x wall time."""

    @property
    def serverless_usd(self) -> float:
        return self.serverless_actors_usd + self.serverless_learner_usd


def bill_impact(wall_s: float, actors: int, actor_busy_s: float, learner_s: float,
                learner_device: str, prices: PriceTable) -> ImpactBill:
    """The run's bill so far (wall_s: the training's wall time, actors' start-up included)."""
    learner_price = prices.learner_per_second(learner_device)
    return ImpactBill(
        server_cluster_usd=server_cluster_cost(wall_s, prices, with_startup=True),
        server_cluster_no_startup_usd=server_cluster_cost(wall_s, prices, with_startup=False),
        serverless_actors_usd=actor_busy_s * prices.actor_per_second,
        serverless_learner_usd=learner_s * learner_price,
        always_on_pool_usd=wall_s * (actors * prices.actor_per_second + learner_price),
    )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)

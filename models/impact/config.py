"""IMPACT's configuration: its hyperparameters (ImpactConfig) and every parameter of one IMPACT
training (ImpactRunConfig), resolved from a Workload through the same presets as PPO's
(models/data/presets.toml: [<env>.impact] and [<env>.impact_run] laid over the env's own values)
and the same checks (models/run/validation.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from models.billing.cost import PriceTable
from models.envs.batch import check_env_id, env_spaces
from models.errors import ConfigError
from models.json_types import JSONObject
from models.rl.normalization import NormLayout
from models.run.memory import check_sizes
from models.run.presets import preset_layers
from models.run.validation import check as _check
from models.run.validation import with_overrides
from models.run.workload import Placement, Workload

IMPACT_BACKENDS = ("local", "dask", "virtual")
"""local and dask run the actors for real (their time is this machine's wall); virtual computes
them here one fragment at a time as on a core each (tasks/impact/virtual_pool.py: the cloud clock)."""


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
    """Time limit of the training (learner and actors), seconds: this machine's wall, or the cloud
    clock with the virtual backend."""
    chunk_steps: int = 50
    """Learner steps per `learn-chunk-{i}` Prefect task (one MLflow step per chunk)."""
    max_chunks: int = 0
    """Stop after this many chunks (smoke tests); 0: no limit."""
    return_window: int = 10
    """Completed episodes in the return that J is compared with (about what a PPO round of
    8 x 512 CartPole steps completes near J)."""
    eval_every_chunks: int = 0
    """Every this many chunks (and at the stop) evaluate the learner's deterministic policy; 0: off."""
    eval_episodes: int = 5
    """Whole episodes per evaluation."""
    stop_at_eval: bool = False
    """Judge J on the evaluations instead of the training episodes, as PPO's locomotion runs do:
    an evaluation's mean return reaches J with every episode moving forward (MuJoCo locomotion)."""
    seed: int = 0
    """Run seed; actor i's envs seed from (seed, i, its generation)."""
    learner_device: str = "auto"
    """auto (CUDA when present), cpu or cuda."""
    backend: str = "local"
    """Where actors run: local (persistent processes here), dask (long-running Dask tasks) or
    virtual (as on a core each, on the cloud clock: the paper's 32 actors on a 2-core machine)."""
    dask_address: str | None = None
    """dask: scheduler address of a running cluster; None: a LocalCluster with one worker per actor."""
    impact: ImpactConfig = field(default_factory=ImpactConfig)
    prices: PriceTable = field(default_factory=PriceTable.load)
    tracking_uri: str = ""
    experiment: str = ""
    parent_run_id: str | None = None
    """MLflow run to nest this run under (the compare experiment's parent run)."""
    preset_variant: str | None = None
    """The variant of the env's preset that filled the unset values (e.g. 'locomotion')."""

    def validate(self) -> None:
        _check(math.isfinite(self.target_return), "target_return must be a finite number")
        _check(self.max_env_steps >= 1, "max_env_steps must be >= 1")
        _check(self.max_wall_s > 0, "max_wall_s must be > 0 seconds")
        _check(self.chunk_steps >= 1, "chunk_steps must be >= 1")
        _check(self.return_window >= 1, "return_window must be >= 1")
        _check(self.eval_every_chunks >= 0, "eval_every_chunks must be >= 0 (0 turns evaluation off)")
        _check(self.eval_episodes >= 1, "eval_episodes must be >= 1")
        _check(not self.stop_at_eval or self.eval_every_chunks > 0,
               "stop_at_eval judges J on the periodic evaluations: set eval_every_chunks (chunks between them)")
        _check(self.max_chunks >= 0, "max_chunks must be >= 0 (0: no limit)")
        _check(self.seed >= 0, "seed must be >= 0")
        _check(self.learner_device in ("auto", "cpu", "cuda"), "learner_device must be 'auto', 'cpu' or 'cuda'")
        _check(self.backend != "work-pool", "IMPACT cannot run on the 'work-pool' backend: its actors are one "
                                            "flow run per job, ephemeral and one-shot per round by design, and "
                                            "IMPACT needs always-on actors that stream fragments; use local, dask or virtual")
        _check(self.backend in IMPACT_BACKENDS, f"unknown backend {self.backend!r} for IMPACT; "
                                                f"supported: {', '.join(IMPACT_BACKENDS)}")
        _check(self.dask_address is None or self.backend == "dask", "dask_address applies to the dask backend only")
        self.impact.validate()

    def to_dict(self) -> JSONObject:
        out = dataclasses.asdict(self)
        out["impact"]["hidden"] = list(self.impact.hidden)
        return out


RUN_KEYS = ("target_return", "max_env_steps", "max_wall_s", "chunk_steps", "return_window", "eval_every_chunks",
            "eval_episodes", "stop_at_eval")
"""An IMPACT run's values that come from the preset (the env's, then its [impact_run])."""


def impact_preset_for(env_id: str, variant: str | None = None) -> tuple[JSONObject, JSONObject]:
    """(run values, ImpactConfig values) for env_id: each layer of its preset (default, the env,
    its variant) contributes its own values and then its [impact_run] over them, and its [impact]."""
    run: JSONObject = {}
    config: JSONObject = {}
    for layer in preset_layers(env_id, variant):
        run.update({k: v for k, v in layer.items() if k in RUN_KEYS})
        run.update({k: v for k, v in layer.get("impact_run", {}).items() if k in RUN_KEYS})
        config.update(layer.get("impact", {}))
    return run, config


def resolve_impact_config(workload: Workload, placement: Placement | None = None, **run: object) -> ImpactRunConfig:
    """An IMPACT training's configuration: the workload's values over its env's preset; `run` holds
    the other ImpactRunConfig fields (seed, chunk_steps, tracking_uri, ...). PPO's fields are not
    IMPACT's: left out. ConfigError on bad input, before anything starts."""
    env_id = workload.env
    check_env_id(env_id)
    if len(env_spaces(env_id).obs_shape) != 1:
        raise ConfigError(f"IMPACT here supports vector observations (MLP policies) only; {env_id} has images")
    placement = placement or Placement()
    preset_run, preset_config = impact_preset_for(env_id, workload.preset)
    config = with_overrides(with_overrides(ImpactConfig(), preset_config, "impact", "IMPACT"),
                            workload.impact, "impact", "IMPACT")
    values = {**preset_run, **{k: v for k, v in workload.given().items() if k in RUN_KEYS}}
    values.update({k: v for k, v in run.items() if v is not None})
    values.setdefault("experiment", f"minionsrl/{env_id}")
    values.update(_impact_placement(placement))
    known = {f.name for f in dataclasses.fields(ImpactRunConfig)}
    unknown = sorted(set(values) - known)
    _check(not unknown, f"unknown impact run parameter(s) {unknown}")
    try:
        cfg = ImpactRunConfig(env_id=env_id, impact=config, prices=PriceTable.load(workload.prices_file),
                              preset_variant=workload.preset, **values)
    except TypeError as exc:
        raise ConfigError(f"impact run parameters: {exc}") from exc
    cfg.validate()
    c = cfg.impact  # its actors hold their fragments; the learner holds the buffer's
    check_sizes(env_spaces(env_id), fragment=c.fragment, envs_per_actor=c.envs_per_actor, i_max=c.buffer_fragments,
                minibatch_size=None, actor_memory_gb=1.0, normalized=c.normalize_obs, prefix="impact.")
    return cfg


def _impact_placement(placement: Placement) -> dict[str, object]:
    """IMPACT's actors are its config's `actors` always-on processes: of a placement it takes the
    backend, a Dask cluster's address and the learner's device."""
    _check(placement.local_workers is None and placement.warm_actors is None,
           "IMPACT runs impact.actors always-on actors: local_workers and warm_actors do not apply")
    options = dict(placement.backend_options or {})
    unknown = sorted(set(options) - {"dask_address"})
    _check(not unknown, f"backend option(s) {unknown} do not apply to IMPACT (only dask_address)")
    out: dict[str, object] = {}
    if placement.backend is not None:
        out["backend"] = placement.backend
    if "dask_address" in options:
        out["dask_address"] = options["dask_address"]
    if placement.learner_device is not None:
        out["learner_device"] = placement.learner_device
    return out

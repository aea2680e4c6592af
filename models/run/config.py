"""One run configuration: every parameter of a training run in one frozen, validated object.

Built once (models/run/presets.py fills what the user left unset from the workload's preset),
logged to MLflow as params, stored in every checkpoint; a resumed run uses the stored one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from models.billing.cost import PriceTable
from models.envs.envpool_batch import ENV_BACKENDS, GYMNASIUM
from models.errors import ConfigError
from models.json_types import JSONObject
from models.run.validation import check as _check
from models.run.validation import with_overrides

__all__ = ["BACKEND_SPECS", "LEARNER_BILLING", "LEARNER_PER_ROUND", "LEARNER_RESIDENT", "SYSTEMS",
           "SYSTEM_CLUSTER", "SYSTEM_SERVERLESS", "ConfigError", "DaskBackendSpec", "LocalBackendSpec",
           "PPOConfig", "RunConfig", "WorkPoolBackendSpec", "backend_spec", "cluster_scheduler"]

SYSTEM_SERVERLESS, SYSTEM_CLUSTER = "serverless", "server-cluster"
SYSTEMS = (SYSTEM_SERVERLESS, SYSTEM_CLUSTER)
"""How a run is run and billed: serverless (per-round actors billed per second of execution) or
the fixed server cluster (the price table's [server_cluster]: one actor pool the size of its
actor cores, started once, billed for all its wall time)."""
LEARNER_PER_ROUND, LEARNER_RESIDENT = "per-round", "resident"
LEARNER_BILLING = (LEARNER_PER_ROUND, LEARNER_RESIDENT)
"""How a serverless run's learner container is billed (RunConfig.learner_billing)."""


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of the learner (CleanRL / SB3 names)."""

    learning_rate: float = 2.5e-4
    """Adam step size."""
    anneal_lr: bool = False
    """Decay the step size linearly to 0 over max_rounds."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    update_epochs: int = 4
    """Passes over the round's batch."""
    minibatch_size: int = 512
    """Samples per gradient step."""
    clip_coef: float = 0.2
    """PPO surrogate clip range."""
    clip_vloss: bool = False
    """Clip the value loss around the old values."""
    vloss_form: str = "max"
    """With clip_vloss, how: "max" is CleanRL's 0.5 * max(unclipped, clipped squared error);
    "clipped" is SB3's squared error of the clipped prediction only (no 0.5)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float | None = None
    """Stop the epochs early once approx KL exceeds this."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and value MLPs (ignored by the Atari CNN)."""
    init_log_std: float = 0.0
    """Initial value of the Gaussian policy's state-independent log-std (continuous actions;
    SB3's log_std_init). 0 is CleanRL's; a lower start explores less noisily (RL-Zoo: -2 on Hopper)."""
    normalize_obs: bool = False
    """Normalise observations with running statistics merged across actors (MuJoCo)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return, merged across actors."""

    def validate(self) -> None:
        _check(self.learning_rate > 0, "ppo.learning_rate must be > 0")
        _check(0 < self.gamma <= 1, "ppo.gamma must be in (0, 1]")
        _check(0 <= self.gae_lambda <= 1, "ppo.gae_lambda must be in [0, 1]")
        _check(self.update_epochs >= 1, "ppo.update_epochs must be >= 1")
        _check(self.minibatch_size >= 1, "ppo.minibatch_size must be >= 1")
        _check(self.clip_coef > 0, "ppo.clip_coef must be > 0")
        _check(self.max_grad_norm > 0, "ppo.max_grad_norm must be > 0")
        _check(self.target_kl is None or self.target_kl > 0, "ppo.target_kl must be > 0 or null")
        _check(self.vloss_form in VLOSS_FORMS,
               f"ppo.vloss_form must be one of {', '.join(VLOSS_FORMS)}, got {self.vloss_form!r}")
        _check(math.isfinite(self.init_log_std) and -10 <= self.init_log_std <= 2,
               "ppo.init_log_std must be a number in [-10, 2]")
        _check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden),
               "ppo.hidden must list positive layer widths")

    def replace(self, overrides: Mapping[str, object] | None) -> PPOConfig:
        """Copy with overrides; unknown keys and wrong types are an error naming the key."""
        return with_overrides(self, overrides, "ppo", "PPO")


# -- where actors run: one typed spec per backend ------------------------------------------

@dataclass(frozen=True)
class LocalBackendSpec:
    """Warm worker processes on this machine, one core and one torch thread each."""

    name: ClassVar[str] = "local"
    workers: int | None = None
    """Worker processes; None: one per core."""


@dataclass(frozen=True)
class WorkPoolBackendSpec:
    """Each actor its own flow run of a deployment on a Prefect work pool (process, ACI, ...)."""

    name: ClassVar[str] = "work-pool"
    actor_deployment: str = "actor/minionsrl-actor"
    """'flow/deployment' that runs one actor as its own flow run; its pool decides the infrastructure."""
    server_deployment: str = "actor-server/minionsrl-actor-server"
    """'flow/deployment' of the long-lived warm actor server."""
    storage_block: str = "local-file-system/minionsrl-storage"
    """Block that carries weights out and batches back; the default local one is created on first use."""
    warm_actors: int = 0
    """Most warm actor servers kept between rounds (they follow recent actor counts); 0: all cold."""
    warm_subflows: bool = False
    """A warm server runs each job as an `actor` subflow (one flow run per actor in the UI)."""
    actor_job_variables: JSONObject | None = None
    """Work-pool job variables per actor flow run, e.g. {"cpu": 1, "memory": 2}."""


@dataclass(frozen=True)
class DaskBackendSpec:
    """Actors as tasks on a Dask cluster: a LocalCluster here, or one at an address."""

    name: ClassVar[str] = "dask"
    workers: int | None = None
    """LocalCluster worker processes; None: one per core."""
    dask_address: str | None = None
    """Scheduler address of a running cluster; None: a LocalCluster here."""
    dask_cluster_class: str | None = None
    """Another cluster class to start, by import path (e.g. dask_cloudprovider.azure.AzureVMCluster)."""
    dask_cluster_kwargs: JSONObject | None = None
    """Keyword arguments of that cluster class."""


BackendSpec = LocalBackendSpec | WorkPoolBackendSpec | DaskBackendSpec
BACKEND_SPECS: dict[str, type] = {spec.name: spec for spec in (LocalBackendSpec, WorkPoolBackendSpec, DaskBackendSpec)}


def backend_spec(name: str, options: Mapping[str, object] | None = None) -> BackendSpec:
    """The typed spec of backend `name`; an option that does not apply to it is a ConfigError."""
    cls = BACKEND_SPECS.get(name)
    if cls is None:
        raise ConfigError(f"unknown backend {name!r}; available: {', '.join(BACKEND_SPECS)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options or {}) - known)
    _check(not unknown, f"option(s) {unknown} do not apply to the {name!r} backend; "
                        f"its options: {sorted(known)}")
    spec = cls(**(options or {}))
    if isinstance(spec, WorkPoolBackendSpec):
        _check(isinstance(spec.warm_actors, int) and spec.warm_actors >= 0, "warm_actors must be an integer >= 0")
    if getattr(spec, "workers", None) is not None:
        _check(isinstance(spec.workers, int) and spec.workers >= 1, "local_workers must be an integer >= 1")
    return spec


def backend_to_dict(spec: BackendSpec) -> JSONObject:
    return {"name": spec.name, **dataclasses.asdict(spec)}


def backend_from_dict(raw: JSONObject) -> BackendSpec:
    values = dict(raw)
    return backend_spec(values.pop("name"), values)


# -- the run -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunConfig:
    """Every parameter of one training run (the `train` flow's parameters, resolved)."""

    env_id: str
    """Gymnasium env id (or 'module:Class')."""
    scheduler: str
    """Scheduler spec: fixed:N, max, adapt, increase:..., decrease:..., switch:..., learned[:source][:sample]."""
    target_return: float
    """J: stop once a round's mean completed-episode return reaches it."""
    budget_usd: float
    """B: the run's budget in dollars."""
    max_rounds: int
    """K: at most this many rounds."""
    fragment: int
    """Env steps one actor samples per round."""
    envs_per_actor: int
    """Envs one actor steps in lockstep (divides fragment)."""
    max_env_steps: int | None = None
    """S: stop after the round that brings the run's env steps to this many (every system the same
    sample budget, however wide its rounds); anneal_lr then decays to 0 at the nearer of K and S.
    None: no such stop."""
    seed: int = 0
    """Run seed; actor i of round k seeds from (seed, k, i)."""
    scheduler_seed: int | None = None
    """Seed of a learned scheduler's sampling (mode sample); None: the run's seed. Scheduler
    training gives the episodes of a batch one run seed and each its own scheduler seed
    (flows/scheduler_flows.py common_seeds)."""
    carry_episodes: bool = False
    """Actor i of round k+1 continues the episodes actor i of round k left unfinished, instead of
    resetting its envs (MuJoCo envs: models/envs/snapshot.py). Off: every fragment starts new
    episodes and cuts the last one."""
    env_backend: str = GYMNASIUM
    """What steps the actors' envs: gymnasium or envpool (models/envs/envpool_batch.py)."""
    i_max: int = 32
    """Largest actor count a scheduler may choose."""
    backend: BackendSpec = LocalBackendSpec()
    """Where actors run, with that backend's options."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    actor_memory_gb: float = 1.0
    """Memory billed per actor."""
    learner_device: str = "auto"
    """auto (CUDA when present), cpu or cuda."""
    actor_timeout_s: float = 300.0
    """An actor running longer is killed (and retried): a lost actor must not stall a round."""
    actor_retries: int = 1
    """Extra attempts for a crashed or timed-out actor (its billed time still counts)."""
    quorum: float = 0.75
    """Fraction of a round's actors whose batches must arrive for the round to go on."""
    eval_every: int = 0
    """Every this many rounds (and at the end) evaluate deterministic actions; 0: off."""
    eval_episodes: int = 5
    """Whole episodes per evaluation."""
    stop_at_eval: bool = False
    """Judge J on the periodic evaluations instead of R_k: stop once an evaluation's mean return
    reaches J and, on MuJoCo locomotion envs, every evaluated episode moved forward (a policy that
    stands still cannot count). Needs eval_every."""
    prices: PriceTable = field(default_factory=PriceTable.load)
    """The price table the run is billed with (its actor memory is actor_memory_gb)."""
    tracking_uri: str = ""
    """MLflow store."""
    experiment: str = ""
    """MLflow experiment."""
    checkpoint_dir: str = ""
    """Where per-round checkpoints go (under <checkpoint_dir>/<run id>/)."""
    parent_run_id: str | None = None
    """MLflow run this run is nested under (sweeps, scheduler training)."""
    register_model: str | None = None
    """Register the final policy's MLflow model under this name (None: logged, not registered)."""
    log_model: bool = True
    """Log the final policy as an MLflow model and the per-round plots (~1-2 s at the run's end;
    scheduler-training episodes turn it off). The policy file itself is always logged."""
    system: str = SYSTEM_SERVERLESS
    """serverless or server-cluster (SYSTEMS)."""
    bill_cluster_startup: bool = True
    """server-cluster: bill the cluster's start-up (price table) in the run's first round; the
    summary reports the cluster's cost with and without it either way."""
    learner_billing: str = LEARNER_PER_ROUND
    """serverless: how the learner's container is billed. per-round (the paper's function, started
    ahead of its update so its start-up is paid once): its update seconds each round; resident
    (deployments/' ACI design, one container for the run): every second of the run's cloud clock.
    The summary reports the learner's bill both ways either way."""
    preset_variant: str | None = None
    """The variant of the env's preset that filled the unset parameters (models/data/presets.toml,
    e.g. 'locomotion'); None: the env's own preset."""

    # What a resumed run may change (recorded as a tag): where and how long it runs, never
    # what it learns. tracking_uri: a store moved elsewhere (the run must exist there).
    RESUMABLE_CHANGES: ClassVar[frozenset[str]] = frozenset({
        "max_rounds", "max_env_steps", "budget_usd", "backend", "actor_timeout_s", "actor_retries", "quorum",
        "eval_every", "eval_episodes", "stop_at_eval", "learner_device", "tracking_uri", "checkpoint_dir", "register_model",
        "log_model"})

    def validate(self) -> None:
        _check(math.isfinite(self.target_return), "target_return must be a finite number")
        _check(self.budget_usd > 0 and math.isfinite(self.budget_usd),
               "budget_usd must be a positive number of dollars")
        _check(1 <= self.max_rounds <= 1_000_000, "max_rounds must be in [1, 1000000]")
        _check(self.max_env_steps is None or (isinstance(self.max_env_steps, int) and self.max_env_steps >= 1),
               f"max_env_steps must be an integer >= 1 or null, got {self.max_env_steps!r}")
        _check(1 <= self.i_max <= 1024, "i_max must be in [1, 1024]")
        _check(self.fragment >= 1, "fragment (env steps per actor per round) must be >= 1")
        _check(self.envs_per_actor >= 1, "envs_per_actor must be >= 1")
        _check(self.fragment % self.envs_per_actor == 0,
               f"fragment ({self.fragment}) must be a multiple of envs_per_actor "
               f"({self.envs_per_actor})")
        _check(self.seed >= 0, "seed must be >= 0")
        _check(self.scheduler_seed is None or (isinstance(self.scheduler_seed, int) and self.scheduler_seed >= 0),
               f"scheduler_seed must be an integer >= 0, got {self.scheduler_seed!r}")
        _check(isinstance(self.carry_episodes, bool),
               f"carry_episodes must be true or false, got {self.carry_episodes!r}")
        _check(self.actor_memory_gb > 0, "actor_memory_gb must be > 0")
        _check(self.env_backend in ENV_BACKENDS, f"env_backend must be one of {ENV_BACKENDS}, got {self.env_backend!r}")
        _check(self.learner_device in ("auto", "cpu", "cuda"),
               "learner_device must be 'auto', 'cpu' or 'cuda'")
        _check(self.actor_timeout_s > 0, "actor_timeout_s must be > 0 seconds")
        _check(0 <= self.actor_retries <= 10, "actor_retries must be in [0, 10]")
        _check(0 < self.quorum <= 1, "quorum must be a fraction in (0, 1]")
        _check(self.eval_every >= 0, "eval_every must be >= 0 (0 turns evaluation off)")
        _check(self.eval_episodes >= 1, "eval_episodes must be >= 1")
        _check(isinstance(self.stop_at_eval, bool), f"stop_at_eval must be true or false, got {self.stop_at_eval!r}")
        _check(not self.stop_at_eval or self.eval_every > 0,
               "stop_at_eval judges J on the periodic evaluations: set eval_every (rounds between them)")
        _check(self.register_model is None or (isinstance(self.register_model, str) and self.register_model.strip() != ""),
               f"register_model must be a model name, got {self.register_model!r}")
        _check(isinstance(self.log_model, bool), f"log_model must be true or false, got {self.log_model!r}")
        _check(self.register_model is None or self.log_model, "register_model needs log_model")
        if isinstance(self.backend, WorkPoolBackendSpec):
            _check(self.backend.warm_actors <= self.i_max, "warm_actors must be <= i_max")
        _check(self.system in SYSTEMS, f"system must be one of {', '.join(SYSTEMS)}, got {self.system!r}")
        _check(isinstance(self.bill_cluster_startup, bool),
               f"bill_cluster_startup must be true or false, got {self.bill_cluster_startup!r}")
        _check(self.learner_billing in LEARNER_BILLING,
               f"learner_billing must be one of {', '.join(LEARNER_BILLING)}, got {self.learner_billing!r}")
        if self.system == SYSTEM_CLUSTER:
            self._validate_cluster()
        self.ppo.validate()

    def _validate_cluster(self) -> None:
        """The server cluster is one fixed pool of its actor cores, as persistent local processes."""
        cores = self.prices.server_actor_cores
        _check(isinstance(self.backend, LocalBackendSpec),
               f"system server-cluster runs its fixed actor pool as persistent worker processes of "
               f"the local backend; backend {self.backend.name!r} starts actors per round or on "
               f"infrastructure it does not keep: use backend local")
        _check(self.backend.workers in (None, cores),
               f"system server-cluster keeps one worker process per actor core of the cluster "
               f"({cores}); local_workers={self.backend.workers} differs: leave it unset")
        _check(cluster_scheduler(self.scheduler, self.i_max, cores),
               f"system server-cluster runs the cluster's {cores} actor cores every round: use "
               f"scheduler fixed:{cores} (or max with i_max={cores}), not {self.scheduler!r} "
               f"with i_max={self.i_max}; the cluster's size is the price table's "
               f"[server_cluster] actor_cores")

    @property
    def learner_resident(self) -> bool:
        """A serverless run whose learner container is billed for the whole run."""
        return self.learner_billing == LEARNER_RESIDENT and not self.cluster

    @property
    def cluster(self) -> bool:
        return self.system == SYSTEM_CLUSTER

    @property
    def steps_per_env(self) -> int:
        return self.fragment // self.envs_per_actor

    def to_dict(self) -> JSONObject:
        """Plain data (JSON-able): MLflow params and checkpoints."""
        out = dataclasses.asdict(self)
        out["backend"] = backend_to_dict(self.backend)
        out["ppo"]["hidden"] = list(self.ppo.hidden)
        return out

    @classmethod
    def from_dict(cls, raw: JSONObject) -> RunConfig:
        """Back from to_dict (a checkpoint's stored configuration)."""
        values = dict(raw)
        ppo = dict(values.pop("ppo"))
        ppo["hidden"] = tuple(ppo["hidden"])
        return cls(ppo=PPOConfig(**ppo), backend=backend_from_dict(values.pop("backend")),
                   prices=PriceTable.from_dict(values.pop("prices")), **values)

    def with_changes(self, changes: Mapping[str, object]) -> RunConfig:
        """A resumed run's configuration: only RESUMABLE_CHANGES may differ from the stored one."""
        refused = sorted(k for k, v in changes.items()
                         if k not in self.RESUMABLE_CHANGES and v != getattr(self, k))
        _check(not refused, f"cannot change {refused} when resuming: the run was trained with "
                            f"{ {k: getattr(self, k) for k in refused} }; start a new run instead "
                            f"(what a resume may change: {sorted(self.RESUMABLE_CHANGES)})")
        out = dataclasses.replace(self, **changes)
        out.validate()
        return out


def cluster_scheduler(spec: str, i_max: int, cores: int) -> bool:
    """Whether a scheduler spec is Fixed(cores), the only one a server cluster runs."""
    spec = spec.strip().lower()
    return (spec == f"fixed:{cores}" and i_max >= cores) or (spec == "max" and i_max == cores)


VLOSS_FORMS = ("max", "clipped")

"""The cost model: serverless per-second billing against a fixed server cluster (prices in models/data/prices.toml).

Every billed second names the resource it ran on: actors on the actor container; the learner on
the GPU container when it ran on CUDA and on a CPU container (`learner_cpu`) when it ran on the
CPU. A round's bill has three parts that add up to it exactly (RoundBill):
- startup_usd: the actors' measured start-up (process boot, work-pool infrastructure, envs and
  module; models/rl/timings.py ActorTimings.startup_s) and, once per run, the learner's start-up;
- learner_usd: the learner's update;
- actors_usd: the rest of the actors' billed seconds (dispatch, weight load, sampling, upload,
  failed and retried attempts) and the idle seconds of kept-warm actors.

A server-cluster run (models/run/config.py SYSTEM_CLUSTER) is billed by bill_cluster_round instead:
the cluster's whole time, idle or not, split into its learner VM and its actor VMs, and its
start-up once when asked. Its learner VM is the one for the device the learner ran on: the
paper's V100 VM on CUDA, a CPU VM of the learner's size on the CPU (one bill for the same work).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from models.errors import ConfigError

NO_SOURCE = "user price file, no source given"


@dataclass(frozen=True)
class Resources:
    vcpu: float
    memory_gb: float
    gpu: int = 0


@dataclass(frozen=True)
class BudgetPrior:
    """Durations the budget rule assumes before a run has measured its own (models/billing/budget.py)."""

    actor_startup_s_local: float
    actor_startup_s_dask: float
    actor_startup_s_work_pool: float
    actor_step_s: float
    """Seconds per env step of one actor."""
    round_overhead_s: float
    """A round's orchestration outside actors and learner (billed by a server cluster only)."""
    source: str = NO_SOURCE

    def actor_startup_s(self, backend: str) -> float:
        """The prior start-up of a cold actor on `backend` (the largest for an unknown one)."""
        known = {"local": self.actor_startup_s_local, "dask": self.actor_startup_s_dask,
                 "work-pool": self.actor_startup_s_work_pool}
        return known.get(backend, max(known.values()))


@dataclass(frozen=True)
class PriceTable:
    """Per-second prices (converted from the hourly list prices in the table file)."""

    vcpu_s: float
    memory_gb_s: float
    gpu_s: float
    actor: Resources
    learner: Resources
    """The learner on CUDA (a GPU container)."""
    learner_cpu: Resources
    """The learner on the CPU (a container without a GPU)."""
    learner_cpu_source: str
    aci_startup_s: float
    """Start-up of one new ACI container: the "as on ACI" projection only, never billed."""
    aci_startup_source: str
    server_per_s: float
    server_startup_s: float
    server_startup_source: str
    server_actor_cores: int
    server_learner_per_s: float
    """The cluster's learner VM: a part of server_per_s."""
    server_actors_per_s: float
    """The cluster's actor VMs together: the rest of server_per_s."""
    server_learner_cpu_per_s: float
    """The cluster's learner VM when the learner runs on the CPU: a CPU VM of its size."""
    server_parts_source: str
    prior: BudgetPrior
    source: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """The packaged table, or a user's TOML file with the same layout."""
        where = "packaged" if path is None else str(path)
        try:
            if path is None:
                text = resources.files("models.data").joinpath("prices.toml").read_text()
                source = "packaged models/data/prices.toml"
            else:
                text = Path(path).read_text()
                source = str(path)
            raw = tomllib.loads(text)
        except (OSError, ValueError) as exc:  # TOMLDecodeError, UnicodeDecodeError are ValueErrors
            raise ConfigError(f"cannot read price table {where}: {exc!r}") from exc
        try:
            aci, server = _section(raw, "aci"), _section(raw, "server_cluster")
            cpu, prior = _section(raw, "learner_cpu"), _section(raw, "budget_prior")
            return cls(
                vcpu_s=_number(aci, "aci", "vcpu_per_hour") / 3600,
                memory_gb_s=_number(aci, "aci", "memory_gb_per_hour") / 3600,
                gpu_s=_number(aci, "aci", "gpu_v100_per_hour") / 3600,
                actor=Resources(**_section(raw, "actor")),
                learner=Resources(**_section(raw, "learner")),
                learner_cpu=Resources(vcpu=_number(cpu, "learner_cpu", "vcpu"),
                                      memory_gb=_number(cpu, "learner_cpu", "memory_gb")),
                learner_cpu_source=str(cpu.get("source", NO_SOURCE)),
                aci_startup_s=_number(aci, "aci", "container_startup_s"),
                aci_startup_source=str(aci.get("container_startup_source", NO_SOURCE)),
                server_per_s=_number(server, "server_cluster", "price_per_hour") / 3600,
                server_startup_s=_number(server, "server_cluster", "startup_s"),
                server_startup_source=str(server.get("startup_source", NO_SOURCE)),
                server_actor_cores=int(server.get("actor_cores", 32)),
                **_cluster_parts(server),
                prior=BudgetPrior(**{f.name: (str(prior.get(f.name, NO_SOURCE)) if f.name == "source"
                                              else _number(prior, "budget_prior", f.name))
                                     for f in fields(BudgetPrior)}),
                source=source,
            ).checked()
        except ConfigError as exc:
            raise ConfigError(f"price table {where}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot read price table {where}: {exc!r}") from exc

    def with_actor_memory(self, memory_gb: float) -> PriceTable:
        return replace(self, actor=replace(self.actor, memory_gb=memory_gb))

    @classmethod
    def from_dict(cls, raw: dict) -> PriceTable:
        """Back from dataclasses.asdict (a run's stored configuration). A configuration stored
        before a field existed takes that field from the packaged table."""
        values = dict(raw)
        missing = {f.name for f in fields(cls)} - set(values)
        prior_missing = {f.name for f in fields(BudgetPrior)} - set(values.get("prior", {}))
        if missing or prior_missing:
            packaged = PriceTable.load()
            values.update({name: _plain(getattr(packaged, name)) for name in missing})
            values["prior"] = {**_plain(packaged.prior), **values["prior"]}
        for name in ("actor", "learner", "learner_cpu"):
            values[name] = Resources(**values[name])
        values["prior"] = BudgetPrior(**values["prior"])
        return cls(**values).checked()

    def checked(self) -> PriceTable:
        """Every price, size and time finite and >= 0 (a NaN price would pass a budget rule that
        compares with it), naming the field; this table, unchanged."""
        def walk(value: object, name: str) -> None:
            if is_dataclass(value):
                for f in fields(value):
                    walk(getattr(value, f.name), f"{name}.{f.name}" if name else f.name)
            elif isinstance(value, int | float) and not isinstance(value, bool) and not (
                    math.isfinite(value) and value >= 0):
                raise ConfigError(f"price table: {name} must be a finite number >= 0, got {value!r}")
        walk(self, "")
        return self

    def per_second(self, res: Resources) -> float:
        return res.vcpu * self.vcpu_s + res.memory_gb * self.memory_gb_s + res.gpu * self.gpu_s

    def learner_resources(self, device: str) -> Resources:
        """What the learner is billed as on `device` ('cuda', 'cuda:1', 'cpu'): each second on
        the resource it ran on."""
        return self.learner if _on_cuda(device) else self.learner_cpu

    def learner_per_second(self, device: str) -> float:
        return self.per_second(self.learner_resources(device))

    @property
    def actor_per_second(self) -> float:
        return self.per_second(self.actor)

    def server_learner_per_second(self, device: str) -> float:
        """The cluster's learner VM for a learner on `device`: the V100 VM on CUDA, else the CPU VM."""
        return self.server_learner_per_s if _on_cuda(device) else self.server_learner_cpu_per_s

    def server_cluster_per_second(self, device: str) -> float:
        """The whole cluster, its learner VM the one for `device`."""
        return self.server_actors_per_s + self.server_learner_per_second(device)


def _on_cuda(device: str) -> bool:
    return device.split(":")[0] == "cuda"


def _section(raw: dict, name: str) -> dict:
    if name not in raw:
        raise ConfigError(f"missing section [{name}]")
    if not isinstance(raw[name], dict):
        raise ConfigError(f"[{name}] must be a table, got {raw[name]!r}")
    return raw[name]


def _number(section: dict, name: str, key: str) -> float:
    if key not in section:
        raise ConfigError(f"missing key {key!r} in [{name}]")
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"[{name}] {key} must be a finite number >= 0, got {value!r}")
    return float(value)


def _cluster_parts(server: dict) -> dict[str, float | str]:
    """The cluster's price split into its learner VM and actor VMs; they must add up to it."""
    total = _number(server, "server_cluster", "price_per_hour")
    learner = _number(server, "server_cluster", "learner_vm_per_hour")
    actors = _number(server, "server_cluster", "actor_vm_per_hour") * _number(server, "server_cluster", "actor_vms")
    if abs(learner + actors - total) > 1e-9 * max(total, 1.0):
        raise ConfigError(f"[server_cluster] learner_vm_per_hour + actor_vms x actor_vm_per_hour = "
                          f"{learner + actors:g} must equal price_per_hour = {total:g}")
    return {"server_learner_per_s": learner / 3600, "server_actors_per_s": actors / 3600,
            "server_learner_cpu_per_s": _number(server, "server_cluster", "learner_cpu_vm_per_hour") / 3600,
            "server_parts_source": " ".join(str(server.get(k, NO_SOURCE))
                                            for k in ("learner_vm_source", "learner_cpu_vm_source",
                                                      "actor_vm_source"))}


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) else value


# -- a round's bill ------------------------------------------------------------------------

@dataclass(frozen=True)
class RoundBill:
    """What one round is billed, in parts that add up to round_usd exactly."""

    actors_usd: float
    """Actors' billed seconds other than start-up (and kept-warm idle seconds)."""
    learner_usd: float
    """The learner's update, on the resource of learner_device."""
    startup_usd: float
    """Actors' measured start-up, the backend's start-up outside any actor (pre-warmed worker
    boots), and the learner's start-up in the run's first round."""
    learner_device: str
    """'cuda' or 'cpu': what the learner ran on and was billed as."""
    warm_idle_usd: float = 0.0
    """Part of actors_usd: kept-warm actors' idle seconds (filled by a backend that keeps them)."""
    projected_aci_startup_usd: float = 0.0
    """Not billed: what every actor (and a starting learner) would add as a new ACI container."""

    @property
    def round_usd(self) -> float:
        return self.actors_usd + self.learner_usd + self.startup_usd


def bill_round(learner_s: float, learner_device: str, actor_s: list[float],
               actor_startup_s: list[float], prices: PriceTable, *,
               learner_startup_s: float = 0.0, warm_idle_s: float = 0.0,
               pool_startup_s: float = 0.0, containers_started: int | None = None) -> RoundBill:
    """The round's bill (SPEC §3).

    actor_s: every billed actor second (durations, failed and retried attempts), start-up
        included; actor_startup_s: the measured start-up within them (a part, not an addition).
    learner_startup_s: the learner's start-up when this round pays it (the run's first round).
    warm_idle_s: seconds kept-warm actors waited idle for this round (billed at the actor price).
    pool_startup_s: actor start-up the backend incurred outside any actor's billed time (worker
        processes booted before the first round), billed at the actor price as start-up.
    containers_started: actors the "as on ACI" projection starts (default: len(actor_s)).
    """
    actor_price = prices.actor_per_second
    learner_price = prices.learner_per_second(learner_device)
    startup_s = sum(actor_startup_s)
    run_s = max(sum(actor_s) - startup_s, 0.0)
    started = len(actor_s) if containers_started is None else containers_started
    projected = prices.aci_startup_s * (started * actor_price
                                        + (learner_price if learner_startup_s > 0 else 0.0))
    return RoundBill(
        actors_usd=(run_s + warm_idle_s) * actor_price,
        learner_usd=learner_s * learner_price,
        startup_usd=(startup_s + pool_startup_s) * actor_price + learner_startup_s * learner_price,
        learner_device=learner_device.split(":")[0],
        warm_idle_usd=warm_idle_cost(warm_idle_s, prices),
        projected_aci_startup_usd=projected,
    )


def warm_idle_cost(idle_s: float, prices: PriceTable) -> float:
    """A kept-warm actor bills its idle seconds like a running one: a warm pool is not free."""
    return idle_s * prices.actor_per_second


def round_time(learner_s: float, actor_s: list[float]) -> float:
    """P_k = P^l_k + max_i P^a_{k,i}: the slowest actor gates the round (one core per actor)."""
    return learner_s + (max(actor_s) if actor_s else 0.0)


def round_cost(learner_s: float, actor_s: list[float], prices: PriceTable, learner_device: str) -> float:
    """C_k = c * (P^l_k d^l + sum_i P^a_{k,i} d^a): serverless bills execution seconds only;
    d^l is the learner's resources on `learner_device`."""
    return learner_s * prices.learner_per_second(learner_device) + sum(actor_s) * prices.actor_per_second


def server_cluster_cost(wall_s: float, prices: PriceTable, learner_device: str, with_startup: bool = True) -> float:
    """The fixed cluster is billed for all its time, idle or not, and (with_startup) for its
    start-up (a price-table value: report both, it can dominate short runs); its learner VM is
    the one for learner_device."""
    return ((prices.server_startup_s if with_startup else 0.0) + wall_s) * prices.server_cluster_per_second(
        learner_device)


def bill_cluster_round(wall_s: float, learner_device: str, prices: PriceTable, *,
                       with_startup: bool = False) -> RoundBill:
    """A server-cluster round's bill: the whole cluster for the round's time, whether its
    actors work or wait (actor VMs as actors_usd, the learner VM for learner_device as
    learner_usd), and its start-up (with_startup: the round that pays it) at the whole cluster's price."""
    return RoundBill(
        actors_usd=wall_s * prices.server_actors_per_s,
        learner_usd=wall_s * prices.server_learner_per_second(learner_device),
        startup_usd=prices.server_startup_s * prices.server_cluster_per_second(learner_device) if with_startup else 0.0,
        learner_device=learner_device.split(":")[0])


@dataclass(frozen=True)
class ImpactBill:
    """IMPACT billed as the fixed server cluster it runs on (for its cloud time), and for
    reference as serverless and for this machine's wall."""

    server_cluster_usd: float
    """The cluster for the run's cloud time, idle included, with its start-up."""
    server_cluster_no_startup_usd: float
    server_cluster_at_wall_usd: float
    """The cluster for this machine's wall instead, with its start-up (labelled: what a real run
    as slow as this machine would cost)."""
    serverless_actors_usd: float
    """Actor-seconds (each actor's busy sampling time) x the actor container's price."""
    serverless_learner_usd: float
    """Learner-seconds x the learner container's price on the device it ran on."""
    always_on_pool_usd: float
    """The run's own always-on processes at container prices: actors + learner x cloud time."""

    @property
    def serverless_usd(self) -> float:
        return self.serverless_actors_usd + self.serverless_learner_usd

    def metrics(self) -> dict[str, float]:
        """The bill as MLflow metrics, with PPO's names where they mean the same (cost/total_usd:
        what the run costs, here the server cluster with its start-up)."""
        return {"cost/total_usd": self.server_cluster_usd, "cost/server_cluster_usd": self.server_cluster_usd,
                "cost/server_cluster_no_startup_usd": self.server_cluster_no_startup_usd,
                "cost/server_cluster_at_wall_usd": self.server_cluster_at_wall_usd,
                "cost/always_on_pool_usd": self.always_on_pool_usd, "cost/serverless_total_usd": self.serverless_usd,
                "cost/serverless_actors_usd": self.serverless_actors_usd,
                "cost/serverless_learner_usd": self.serverless_learner_usd}


def bill_impact(cloud_s: float, wall_s: float, actors: int, actor_busy_s: float, learner_s: float,
                learner_device: str, prices: PriceTable) -> ImpactBill:
    """The run's bill so far: cloud_s its time with a core per actor (the virtual executor's, or
    the wall when the actors ran for real), wall_s this machine's; both with the actors' start-up."""
    learner_price = prices.learner_per_second(learner_device)
    return ImpactBill(
        server_cluster_usd=server_cluster_cost(cloud_s, prices, learner_device, with_startup=True),
        server_cluster_no_startup_usd=server_cluster_cost(cloud_s, prices, learner_device, with_startup=False),
        server_cluster_at_wall_usd=server_cluster_cost(wall_s, prices, learner_device, with_startup=True),
        serverless_actors_usd=actor_busy_s * prices.actor_per_second,
        serverless_learner_usd=learner_s * learner_price,
        always_on_pool_usd=cloud_s * (actors * prices.actor_per_second + learner_price),
    )

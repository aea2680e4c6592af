"""The cost model: serverless per-second billing against a fixed server cluster (prices in models/data/prices.toml)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from models.errors import ConfigError


@dataclass(frozen=True)
class Resources:
    vcpu: float
    memory_gb: float
    gpu: int = 0


@dataclass(frozen=True)
class PriceTable:
    """Per-second prices (converted from the hourly list prices in the table file)."""

    vcpu_s: float
    memory_gb_s: float
    gpu_s: float
    actor: Resources
    learner: Resources
    server_per_s: float
    server_startup_s: float
    server_actor_cores: int
    source: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """The packaged table, or a user's TOML file with the same layout."""
        try:
            if path is None:
                text = resources.files("models.data").joinpath("prices.toml").read_text()
                source = "packaged models/data/prices.toml"
            else:
                text = Path(path).read_text()
                source = str(path)
            raw = tomllib.loads(text)
            aci, server = raw["aci"], raw["server_cluster"]
            return cls(
                vcpu_s=aci["vcpu_per_hour"] / 3600,
                memory_gb_s=aci["memory_gb_per_hour"] / 3600,
                gpu_s=aci["gpu_v100_per_hour"] / 3600,
                actor=Resources(**raw["actor"]),
                learner=Resources(**raw["learner"]),
                server_per_s=server["price_per_hour"] / 3600,
                server_startup_s=float(server.get("startup_s", 0.0)),
                server_actor_cores=int(server.get("actor_cores", 32)),
                source=source,
            )
        except (OSError, KeyError, TypeError, ValueError) as exc:  # TOMLDecodeError, UnicodeDecodeError are ValueErrors
            raise ConfigError(f"cannot read price table {path or 'packaged'}: {exc!r}") from exc

    def with_actor_memory(self, memory_gb: float) -> PriceTable:
        return replace(self, actor=replace(self.actor, memory_gb=memory_gb))

    @classmethod
    def from_dict(cls, raw: dict) -> PriceTable:
        """Back from dataclasses.asdict (a run's stored configuration)."""
        values = dict(raw)
        values["actor"] = Resources(**values["actor"])
        values["learner"] = Resources(**values["learner"])
        return cls(**values)

    def per_second(self, res: Resources) -> float:
        return res.vcpu * self.vcpu_s + res.memory_gb * self.memory_gb_s + res.gpu * self.gpu_s


def round_time(learner_s: float, actor_s: list[float]) -> float:
    """P_k = P^l_k + max_i P^a_{k,i}: the slowest actor gates the round (one core per actor)."""
    return learner_s + (max(actor_s) if actor_s else 0.0)


def round_cost(learner_s: float, actor_s: list[float], prices: PriceTable) -> float:
    """C_k = c * (P^l_k d^l + sum_i P^a_{k,i} d^a): serverless bills execution seconds only."""
    return learner_s * prices.per_second(prices.learner) + sum(actor_s) * prices.per_second(prices.actor)


def server_cluster_cost(wall_s: float, prices: PriceTable) -> float:
    """The fixed cluster is billed for its start-up and all wall-clock time, idle or not."""
    return (prices.server_startup_s + wall_s) * prices.server_per_s


def estimate_round_cost(actors: int, last_learner_s: float, last_actor_mean_s: float,
                        prices: PriceTable) -> float:
    """What the next round should cost, from the last round's measured durations."""
    return round_cost(last_learner_s, [last_actor_mean_s] * actors, prices)

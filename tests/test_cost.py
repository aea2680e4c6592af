"""The cost model against the published prices, and price-file handling."""

from __future__ import annotations

import pytest

from models.billing.cost import (
    PriceTable,
    Resources,
    bill_cluster_round,
    bill_round,
    round_cost,
    round_time,
    server_cluster_cost,
    warm_idle_cost,
)
from models.errors import ConfigError

# Published hourly prices (models/data/prices.toml) and the packaged resources (models/data/prices.toml):
#   actor   = 1 vCPU + 1 GB          -> 0.0405 + 0.00445                 = 0.04495 $/h
#   learner = 4 vCPU + 16 GB + 1 V100 -> 4*0.0405 + 16*0.00445 + 3.06     = 3.2932  $/h (on CUDA)
#   learner = 4 vCPU + 16 GB, no GPU  -> 4*0.0405 + 16*0.00445            = 0.2332  $/h (on CPU)
#   server  = NC6s_v3 + 4 x E16-8s_v5 = 7.092 $/h, 300 s start-up billed
ACTOR_PER_H = 1 * 0.0405 + 1 * 0.00445
LEARNER_PER_H = 4 * 0.0405 + 16 * 0.00445 + 1 * 3.06
LEARNER_CPU_PER_H = 4 * 0.0405 + 16 * 0.00445


@pytest.fixture(scope="module")
def prices() -> PriceTable:
    return PriceTable.load()


def test_packaged_table_converts_hourly_prices_to_per_second(prices):
    assert prices.vcpu_s == pytest.approx(1.125e-5, rel=1e-12)   # $1.125e-5 per vCPU-second
    assert prices.memory_gb_s == pytest.approx(1.236e-6, rel=1e-3)  # $1.236e-6 per GB-second
    assert prices.gpu_s == pytest.approx(3.06 / 3600, rel=1e-12)
    assert prices.actor == Resources(vcpu=1.0, memory_gb=1.0, gpu=0)
    assert prices.learner == Resources(vcpu=4.0, memory_gb=16.0, gpu=1)
    assert prices.server_per_s == pytest.approx(7.092 / 3600, rel=1e-12)
    assert prices.learner_cpu == Resources(vcpu=4.0, memory_gb=16.0, gpu=0)
    assert prices.learner_per_second("cpu") * 3600 == pytest.approx(0.2332)
    assert prices.learner_per_second("cuda:0") * 3600 == pytest.approx(3.2932)
    assert prices.server_startup_s == 300.0
    assert prices.aci_startup_s == 90.0
    for source in (prices.learner_cpu_source, prices.aci_startup_source,
                   prices.server_startup_source, prices.prior.source):
        assert len(source) > 40  # every new row says where it comes from
    assert prices.server_actor_cores == 32
    assert "packaged" in prices.source
    assert ACTOR_PER_H == pytest.approx(0.04495) and LEARNER_PER_H == pytest.approx(3.2932)


@pytest.mark.parametrize(
    ("learner_s", "actor_s", "expected"),
    [
        (2.0, [1.0, 3.0, 2.0], 5.0),   # slowest actor gates the round
        (2.0, [], 2.0),
        (0.0, [4.5], 4.5),
        (10.0, [0.5, 0.5], 10.5),
    ],
)
def test_round_time(learner_s, actor_s, expected):
    assert round_time(learner_s, actor_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("learner_s", "actor_s", "expected_usd"),
    [
        (3600.0, [3600.0, 3600.0], 3.2932 + 2 * 0.04495),   # 3.3831
        (36.0, [], 0.032932),
        (0.0, [1800.0, 5400.0], 2 * 0.04495),              # actor seconds add up
        (1.0, [1.0] * 32, (3.2932 + 32 * 0.04495) / 3600),
        (0.0, [], 0.0),
    ],
)
def test_round_cost_with_packaged_prices(prices, learner_s, actor_s, expected_usd):
    assert round_cost(learner_s, actor_s, prices, "cuda") == pytest.approx(expected_usd, rel=1e-9, abs=1e-15)


def test_a_learner_on_the_cpu_is_billed_as_a_cpu_container(prices):
    # one hour of learner on the CPU: 0.2332 $, not the GPU container's 3.2932 $
    assert round_cost(3600.0, [], prices, "cpu") == pytest.approx(LEARNER_CPU_PER_H)
    assert round_cost(3600.0, [], prices, "cuda") == pytest.approx(LEARNER_PER_H)


def test_round_bill_parts_add_up_exactly_and_name_the_device(prices):
    # 2 actors of 3 s each, 0.5 s of which is measured start-up; learner 2 s on the CPU plus its
    # 4 s start-up; 10 s of warm idle
    bill = bill_round(2.0, "cpu", [3.0, 3.0], [0.5, 0.5], prices, learner_startup_s=4.0,
                      warm_idle_s=10.0)
    actor, learner = ACTOR_PER_H / 3600, LEARNER_CPU_PER_H / 3600
    assert bill.learner_device == "cpu"
    assert bill.startup_usd == pytest.approx(1.0 * actor + 4.0 * learner)
    assert bill.learner_usd == pytest.approx(2.0 * learner)
    assert bill.actors_usd == pytest.approx((5.0 + 10.0) * actor)
    assert bill.warm_idle_usd == pytest.approx(warm_idle_cost(10.0, prices)) == pytest.approx(10 * actor)
    assert bill.actors_usd + bill.learner_usd + bill.startup_usd == bill.round_usd
    # without start-up and idle, the bill is SPEC §3's C_k on the learner's device
    plain = bill_round(2.0, "cuda:0", [3.0, 3.0], [0.5, 0.5], prices)
    assert plain.round_usd == pytest.approx(round_cost(2.0, [3.0, 3.0], prices, "cuda"))
    assert plain.learner_device == "cuda"
    # the "as on ACI" projection: 90 s per container started (and the learner's when it starts)
    assert plain.projected_aci_startup_usd == pytest.approx(90.0 * 2 * actor)
    assert bill.projected_aci_startup_usd == pytest.approx(90.0 * (2 * actor + learner))


def test_round_cost_with_bigger_actor_memory(prices):
    bigger = prices.with_actor_memory(4.0)
    assert round_cost(0.0, [3600.0], bigger, "cpu") == pytest.approx(0.0405 + 4 * 0.00445)
    assert prices.actor.memory_gb == 1.0  # the original is untouched


@pytest.mark.parametrize(
    ("wall_s", "expected_usd"),
    [
        (0.0, 300 * 7.092 / 3600),          # 0.591: start-up alone is billed
        (3600.0, 3900 * 7.092 / 3600),      # 7.683
        (100.0, 400 * 7.092 / 3600),
    ],
)
def test_server_cluster_cost_includes_startup(prices, wall_s, expected_usd):
    assert server_cluster_cost(wall_s, prices, "cuda") == pytest.approx(expected_usd, rel=1e-9)
    # and without it: idle or not, every wall second is billed
    assert server_cluster_cost(wall_s, prices, "cuda", with_startup=False) == pytest.approx(
        wall_s * 7.092 / 3600, rel=1e-9, abs=1e-15)
    # a learner on the CPU: its VM is a D4s_v5 ($0.192/h), not the V100 one ($3.06/h)
    assert server_cluster_cost(wall_s, prices, "cpu") == pytest.approx(
        (300 + wall_s) * (4 * 1.008 + 0.192) / 3600, rel=1e-9)


USER_TABLE = """
[aci]
vcpu_per_hour = 0.36
memory_gb_per_hour = 0.036
gpu_v100_per_hour = 36.0
container_startup_s = 20.0

[actor]
vcpu = 2.0
memory_gb = 0.5

[learner]
vcpu = 1.0
memory_gb = 1.0
gpu = 0

[learner_cpu]
vcpu = 2.0
memory_gb = 2.0

[server_cluster]
price_per_hour = 3.6
startup_s = 0.0
learner_vm_per_hour = 1.6
learner_cpu_vm_per_hour = 0.4
actor_vm_per_hour = 1.0
actor_vms = 2

[budget_prior]
actor_startup_s_local = 1.0
actor_startup_s_dask = 2.0
actor_startup_s_work_pool = 3.0
actor_step_s = 0.001
round_overhead_s = 1.0
"""


def test_user_price_file_overrides_the_packaged_table(tmp_path):
    path = tmp_path / "my_prices.toml"
    path.write_text(USER_TABLE)
    table = PriceTable.load(path)
    assert table.vcpu_s == pytest.approx(1e-4)
    assert table.memory_gb_s == pytest.approx(1e-5)
    assert table.gpu_s == pytest.approx(1e-2)
    assert table.actor == Resources(vcpu=2.0, memory_gb=0.5)
    assert table.learner == Resources(vcpu=1.0, memory_gb=1.0, gpu=0)
    assert table.server_startup_s == 0.0 and table.server_actor_cores == 32  # default
    assert table.learner_cpu == Resources(vcpu=2.0, memory_gb=2.0)
    assert table.prior.actor_startup_s("dask") == 2.0 and table.prior.actor_startup_s("other") == 3.0
    assert table.source == str(path) and "no source" in table.server_startup_source
    # learner on CUDA 1 vCPU + 1 GB + 1 GPU-less = 1.1e-4 $/s; actor 2 vCPU + 0.5 GB = 2.05e-4 $/s
    assert round_cost(10.0, [10.0, 20.0], table, "cuda") == pytest.approx(10 * 1.1e-4 + 30 * 2.05e-4)
    # learner on the CPU: 2 vCPU + 2 GB = 2.2e-4 $/s
    assert round_cost(10.0, [], table, "cpu") == pytest.approx(10 * 2.2e-4)
    assert server_cluster_cost(10.0, table, "cuda") == pytest.approx(1e-2)
    assert server_cluster_cost(10.0, table, "cpu") == pytest.approx(10 * (2 * 1.0 + 0.4) / 3600)


BROKEN_TABLES = {
    "not toml": "[aci\nvcpu_per_hour = ",
    "missing section": USER_TABLE.replace("[server_cluster]\nprice_per_hour = 3.6\n", ""),
    "missing price": USER_TABLE.replace("gpu_v100_per_hour = 36.0\n", ""),
    "unknown resource": USER_TABLE.replace("vcpu = 2.0\n", "vcpu = 2.0\ncores = 4\n"),
    "price is text": USER_TABLE.replace("vcpu_per_hour = 0.36", 'vcpu_per_hour = "cheap"'),
    "section is a number": USER_TABLE.replace("[actor]\nvcpu = 2.0\nmemory_gb = 0.5\n", "")
                                     .replace("[aci]", "actor = 3\n[aci]"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_TABLES))
def test_broken_price_file_raises_config_error(tmp_path, name):
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN_TABLES[name])
    with pytest.raises(ConfigError, match="price table"):
        PriceTable.load(path)


def test_missing_price_file_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml"):
        PriceTable.load(tmp_path / "nope.toml")


@pytest.mark.parametrize("field", ['startup_s = "five minutes"', 'actor_cores = "many"'])
def test_non_numeric_server_field_raises_config_error(tmp_path, field):
    path = tmp_path / "broken.toml"
    # in [server_cluster]: in place of its start-up, or next to it
    kept = "" if field.startswith("startup_s") else "startup_s = 0.0\n"
    path.write_text(USER_TABLE.replace("startup_s = 0.0\n", kept + field + "\n"))
    with pytest.raises(ConfigError, match="price table.*server_cluster|price table.*invalid literal"):
        PriceTable.load(path)


def test_binary_price_file_raises_config_error(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_bytes(b"\xff\xfe\x00binary\x80\x81")
    with pytest.raises(ConfigError, match="price table"):
        PriceTable.load(path)


@pytest.mark.parametrize(("cut", "named"), [
    ("[learner_cpu]\nvcpu = 2.0\nmemory_gb = 2.0\n", r"missing section \[learner_cpu\]"),
    ("container_startup_s = 20.0\n", r"missing key 'container_startup_s' in \[aci\]"),
    ("startup_s = 0.0\n", r"missing key 'startup_s' in \[server_cluster\]"),
    ("actor_step_s = 0.001\n", r"missing key 'actor_step_s' in \[budget_prior\]"),
])
def test_a_price_file_without_the_new_rows_names_the_missing_key(tmp_path, cut, named):
    path = tmp_path / "old_prices.toml"
    path.write_text(USER_TABLE.replace(cut, ""))
    with pytest.raises(ConfigError, match=named):
        PriceTable.load(path)


def test_price_table_round_trips_through_plain_data_and_old_configurations_load(prices):
    import dataclasses
    import json

    raw = json.loads(json.dumps(dataclasses.asdict(prices)))
    assert PriceTable.from_dict(raw) == prices
    old = {k: v for k, v in raw.items() if k not in ("learner_cpu", "prior", "aci_startup_s")}
    assert PriceTable.from_dict(old) == prices  # a configuration stored before these rows


# -- the server cluster as a system: billed for its wall time ------------------------------

def test_the_cluster_price_is_split_into_its_learner_and_actor_vms(prices):
    assert prices.server_learner_per_s == pytest.approx(3.06 / 3600, rel=1e-12)
    assert prices.server_actors_per_s == pytest.approx(4 * 1.008 / 3600, rel=1e-12)
    assert prices.server_learner_per_s + prices.server_actors_per_s == pytest.approx(prices.server_per_s, rel=1e-12)
    assert "NC6s_v3" in prices.server_parts_source and "E16-8s_v5" in prices.server_parts_source
    assert prices.server_learner_cpu_per_s == pytest.approx(0.192 / 3600, rel=1e-12)
    assert "D4s_v5" in prices.server_parts_source


@pytest.mark.parametrize("wall_s", [0.0, 1.5, 60.0, 3600.0])
def test_a_cluster_round_bills_price_times_wall_and_its_parts_add_up(prices, wall_s):
    bill = bill_cluster_round(wall_s, "cuda", prices)
    assert bill.round_usd == pytest.approx(7.092 / 3600 * wall_s, rel=1e-12, abs=1e-15)
    assert bill.startup_usd == 0.0 and bill.projected_aci_startup_usd == 0.0
    assert bill.actors_usd + bill.learner_usd + bill.startup_usd == bill.round_usd
    assert bill.learner_usd == pytest.approx(3.06 / 3600 * wall_s, rel=1e-12, abs=1e-15)
    on_cpu = bill_cluster_round(wall_s, "cpu", prices)  # the learner VM of the device that ran it
    assert on_cpu.learner_usd == pytest.approx(0.192 / 3600 * wall_s, rel=1e-12, abs=1e-15)
    assert on_cpu.actors_usd == bill.actors_usd


def test_the_cluster_start_up_is_billed_once_when_asked(prices):
    walls = [2.0, 3.0, 4.5]
    bills = [bill_cluster_round(w, "cuda", prices, with_startup=k == 0) for k, w in enumerate(walls)]
    total = sum(b.round_usd for b in bills)
    assert total == pytest.approx((300.0 + sum(walls)) * 7.092 / 3600, rel=1e-12)
    assert total == pytest.approx(server_cluster_cost(sum(walls), prices, "cuda"), rel=1e-12)
    assert [b.startup_usd > 0 for b in bills] == [True, False, False]
    unasked = sum(bill_cluster_round(w, "cuda", prices).round_usd for w in walls)
    assert unasked == pytest.approx(server_cluster_cost(sum(walls), prices, "cuda", with_startup=False), rel=1e-12)
    assert {b.learner_device for b in bills} == {"cuda"}


def test_cluster_parts_that_do_not_add_up_to_its_price_are_refused(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text(USER_TABLE.replace("learner_vm_per_hour = 1.6", "learner_vm_per_hour = 2.0"))
    with pytest.raises(ConfigError, match="must equal price_per_hour"):
        PriceTable.load(path)
    path.write_text(USER_TABLE.replace("actor_vms = 2\n", ""))
    with pytest.raises(ConfigError, match=r"missing key 'actor_vms' in \[server_cluster\]"):
        PriceTable.load(path)

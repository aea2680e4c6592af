"""The learned scheduler (models/scheduling/learned.py): spec, trace, resume, checkpoints and their safety."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch

from models.errors import ConfigError
from models.run.workload import Workload
from models.scheduling.agent import Episode, SchedulerAgent
from models.scheduling.features import RoundState, StateNormaliser
from models.scheduling.learned import (
    FORMAT,
    VERSION,
    LearnedScheduler,
    load_scheduler,
    make_learned_scheduler,
    resolve_checkpoint,
    save_scheduler,
    shipped_checkpoint,
)
from models.scheduling.learned_spec import LearnedSpec, is_learned_spec, is_mlflow_uri, parse_learned_spec
from models.scheduling.provenance import SchedulerProvenance, SchedulerTrainingRun
from models.scheduling.schedulers import make_scheduler
from tests.scheduler_fixtures import SyntheticRounds, some_states, train_on, trained_session

# -- the scheduler, its trace and its checkpoints ------------------------------------------------

def test_actions_are_in_range_and_the_trace_is_json_and_pickle_friendly():
    agent = SchedulerAgent(5, seed=1)
    sched = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=2)
    chosen = [sched.choose(s) for s in some_states()]
    assert all(1 <= i <= 5 for i in chosen)
    assert len(set(chosen)) > 1  # an untrained policy is close to uniform
    trace = sched.trace()
    assert [s.actors for s in trace.steps] == chosen
    assert [s.action + 1 for s in trace.steps] == chosen
    assert all(len(s.obs) == 7 and s.logp <= 0 for s in trace.steps)
    assert trace.i_max == 5 and trace.target_return == 475.0
    # the run checkpoint holds the decisions as plain data
    state = json.loads(json.dumps(sched.state_dict()["steps"]))
    assert [s["actors"] for s in state] == chosen


def test_checkpoint_round_trip_gives_identical_actions(tmp_path):
    model = SyntheticRounds()
    agent = train_on(model, episodes=16, seed=3)
    provenance = SchedulerProvenance([trained_session("synthetic", episodes=16)], episodes_done=16, updates=2)
    path = save_scheduler(tmp_path / "s.pt", agent, meta=provenance)
    loaded, norm_config, meta = load_scheduler(path)
    assert meta == provenance and meta.trained_on[0].workload.env == "synthetic"
    assert loaded.updates == agent.updates == 2
    obs = np.random.default_rng(0).uniform(-1, 1.5, size=(64, 7)).astype(np.float32)
    np.testing.assert_array_equal(agent.probabilities(obs), loaded.probabilities(obs))
    for mode in ("greedy", "sample"):
        runs = []
        for a in (agent, loaded):
            sched = LearnedScheduler(a, StateNormaliser(475.0, 60, 0.05, norm_config), mode=mode, seed=7)
            runs.append([sched.choose(s) for s in some_states()])
        assert runs[0] == runs[1], mode
    # Optimiser state travels too: one more identical update gives identical weights.
    episode = Episode.from_trace(*_one_episode(model, agent))
    agent.update([episode])
    loaded.update([episode])
    for p, q in zip(agent.policy.parameters(), loaded.policy.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def _one_episode(model: SyntheticRounds, agent: SchedulerAgent):
    sched = LearnedScheduler(agent, model.normaliser(), mode="sample", seed=11)
    outcome = model.run(sched)
    return sched.trace(), model.rewards(outcome)


def test_scheduler_state_dict_resumes_a_run_exactly():
    agent = SchedulerAgent(8, seed=0)
    states = some_states(10)
    whole = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=5)
    expected = [whole.choose(s) for s in states]
    first = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05), mode="sample", seed=5)
    head = [first.choose(s) for s in states[:4]]
    saved = pickle.loads(pickle.dumps(first.state_dict()))
    resumed = LearnedScheduler(SchedulerAgent(8, seed=99), StateNormaliser(475.0, 60, 0.05), mode="sample", seed=0)
    resumed.load_state_dict(saved)
    assert head + [resumed.choose(s) for s in states[4:]] == expected
    assert resumed.trace().steps == whole.trace().steps


# -- the spec string -----------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "ref", "mode"), [
    ("learned", "", "greedy"),
    ("learned:sample", "", "sample"),
    ("learned:/tmp/My Sched.pt", "/tmp/My Sched.pt", "greedy"),
    ("learned:/tmp/A.pt:sample", "/tmp/A.pt", "sample"),
    ("learned:runs:/abc123/scheduler/scheduler.pt", "runs:/abc123/scheduler/scheduler.pt", "greedy"),
    ("learned:runs:/abc/scheduler/scheduler.pt:SAMPLE", "runs:/abc/scheduler/scheduler.pt", "sample"),
    ("  learned:cartpole:greedy ", "cartpole", "greedy"),
])
def test_parse_learned_spec(spec, ref, mode):
    assert parse_learned_spec(spec) == LearnedSpec(ref, mode)
    assert is_learned_spec(spec)
    assert parse_learned_spec(str(parse_learned_spec(spec))) == parse_learned_spec(spec)  # round trip


@pytest.mark.parametrize("spec", ["fixed:3", "learnedx", "", "  ", "max", "learned:/a.pt:",
                                  "learned: :sample"])
def test_bad_learned_specs_raise_a_config_error_naming_the_spec(spec):
    with pytest.raises(ConfigError) as info:
        parse_learned_spec(spec)
    assert repr(spec) in str(info.value)


def test_learned_spec_checks_its_mode_and_names_its_source():
    with pytest.raises(ConfigError, match="mode"):
        LearnedSpec("a.pt", "fast")
    assert LearnedSpec().source == "cartpole-v9" and LearnedSpec("/x.pt").source == "/x.pt"
    assert not is_learned_spec(None) and not is_learned_spec("adapt") and is_learned_spec("LEARNED")


def test_make_scheduler_learned_by_path(tmp_path):
    path = save_scheduler(tmp_path / "Mixed Case" / "Sched.pt", SchedulerAgent(4, seed=0))
    greedy = make_scheduler(f"learned:{path}", 4, 20, 475.0, budget_usd=0.05, seed=1)
    assert isinstance(greedy, LearnedScheduler) and greedy.mode == "greedy" and greedy.name == "learned"
    sample = make_scheduler(f"learned:{path}:sample", 4, 20, 475.0, budget_usd=0.05, seed=1)
    assert sample.mode == "sample"
    assert sample.normaliser.budget_usd == 0.05 and sample.normaliser.max_rounds == 20
    with pytest.raises(ConfigError, match="i_max=4"):
        make_scheduler(f"learned:{path}", 32, 20, 475.0)
    with pytest.raises(ConfigError, match="no scheduler checkpoint"):
        make_learned_scheduler(f"learned:{tmp_path / 'missing.pt'}", 4, 20, 475.0)
    not_ours = tmp_path / "other.pt"
    torch.save({"weights": 1}, not_ours)
    with pytest.raises(ConfigError, match="not a scheduler checkpoint"):
        make_scheduler(f"learned:{not_ours}", 4, 20, 475.0)


@pytest.mark.parametrize(("ref", "expected"), [
    ("runs:/abc/scheduler/scheduler.pt", True), ("models:/sched/1", True),
    ("mlflow-artifacts:/1/abc/artifacts/scheduler.pt", True), ("http://host/x.pt", True),
    ("file:///tmp/x.pt", False), ("/tmp/runs/x.pt", False), ("cartpole", False), ("", False),
])
def test_is_mlflow_uri(ref, expected):
    assert is_mlflow_uri(ref) is expected


def test_models_resolve_only_local_checkpoints(tmp_path):
    """Which MLflow store a URI names is the run's business (flows/train.py downloads it from
    train's tracking_uri); models/ refuses rather than guessing one from the environment."""
    path = save_scheduler(tmp_path / "a b" / "s.pt", SchedulerAgent(4, seed=0))
    assert resolve_checkpoint(str(path)) == path
    assert resolve_checkpoint(path.as_uri()) == path  # file:// is local
    assert resolve_checkpoint("") == resolve_checkpoint("cartpole-v9") == shipped_checkpoint()
    assert resolve_checkpoint("cartpole") == shipped_checkpoint("cartpole") != shipped_checkpoint()
    with pytest.raises(ConfigError, match="MLflow URI"):
        make_scheduler("learned:runs:/abc/scheduler/scheduler.pt", 4, 20, 475.0)


def test_models_never_import_mlflow():
    import ast
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[1] / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "mlflow" for n in names), f"{path.name} imports mlflow"


def test_the_packaged_scheduler_loads():
    sched = make_scheduler("learned", 32, 60, 475.0, budget_usd=0.05)
    assert isinstance(sched, LearnedScheduler)
    _, _, meta = load_scheduler(shipped_checkpoint())
    assert meta.trained_on, "the packaged scheduler must say how it was trained"
    assert 1 <= sched.choose(RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05)) <= 32


# -- the packaged scheduler: the same decisions after its conversion to checkpoint version 2 --------

def probe_states() -> list[RoundState]:
    rng = np.random.default_rng(0)
    return [RoundState(0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.05)] + [
        RoundState(k, float(rng.normal()), float(rng.uniform(0, 500)), float(rng.uniform(0, .05)),
                   float(rng.uniform(.05, 1)), float(rng.uniform(.05, 1)), float(rng.uniform(0, .05)))
        for k in range(1, 12)]


# Recorded from the version-1 (pickled) models/data/schedulers/cartpole.pt before its conversion.
CARTPOLE_GREEDY = [9] * 12
CARTPOLE_ARGMAX = [4, 8, 20, 8, 8, 8, 19, 7, 13, 4, 8, 8, 8, 8, 8, 4, 8, 8, 8, 8, 4, 8, 8, 8, 8, 8, 8, 8, 8,
                   8, 8, 7, 8, 8, 8, 8, 8, 8, 26, 8, 8, 7, 8, 8, 8, 4, 8, 8, 8, 8, 8, 8, 23, 8, 8, 8, 8, 8, 8,
                   8, 8, 8, 8, 8]
CARTPOLE_VALUES = [-1.2664217717638375, -1.214323509914594, -0.2031916698858739, -1.3588240194121748,
                   -0.8920053318440063, -0.8590749824972824, -0.8259458451931868, -0.054509283924301655,
                   -0.8437911377397117, 0.003318490171294819, -0.9313247988458697, -1.1366763733051541]


def test_the_packaged_scheduler_decides_as_before_its_conversion():
    agent, norm_config, meta = load_scheduler(shipped_checkpoint("cartpole"))
    sched = LearnedScheduler(agent, StateNormaliser(475.0, 60, 0.05, norm_config), mode="greedy")
    assert [sched.choose(s) for s in probe_states()] == CARTPOLE_GREEDY
    # float32 forward passes: the last bits differ between CPUs (AMD and Intel machines of one kind)
    np.testing.assert_allclose([s.value for s in sched.trace().steps], CARTPOLE_VALUES, rtol=1e-5)
    obs = np.random.default_rng(0).uniform(-1, 1.5, size=(64, 7)).astype(np.float32)
    assert agent.probabilities(obs).argmax(-1).tolist() == CARTPOLE_ARGMAX
    assert (agent.i_max, agent.updates, agent.episodes_seen) == (32, 15, 60)
    assert meta.trained_on[0].env == "CartPole-v1" and meta.trained_on[0].cost_weight == 0.0  # stored without it


def test_the_packaged_checkpoint_is_plain_tensors_and_json():
    payload = torch.load(shipped_checkpoint("cartpole"), map_location="cpu", weights_only=True)
    assert (payload["format"], payload["version"]) == (FORMAT, VERSION)
    assert json.loads(json.dumps(payload["header"])) == payload["header"]


# -- checkpoints that cannot run code -----------------------------------------------------------------

class Planted:
    """Writes a marker file when unpickled: what a malicious checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["pickle", "torch"])
def test_a_planted_pickle_is_refused_without_running_it(tmp_path, writer):
    marker, path = tmp_path / "pwned", tmp_path / "evil.pt"
    payload = {"format": FORMAT, "version": VERSION, "header": Planted(marker)}
    with path.open("wb") as f:
        if writer == "pickle":
            pickle.dump(payload, f)
        else:
            torch.save(payload, f)
    for load in (lambda: load_scheduler(path), lambda: make_scheduler(f"learned:{path}", 4, 20, 475.0)):
        with pytest.raises(ConfigError, match="not a scheduler checkpoint") as info:
            load()
        assert str(path) in str(info.value)
        assert not marker.exists()


def test_a_version_one_checkpoint_is_refused(tmp_path):
    """Version 1 was a pickle with numpy scalars: it needs weights_only=False, so it is not read."""
    path = tmp_path / "v1.pt"
    torch.save({"format": "minionsrl.scheduler/1", "agent": {"scale": {"mean": np.float64(1.0)}}}, path)
    with pytest.raises(ConfigError, match=f"{path}.*not a scheduler checkpoint"):
        load_scheduler(path)


def _tampered(tmp_path, change) -> str:
    path = save_scheduler(tmp_path / "s.pt", SchedulerAgent(4, seed=0))
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)
    with pytest.raises(ConfigError) as info:
        load_scheduler(path)
    assert str(path) in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(("change", "says"), [
    (lambda p: p.update(version=3), "version 3"),
    (lambda p: p.update(format="something else"), "format"),
    (lambda p: p["header"].pop("meta"), "header"),
    (lambda p: p["header"].update(features=["a"]), "features"),
    (lambda p: p["header"].update(i_max=0), "i_max"),
    (lambda p: p["header"]["scale"].update(var=float("nan")), "scale"),
    (lambda p: p["header"]["agent_config"].update(beta=2.0), "beta"),
    (lambda p: p["header"]["agent_config"].update(lr=1.0), "lr"),
    (lambda p: p["header"]["normaliser"].update(bogus=1.0), "bogus"),
    (lambda p: p["header"]["meta"].update(bogus=1.0), "bogus"),
    (lambda p: p["header"]["meta"].update(trained_on=[{"env": "CartPole-v1"}]), "trained_on entry"),
    (lambda p: p["header"]["meta"].update(progress={"episodes": 3}), "progress"),
    (lambda p: p["policy"].pop("0.weight"), "0.weight"),
    (lambda p: p["value"].update({"0.weight": torch.zeros(3, 3)}), "size"),
    (lambda p: p.update(policy=[1, 2]), "policy"),
])
def test_a_checkpoint_off_its_schema_is_refused_naming_the_file(tmp_path, change, says):
    assert says in _tampered(tmp_path, change)


def test_the_provenance_must_be_json(tmp_path):
    workload = Workload(env="CartPole-v1", ppo={"when": object()})
    session = SchedulerTrainingRun("CartPole-v1", "run", 0, "scratch", workload, beta=0.1, batch_episodes=1)
    with pytest.raises(ConfigError, match="JSON"):
        save_scheduler(tmp_path / "s.pt", SchedulerAgent(4, seed=0), meta=SchedulerProvenance([session]))


def test_fine_tuning_with_a_new_learning_rate_drops_the_optimiser_state(tmp_path):
    agent = train_on(SyntheticRounds(), episodes=8, seed=0)
    path = save_scheduler(tmp_path / "s.pt", agent)
    kept = load_scheduler(path).agent
    assert kept.optimizer.state_dict()["state"]
    fresh = load_scheduler(path, {"learning_rate": 5e-3}).agent
    assert fresh.config.learning_rate == 5e-3 and not fresh.optimizer.state_dict()["state"]


@pytest.mark.parametrize(("spec", "name"), [
    ("learned", "learned-cartpole-v9"), ("learned:cartpole:sample", "learned-cartpole-sample"),
    ("learned:/work/checkpoints/schedulers/ef37/scheduler.pt:sample", "learned-scheduler-sample"),
    ("learned:runs:/0123abcd/scheduler/scheduler.pt", "learned-scheduler"),
])
def test_a_learned_spec_has_a_short_name_for_run_names(spec, name):
    assert parse_learned_spec(spec).short_name == name


def test_packaged_schedulers_load_by_name_and_an_unknown_name_lists_them(tmp_path, monkeypatch):
    from models.scheduling.learned import packaged_names

    assert "cartpole" in packaged_names()
    assert resolve_checkpoint("cartpole").name == "cartpole.pt"
    with pytest.raises(ConfigError, match=r"no packaged scheduler named 'hoppr' \(packaged: .*cartpole"):
        resolve_checkpoint("hoppr")
    monkeypatch.chdir(tmp_path)  # a file of that name in the working directory is a path, not a name
    (tmp_path / "hoppr").write_bytes(shipped_checkpoint().read_bytes())
    assert resolve_checkpoint("hoppr").name == "hoppr" and resolve_checkpoint("hoppr") != shipped_checkpoint()


def test_every_packaged_scheduler_loads_safely_and_has_its_card():
    from models.scheduling.learned import packaged_names

    for name in packaged_names():
        path = shipped_checkpoint(name)
        agent, _, meta = load_scheduler(path)  # weights_only, schema-checked
        assert agent.i_max == 32
        # named for the workload it was trained for last; `-scratch` ones (a snapshot: -scratch-<episodes>)
        # only ever trained on that workload, in one or more sittings, and never saw CartPole
        assert meta.trained_on[-1].env.lower().startswith(name.split("-")[0]), name
        if "-scratch" in name:
            assert meta.trained_on[0].mode == "scratch", name
            assert all(s.env == meta.trained_on[0].env != "CartPole-v1" for s in meta.trained_on), name
        else:
            assert meta.trained_on[0].env == "CartPole-v1", name
        card = path.with_suffix(".md") if name != "cartpole" else path.with_name("README.md")
        assert card.exists(), f"{name}: no card next to the checkpoint"
    agent, _, meta = load_scheduler(resolve_checkpoint("cartpole-v2"))
    assert (agent.updates, agent.episodes_seen, meta.trained_on[0].episodes) == (25, 100, 100)
    assert meta.trained_on[0].workload == Workload(env="CartPole-v1", i_max=32, target_return=475.0)


def greedy_over_progress(name: str, returns=(25.0, 80.0, 140.0, 300.0, 380.0, 460.0)) -> list[int]:
    """The packaged scheduler's greedy count at round k with R_k in `returns`, after a first round
    of R = 22 (the features scale returns by the first one seen); actor and learner times fixed."""
    agent, norm_config, _ = load_scheduler(resolve_checkpoint(name))
    counts = []
    for k, ret in enumerate(returns, start=2):
        normaliser = StateNormaliser(475.0, 60, 0.05, norm_config)
        normaliser(RoundState(0, 0.1, math.nan, 0.0, 0.0, 0.0, 0.05))
        normaliser(RoundState(1, 0.1, 22.0, 0.01, 0.2, 0.1, 0.0499))
        obs = normaliser(RoundState(k, 0.1, ret, 0.01, 0.2, 0.1, 0.049))
        counts.append(int(np.argmax(agent.probabilities(obs))) + 1)
    return counts


def test_the_two_phase_cartpole_scheduler_comes_down_with_progress():
    """cartpole-v9 (lambda 1, 300 episodes): 8 actors while R_k is low, 1 from about 45% of J."""
    assert greedy_over_progress("cartpole-v9") == [8, 8, 8, 1, 1, 1]
    assert greedy_over_progress("cartpole-v3") == [1] * 6  # the constant it replaces on time
    assert greedy_over_progress("") == greedy_over_progress("cartpole-v9")  # what `learned` alone runs

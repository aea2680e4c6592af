"""Same seeds, same results: per-round returns and env steps of fixed reference runs.

Records (or checks against a recording) the per-round mean return R_k and env steps of:
- CartPole-v1, Fixed(8), seeds 0, 1, 2, to J = 475;
- Hopper-v5, Fixed(8), seed 0, its first 6 rounds;
- IMPACT's learner on CartPole-v1 and Hopper-v5 (normalising), stepped synchronously: its losses.

A restructuring that claims "behaviour unchanged" must reproduce the recording exactly (floats
compared as their repr). The proof holds on one machine: float-level differences between
machines of the same kind can make curves diverge, so record again on a new machine first.

    .venv/bin/python -m benchmarks.reference_returns --record benchmarks/results/reference_returns.json
    .venv/bin/python -m benchmarks.reference_returns --check benchmarks/results/reference_returns.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

RUNS = (
    {"env": "CartPole-v1", "scheduler": "fixed:8", "seed": 0},
    {"env": "CartPole-v1", "scheduler": "fixed:8", "seed": 1},
    {"env": "CartPole-v1", "scheduler": "fixed:8", "seed": 2},
    {"env": "Hopper-v5", "scheduler": "fixed:8", "seed": 0, "max_rounds": 6},
)


def run_reference(runs=RUNS) -> list[dict]:
    from deployments.local_api import prefect_api
    from flows.train import train

    out = []
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        for spec in runs:
            summary = train(**spec, tracking_uri=f"sqlite:///{tmp}/mlflow.db",
                            checkpoint_dir=f"{tmp}/checkpoints")
            rounds = summary_rounds(summary)
            out.append({"run": spec, "returns": [repr(r) for r, _ in rounds],
                        "env_steps": [s for _, s in rounds]})
            print(f"{spec}: {len(rounds)} rounds, last return {rounds[-1][0]:.2f}", flush=True)
    return out


IMPACT_RUNS = (
    {"env": "CartPole-v1", "seed": 0, "steps": 20},
    {"env": "Hopper-v5", "seed": 0, "steps": 10, "impact": {"normalize_obs": True, "normalize_reward": True}},
)
"""IMPACT's learner, stepped synchronously (no actor processes, so no timing enters): each step
first adds one fragment sampled with the learner's current weights by actor (step % actors)."""


def run_impact_reference(runs=IMPACT_RUNS) -> list[dict]:
    from models.envs.batch import EnvBatch, env_spaces
    from models.impact.buffer import ImpactFragment
    from models.impact.config import resolve_impact_config
    from models.impact.learner import ImpactLearner
    from models.rl.policy import ActorCritic
    from models.rl.rollout import sample_fragment
    from models.run.workload import Workload

    out = []
    for spec in runs:
        cfg = resolve_impact_config(Workload(env=spec["env"], impact=spec.get("impact")), seed=spec["seed"],
                                    tracking_uri="sqlite:///unused.db")
        learner = ImpactLearner(env_spaces(cfg.env_id), cfg.impact, seed=cfg.seed, device="cpu")
        actor = ActorCritic(env_spaces(cfg.env_id), cfg.impact.hidden, init_weights=False)
        envs = [EnvBatch(cfg.env_id, cfg.impact.envs_per_actor, 1000 * spec["seed"] + i)
                for i in range(cfg.impact.actors)]
        losses = []
        for step in range(spec["steps"]):
            i = step % cfg.impact.actors
            actor.load_state_dict(learner.policy.state_dict())
            batch = sample_fragment(actor.sampler(step), envs[i], cfg.impact.steps_per_env, learner.norm_state())
            learner.add(ImpactFragment(batch, learner.version, i))
            if len(learner.buffer) >= cfg.impact.batch_fragments:
                losses.append(repr(learner.step()["train/loss"]))
        out.append({"impact": spec, "losses": losses})
        print(f"impact {spec}: {len(losses)} learner steps, last loss {losses[-1] if losses else None}", flush=True)
    return out


def summary_rounds(summary) -> list[tuple[float, int]]:
    """(R_k, env steps) per round of a train summary."""
    return [(float(h.mean_return), int(h.env_steps)) for h in summary.history]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", type=Path)
    group.add_argument("--check", type=Path)
    args = parser.parse_args(argv)
    results = run_reference() + run_impact_reference()
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(results, indent=1) + "\n")
        print(f"recorded {args.record}")
        return 0
    expected = json.loads(args.check.read_text())
    same = True
    for want, got in zip(expected, results, strict=True):
        ok = want == got
        same &= ok
        print(f"{'same' if ok else 'DIFFERENT'}: {got.get('run', got.get('impact'))}")
        if not ok:
            key = "returns" if "returns" in got else "losses"
            for k, (a, b) in enumerate(zip(want.get(key, []), got[key], strict=False)):
                if a != b:
                    print(f"  first difference at round {k}: {a} -> {b}")
                    break
            if want.get("env_steps") != got.get("env_steps"):
                print(f"  env steps {want.get('env_steps')} -> {got.get('env_steps')}")
    print("behaviour unchanged" if same else "behaviour CHANGED")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

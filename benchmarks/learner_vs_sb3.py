"""Same data, same weights: does our PPO learner compute what SB3's PPO does? (issue 17)

SB3's PPO with CleanRL's settings (benchmarks/mujoco_vs_sb3.py's `cleanrl` peer) collects one
rollout of 2048 steps on Hopper-v5 its own way. Our ActorCritic gets SB3's initial weights, and
the rollout goes to our Learner as one RolloutBatch (SB3 has already added the bootstrap of
time-limit truncations to the rewards, so ours sees them as rewards and episode ends as
terminations). Printed, as maximum absolute differences:

1. V(obs) and log pi(a|obs) of the stored data (the networks match);
2. advantages and returns (our GAE against SB3's RolloutBuffer);
3. with full-batch minibatches (--minibatch 2048), the weights after --epochs epochs of both
   updates, ours with `vloss_form = "clipped"` (SB3's value loss; `--vloss-form max`, CleanRL's,
   shows the size of a real difference). A full batch makes the
   result independent of the two libraries' different shuffles.

    .venv/bin/python -m benchmarks.learner_vs_sb3 --epochs 10
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from models.envs.batch import env_spaces
from models.rl.ppo import Learner
from models.rl.rollout import RolloutBatch
from models.run.config import PPOConfig


def copy_mlp(dst: torch.nn.Sequential, hidden: torch.nn.Sequential, out: torch.nn.Linear) -> None:
    src = [m for m in hidden if isinstance(m, torch.nn.Linear)] + [out]
    mine = [m for m in dst if isinstance(m, torch.nn.Linear)]
    for d, s in zip(mine, src, strict=True):
        d.weight.data.copy_(s.weight.data)
        d.bias.data.copy_(s.bias.data)


def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in params])


def main(argv: list[str] | None = None) -> None:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import configure_logger

    from benchmarks.mujoco_vs_sb3 import sb3_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--minibatch", type=int, default=2048)
    parser.add_argument("--vloss-form", default="clipped", choices=("clipped", "max"),
                        help="ours; 'max' (CleanRL's) shows what a real difference looks like")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    model, _ = sb3_model("cleanrl", args.env, args.seed, 1_000_000)
    model.batch_size, model.n_epochs = args.minibatch, args.epochs
    model._setup_learn(model.n_steps, callback=None)
    model.set_logger(configure_logger(0, None, "", False))

    class Nothing(BaseCallback):
        def _on_step(self) -> bool:
            return True

    callback = Nothing()
    callback.init_callback(model)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
    buf = model.rollout_buffer
    steps = buf.buffer_size

    cfg = PPOConfig(learning_rate=3e-4, anneal_lr=False, gamma=0.99, gae_lambda=0.95, update_epochs=args.epochs,
                    minibatch_size=args.minibatch, clip_coef=0.2, clip_vloss=True, vloss_form=args.vloss_form,
                    vf_coef=0.5, ent_coef=0.0, max_grad_norm=0.5, normalize_obs=False, normalize_reward=False)
    learner = Learner(env_spaces(args.env), cfg, seed=args.seed)
    ours, theirs = learner.policy, model.policy
    copy_mlp(ours.actor, theirs.mlp_extractor.policy_net, theirs.action_net)
    copy_mlp(ours.critic, theirs.mlp_extractor.value_net, theirs.value_net)
    ours.log_std.data.copy_(theirs.log_std.data)

    obs = torch.as_tensor(buf.observations.reshape(steps, -1), dtype=torch.float32)
    actions = torch.as_tensor(buf.actions.reshape(steps, -1), dtype=torch.float32)
    with torch.no_grad():
        logp, _, values = ours.evaluate(obs, actions)
    print(f"V(obs): {float((values - torch.as_tensor(buf.values[:, 0])).abs().max()):.2e}   "
          f"log-prob: {float((logp - torch.as_tensor(buf.log_probs[:, 0])).abs().max()):.2e}")

    starts = buf.episode_starts[:, 0].astype(bool)
    terminated = np.zeros((steps, 1), dtype=bool)
    terminated[:-1, 0] = starts[1:]
    terminated[-1, 0] = bool(model._last_episode_starts[0])
    batch = RolloutBatch(obs=buf.observations.astype(np.float32), actions=buf.actions.astype(np.float32),
                         logp=buf.log_probs.astype(np.float32), rewards=buf.rewards.astype(np.float32),
                         terminated=terminated, truncated=np.zeros((steps, 1), dtype=bool),
                         trunc_index=np.zeros((0, 2), dtype=np.int64),
                         trunc_obs=np.zeros((0, buf.observations.shape[-1]), dtype=np.float32),
                         last_obs=model._last_obs.astype(np.float32), episode_returns=[], episode_lengths=[])
    data = learner.prepare([batch])
    print(f"advantages: {float((data.advantages - torch.as_tensor(buf.advantages[:, 0])).abs().max()):.2e}   "
          f"returns: {float((data.returns - torch.as_tensor(buf.returns[:, 0])).abs().max()):.2e}   "
          f"(mean |advantage| {float(data.advantages.abs().mean()):.3f})")
    if args.minibatch != steps:
        print("weights after the update: not compared (minibatches differ by the libraries' shuffles)")
        return
    before = flat(ours.parameters())
    learner.update([batch])
    model.train()
    actor_diff = flat(ours.actor.parameters()) - flat([*theirs.mlp_extractor.policy_net.parameters(),
                                                       *theirs.action_net.parameters()])
    critic_diff = flat(ours.critic.parameters()) - flat([*theirs.mlp_extractor.value_net.parameters(),
                                                         *theirs.value_net.parameters()])
    moved = float((flat(ours.parameters()) - before).abs().max())
    print(f"after {args.epochs} full-batch epochs: actor {float(actor_diff.abs().max()):.2e}   critic "
          f"{float(critic_diff.abs().max()):.2e}   log-std {float((ours.log_std - theirs.log_std).detach().abs().max()):.2e}   "
          f"(largest weight change {moved:.2e})")


if __name__ == "__main__":
    main()

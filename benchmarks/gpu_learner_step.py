"""Learner milliseconds per PPO update step for the Nature CNN (run on a machine with a GPU).

    python -m benchmarks.gpu_learner_step --batch 256 --steps 50

Prints the device, and the median time of one minibatch step (forward, PPO loss, backward,
grad clip, Adam) on (batch, 4, 84, 84) uint8 frames, after warm-up. Falls back to the CPU
(one thread) when no CUDA device is present, and says so.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from models.envs.batch import EnvSpaces
from models.rl.ppo import Learner, LossCoefficients, ppo_loss
from models.run.config import PPOConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    spaces = EnvSpaces((4, 84, 84), np.dtype(np.uint8), True, 18)
    learner = Learner(spaces, PPOConfig(), seed=0)
    dev = learner.device
    print(f"device: {dev} ({torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'CPU, 1 thread'})")
    obs = torch.randint(0, 256, (args.batch, 4, 84, 84), dtype=torch.uint8, device=dev)
    actions = torch.randint(0, 18, (args.batch,), device=dev)
    old_logp = torch.full((args.batch,), -np.log(18.0), device=dev)
    adv, ret, old_v = (torch.randn(args.batch, device=dev) for _ in range(3))
    times = []
    for i in range(args.steps + 5):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logp, ent, v = learner.policy.evaluate(obs, actions)
        out = ppo_loss(logp, old_logp, adv, v, old_v, ret, ent, LossCoefficients.from_config(learner.cfg))
        learner.flat.zero_grad()  # the learner's own step (models/rl/ppo.py Learner.update)
        out.loss.backward()
        learner.flat.clip_grad_norm_(learner.cfg.max_grad_norm)
        learner.optimizer.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    print(f"Nature CNN PPO step, batch {args.batch}: median {1000 * statistics.median(times):.2f} ms "
          f"over {args.steps} steps (min {1000 * min(times):.2f} ms)")


if __name__ == "__main__":
    main()

"""One always-on IMPACT actor: its envs and policy, built once, and the step every actor process
repeats: take the newest weights if they changed, sample a fragment with models/rl/rollout.py
`sample_fragment` (so returns and episode statistics are PPO's), time it.

Both of IMPACT's actor pools (tasks/impact/: local processes, Dask tasks) run this same loop body;
they differ only in how weights arrive (`ReadNewest`) and where fragments go.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch

from models.envs.batch import EnvBatch, env_spaces
from models.impact.config import ImpactConfig
from models.impact.learner import load_weights_vector
from models.rl.policy import ActorCritic
from models.rl.rollout import RolloutBatch, sample_fragment
from models.rl.timings import ActorTimings

ReadNewest = Callable[[int], tuple[int, np.ndarray | None, np.ndarray | None]]
"""Given the version an actor holds: (the newest version published, its weights and its packed
normaliser statistics, both None when the actor already holds it or nothing is published (-1))."""


def actor_seed(*parts: int) -> int:
    """A 31-bit seed from (run seed, actor slot, generation[, fragment count])."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0] & 0x7FFFFFFF)


class ImpactActor:
    """Actor slot `index` of generation `generation` (0 for the slot's first process, +1 for every
    replacement: newly seeded envs). Its first fragment carries its start-up in its timings."""

    def __init__(self, env_id: str, cfg: ImpactConfig, seed: int, index: int, generation: int,
                 booted_at: float | None = None):
        """booted_at: when its process was spawned (time.time()), so its start-up counts the
        interpreter and imports too; default now (only the envs and the policy)."""
        booted = time.time() if booted_at is None else booted_at
        torch.set_num_threads(1)
        self.cfg, self.seed, self.index, self.generation = cfg, seed, index, generation
        spaces = env_spaces(env_id)
        self.policy = ActorCritic(spaces, cfg.hidden, init_weights=False)
        self.envs = EnvBatch(env_id, cfg.envs_per_actor, actor_seed(seed, index, generation), lean=True)
        self.layout = cfg.norm_layout(spaces.obs_shape)
        self.held = -1
        """The version of the weights it samples with (-1: none yet)."""
        self.fragments = 0
        self._norm = None
        self._startup_s = time.time() - booted

    def sample(self, read_newest: ReadNewest) -> RolloutBatch | None:
        """One fragment sampled with the newest weights; None while nothing is published."""
        asked = time.time()
        newest, vector, norm_vector = read_newest(self.held)
        if newest < 0:
            return None
        if vector is not None:
            load_weights_vector(self.policy, vector)
            self._norm = self.layout.unpack(norm_vector[:self.layout.size]) if self.layout else None
            self.held = newest
        loaded = time.time()
        sampler = self.policy.sampler(actor_seed(self.seed, self.index, self.generation, self.fragments))
        batch = sample_fragment(sampler, self.envs, self.cfg.steps_per_env, self._norm)
        sampled = time.time()
        batch.actor_index = self.index
        batch.timings = ActorTimings(requested_at=asked, started_at=asked, startup_s=self._startup_s,
                                     weight_load_s=loaded - asked, sampling_s=sampled - loaded, sampled_at=sampled,
                                     sent_at=time.time(), worker_pid=os.getpid())
        self._startup_s = 0.0  # billed once, with the actor's first fragment
        self.fragments += 1
        return batch

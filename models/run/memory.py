"""Memory a run's sizes ask for, checked before anything is allocated: every size parameter against
what it can mean, with a ConfigError naming the key.

- a minibatch is drawn from one round's samples: at most i_max x fragment;
- one actor holds its process, its envs and its fragment's buffers: within the memory it is billed
  for (actor_memory_gb), as a container of that size would have to;
- the learner holds the largest round's batch with its advantages and its tensors: within half
  of this machine's memory (the other half for the actors, the servers and the system).

Figures measured on the 2-core machine (2026-12-04): an actor process with torch, gymnasium, MuJoCo
and ale-py loaded, 248 MiB resident; one more env, under 1.2 MiB (CartPole, Hopper, Humanoid,
Qbert). The estimates round those up.
"""

from __future__ import annotations

import math
import os

from models.envs.batch import EnvSpaces
from models.errors import ConfigError

GIB = 2**30
ACTOR_PROCESS_BYTES = 300 * 2**20
"""An actor process before its envs and fragment (measured 248 MiB resident)."""
ENV_BYTES = 2 * 2**20
"""One env (measured under 1.2 MiB)."""
LEARNER_SHARE_OF_MACHINE = 0.5
STEP_FIELDS = 8
"""Per-sample scalars beside observation and action in a batch: log-prob, reward, terminated,
truncated, value, advantage, return, next value (float32 or smaller each)."""


def step_bytes(spaces: EnvSpaces, normalized: bool) -> int:
    """One sample of a batch: its observation (float32 once normalised; Atari frames stay one byte
    a pixel, in the learner too), its action and the per-sample scalars."""
    obs_item = 4 if normalized and spaces.obs_dtype.itemsize != 1 else spaces.obs_dtype.itemsize
    action = 8 if spaces.discrete else 4 * spaces.n_actions
    return obs_item * math.prod(spaces.obs_shape) + action + 4 * STEP_FIELDS


def actor_bytes(spaces: EnvSpaces, fragment: int, envs_per_actor: int, normalized: bool) -> int:
    """What one actor holds: its process, its envs, its fragment (and as much again while sending it)."""
    return ACTOR_PROCESS_BYTES + envs_per_actor * ENV_BYTES + 2 * fragment * step_bytes(spaces, normalized)


def learner_bytes(spaces: EnvSpaces, samples: int, normalized: bool) -> int:
    """What the learner holds for a round of `samples`: the actors' batches, their concatenation and
    an epoch's shuffled copy (models/rl/ppo.py)."""
    return 3 * samples * step_bytes(spaces, normalized)


def machine_bytes() -> int:
    """This machine's memory (MemTotal)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_sizes(spaces: EnvSpaces, *, fragment: int, envs_per_actor: int, i_max: int, minibatch_size: int | None,
                actor_memory_gb: float, normalized: bool, prefix: str = "") -> None:
    """ConfigError, naming the key, when a size asks for memory a run cannot have (module docstring).
    prefix: where the keys live ("impact." for IMPACT's)."""
    samples = i_max * fragment
    if minibatch_size is not None and minibatch_size > samples:
        raise ConfigError(f"ppo.minibatch_size ({minibatch_size}) exceeds the samples of the largest round, i_max x "
                          f"fragment = {i_max} x {fragment} = {samples}: a minibatch is drawn from one round's samples")
    need = actor_bytes(spaces, fragment, envs_per_actor, normalized)
    if need > actor_memory_gb * GIB:
        key = f"{prefix}envs_per_actor" if envs_per_actor * ENV_BYTES > need / 2 else f"{prefix}fragment"
        raise ConfigError(f"{key}: an actor with fragment={fragment} and envs_per_actor={envs_per_actor} needs about "
                          f"{need / GIB:.2f} GB, more than the {actor_memory_gb:g} GB it is billed for "
                          f"(actor_memory_gb): lower {key}, or raise actor_memory_gb")
    have = LEARNER_SHARE_OF_MACHINE * machine_bytes()
    need = learner_bytes(spaces, samples, normalized)
    if need > have:
        raise ConfigError(f"{prefix}fragment x i_max: the learner's batch of the largest round ({i_max} x {fragment} "
                          f"samples) needs about {need / GIB:.1f} GB, more than half of this machine's "
                          f"{2 * have / GIB:.1f} GB: lower fragment or i_max")

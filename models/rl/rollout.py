"""One actor's work: sample a fragment with given weights. Runs in any process; no Prefect here.

The typed `RolloutBatch` is the only contract between sampling and learning.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from models.envs.batch import EnvBatch, env_spaces
from models.envs.envpool_batch import ENVPOOL, EnvPoolBatch
from models.envs.snapshot import EnvSnapshot
from models.rl.normalization import NormDeltas, NormStats, ObservationNormalizer, RewardScaler
from models.rl.policy import ActorCritic, weights_from_bytes
from models.rl.timings import ActorTimings


@dataclass(frozen=True)
class ActorJob:
    """Everything an actor needs: which env, how many steps, which weights, which seed."""

    env_id: str
    round_index: int
    actor_index: int
    seed: int
    steps_per_env: int
    envs_per_actor: int
    hidden: tuple[int, ...]
    weights: bytes
    requested_at: float = 0.0  # wall clock when the flow asked for this actor
    norm: NormStats | None = None  # the learner's normaliser statistics (None: no normalising)
    carry_episodes: bool = False  # return the episodes in progress (MuJoCo: models/envs/snapshot.py)
    resume: tuple[EnvSnapshot, ...] = ()  # episodes to continue, one per env (empty: fresh resets)
    env_backend: str = "gymnasium"  # or envpool (models/envs/envpool_batch.py)


@dataclass
class RolloutBatch:
    """A fragment of experience from one actor, shaped [T, N, ...] (time, env)."""

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    trunc_index: np.ndarray  # [M, 2] (t, n) of truncated steps
    trunc_obs: np.ndarray  # [M, ...] final observation of each truncated episode
    last_obs: np.ndarray  # [N, ...] observation after the fragment, for bootstrapping
    episode_returns: list[float]
    episode_lengths: list[int]
    actor_index: int = 0
    timings: ActorTimings | None = None  # set by run_actor, completed by the backend
    norm_deltas: NormDeltas = NormDeltas()  # this fragment's own normaliser statistics
    carry: tuple[EnvSnapshot, ...] = ()  # each env's episode in progress at the end (carry_episodes)

    @property
    def steps(self) -> int:
        return int(self.rewards.size)


@functools.cache
def _policy_for(env_id: str, hidden: tuple[int, ...]) -> ActorCritic:
    # Built once per process: a warm worker keeps its module and only loads new weights, so
    # the (slow, for the CNN) weight initialisation is skipped.
    return ActorCritic(env_spaces(env_id), hidden, init_weights=False)


def run_actor(job: ActorJob) -> RolloutBatch:
    """Sample job.steps_per_env steps in each of job.envs_per_actor freshly seeded and reset
    environments (built in this job, or kept from this process's previous one)."""
    t_start = time.time()
    torch.set_num_threads(1)
    # reuse: a warm worker keeps its built envs for its next job; each job seeds and resets them.
    if job.env_backend == ENVPOOL:  # a pool per job (built in ~10 ms): its envs are seeded when built
        envs = EnvPoolBatch(job.env_id, job.envs_per_actor, job.seed * job.envs_per_actor, resume=job.resume)
    else:
        envs = EnvBatch(job.env_id, job.envs_per_actor, job.seed * job.envs_per_actor, reuse=True,
                        resume=job.resume, lean=True)
    try:
        policy = _policy_for(job.env_id, tuple(job.hidden))
        t_ready = time.time()
        weights_from_bytes(policy, job.weights)
        t_loaded = time.time()
        batch = sample_fragment(policy.sampler(job.seed), envs, job.steps_per_env, job.norm,
                                carry=job.carry_episodes)
    except BaseException:
        envs.close(broken=True)
        raise
    envs.close()
    t_sampled = time.time()
    batch.actor_index = job.actor_index
    batch.timings = ActorTimings(requested_at=job.requested_at or t_start, started_at=t_start,
                                 startup_s=t_ready - t_start, weight_load_s=t_loaded - t_ready,
                                 sampling_s=t_sampled - t_loaded, sampled_at=t_sampled)
    return batch


def sample_fragment(act: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], envs: EnvBatch,
                    steps: int, norm: NormStats | None = None, carry: bool = False) -> RolloutBatch:
    """The hot loop: preallocated buffers, one batched policy call per step.

    act maps a batch of observations to (actions, log-probs). With `norm`, observations are
    normalised (and rewards scaled) with the shipped statistics updated live, as the policy sees
    them; the fragment's own statistics come back in `norm_deltas` for the learner to merge.
    With `carry`, the episodes in progress at the end come back in `carry` (MuJoCo envs), for
    the next round's actor to continue (EnvBatch's `resume`).
    """
    n = envs.num_envs
    sp = envs.spaces
    obs_norm = rew_scale = None
    if norm is not None and norm.obs is not None:
        obs_norm = ObservationNormalizer(sp.obs_shape, norm.obs)
    if norm is not None and norm.reward is not None:
        rew_scale = RewardScaler(n, norm.gamma, norm.reward, returns=envs.resumed_reward_returns)
    obs_dtype = np.float32 if obs_norm else sp.obs_dtype
    obs_buf = np.empty((steps, n, *sp.obs_shape), dtype=obs_dtype)
    act_shape = () if sp.discrete else (sp.n_actions,)
    act_buf = np.empty((steps, n, *act_shape), dtype=np.int64 if sp.discrete else np.float32)
    logp_buf = np.empty((steps, n), dtype=np.float32)
    rew_buf = np.empty((steps, n), dtype=np.float32)
    term_buf = np.empty((steps, n), dtype=bool)
    trunc_buf = np.empty((steps, n), dtype=bool)
    trunc_index: list[tuple[int, int]] = []
    trunc_obs: list[np.ndarray] = []
    first_return = len(envs.completed_returns)

    # a continued episode's first observation was counted by the fragment that left it
    obs = obs_norm(envs.obs, update=not envs.resumed) if obs_norm else envs.obs
    for t in range(steps):
        obs_buf[t] = obs
        actions, logp = act(obs)
        act_buf[t] = actions
        logp_buf[t] = logp
        raw_obs, rewards, term_buf[t], trunc_buf[t], final_obs = envs.step(actions)
        rew_buf[t] = rew_scale(rewards, term_buf[t] | trunc_buf[t]) if rew_scale else rewards
        for i, last in final_obs.items():
            if trunc_buf[t, i] and not term_buf[t, i]:
                trunc_index.append((t, i))
                trunc_obs.append(obs_norm(last[None], update=False)[0] if obs_norm else last)
        obs = obs_norm(raw_obs) if obs_norm else raw_obs

    return RolloutBatch(
        obs=obs_buf,
        actions=act_buf,
        logp=logp_buf,
        rewards=rew_buf,
        terminated=term_buf,
        truncated=trunc_buf & ~term_buf,
        trunc_index=np.asarray(trunc_index, dtype=np.int64).reshape(-1, 2),
        trunc_obs=(np.stack(trunc_obs) if trunc_obs
                   else np.empty((0, *sp.obs_shape), dtype=obs_dtype)),
        last_obs=np.array(obs, copy=True),
        episode_returns=envs.completed_returns[first_return:],
        episode_lengths=envs.completed_lengths[first_return:],
        norm_deltas=NormDeltas(obs=obs_norm.delta.moments() if obs_norm else None,
                               reward=rew_scale.delta.moments() if rew_scale else None),
        carry=envs.snapshots(rew_scale.returns if rew_scale else None) if carry else (),
    )

"""V-trace off-policy targets and policy-gradient advantages (Espeholt et al., IMPALA, ICML 2018).

For a fragment sampled by a behaviour policy mu and judged by a target policy pi, with
rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)) and c_t = lambda * min(c_bar, pi/mu):

    delta_t = rho_t * (r_t + gamma * V(x_{t+1}) - V(x_t))
    v_t     = V(x_t) + delta_t + gamma * c_t * (v_{t+1} - V(x_{t+1}))
    A_t     = rho_t * (r_t + gamma * v_{t+1} - V(x_t))          (policy-gradient advantage)

Episode endings inside a fragment are handled like models/rl/gae.py's: a terminated step has no
successor (V = 0, and v_{t+1} = 0 in A_t); a truncated step's successor is the final
observation of its episode, bootstrapped with V(final obs) and no correction beyond it (the
trace is cut); the fragment's last step bootstraps from V(last obs). next_values is built with
models/rl/gae.py next_values_for, exactly as for GAE. One truncation level (rho_bar) serves the
value targets and the advantages, as RLlib's APPO does by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VTraceResult:
    """Arrays shaped [T, N] (float64)."""

    vs: np.ndarray
    """Value targets v_t."""
    advantages: np.ndarray
    """Policy-gradient advantages A_t."""
    rhos: np.ndarray
    """Unclipped importance weights pi/mu (for diagnostics)."""
    clipped_rhos: np.ndarray
    """min(rho_bar, pi/mu)."""


def vtrace(behaviour_logp: np.ndarray, target_logp: np.ndarray, rewards: np.ndarray,
           values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
           truncated: np.ndarray, gamma: float, rho_bar: float = 1.0, c_bar: float = 1.0,
           lambda_: float = 1.0) -> VTraceResult:
    """V-trace over [T, N] fragments (see the module docstring); all inputs shaped [T, N].

    next_values[t]: V of the observation after step t in the same episode (the next stored one,
    a truncated episode's final one, or the fragment's last one at t = T-1), as for compute_gae.
    """
    rhos = np.exp(np.asarray(target_logp, np.float64) - np.asarray(behaviour_logp, np.float64))
    clipped_rhos = np.minimum(rho_bar, rhos)
    cs = lambda_ * np.minimum(c_bar, rhos)
    rewards = np.asarray(rewards, np.float64)
    values = np.asarray(values, np.float64)
    not_term = 1.0 - np.asarray(terminated, np.float64)
    # The trace continues only when the next stored step belongs to the same episode.
    cont = 1.0 - np.logical_or(terminated, truncated).astype(np.float64)
    bootstrap = np.asarray(next_values, np.float64) * not_term  # V(x_{t+1}), 0 after termination
    deltas = clipped_rhos * (rewards + gamma * bootstrap - values)

    t_len = rewards.shape[0]
    vs_minus_v = np.zeros_like(values)
    acc = np.zeros(values.shape[1:], dtype=np.float64)
    for t in reversed(range(t_len)):
        acc = deltas[t] + gamma * cs[t] * cont[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v

    # v_{t+1} in the advantage: the next target inside the episode, else the bootstrap itself.
    vs_next = bootstrap.copy()
    vs_next[:-1] = np.where(cont[:-1] > 0, vs[1:], bootstrap[:-1])
    advantages = clipped_rhos * (rewards + gamma * vs_next - values)
    return VTraceResult(vs=vs, advantages=advantages, rhos=rhos, clipped_rhos=clipped_rhos)

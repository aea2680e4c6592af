"""How the servers the project starts run: each in a session of its own, so that a terminal's Ctrl-C
(SIGINT to the foreground process group) reaches only the training, which stops them in order; and
each ends with the process that started it, however that process ended."""

from __future__ import annotations

import ctypes
import functools
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn for subprocess.Popen: the child gets `sig` when its parent dies (Linux prctl;
    it fires when the *thread* that started the child ends, so start servers from the main thread)."""
    return functools.partial(_set_parent_death_signal, sig)


def _set_parent_death_signal(sig: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

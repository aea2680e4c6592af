"""How the servers the project starts run: each in a session of its own, so that a terminal's Ctrl-C
(SIGINT to the foreground process group) reaches only the training, which stops them in order; each
ends with the process that started it, however that process ended; and each can be interrupted,
whatever its starter ignores."""

from __future__ import annotations

import ctypes
import functools
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn for subprocess.Popen: the child gets `sig` when its parent dies (Linux prctl;
    it fires when the *thread* that started the child ends, so start servers from the main thread),
    and starts with SIGINT and SIGQUIT at their defaults."""
    return functools.partial(_prepare_child, sig)


def _prepare_child(sig: int) -> None:
    # A shell without job control (a script's `cmd &`, CI) starts background jobs with SIGINT and
    # SIGQUIT ignored, and exec keeps that. Prefect's worker stops on SIGTERM by sending itself
    # SIGINT: ignored, it ran on until kill_tree's 10 s grace ended in SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

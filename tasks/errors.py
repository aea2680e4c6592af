"""The one failure every actor backend raises. Pure Python: actor processes may import it."""

from __future__ import annotations


class ActorError(RuntimeError):
    """An actor crashed, was lost or ran past its timeout. billed_s: seconds it was billed."""

    def __init__(self, message: str, billed_s: float = 0.0, timed_out: bool = False):
        super().__init__(message)
        self.billed_s = billed_s
        self.timed_out = timed_out

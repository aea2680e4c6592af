"""The `work-pool` backend: every actor is its own flow run on a Prefect work pool.

    backend.py    WorkPoolBackend: run(job) and close(), composing the parts below
    protocol.py   what the backend and its actors (flows/actor.py) exchange in the storage
                  block: keys, job/result envelopes, markers; decoded without running code
    launcher.py   creates cold actor and warm server flow runs; cancels, crashes, settles them
    warm_pool.py  warm `actor-server` flow runs and their sizing (a pure function)
    monitor.py    one thread that polls the state of every watched flow run

deployments/README.md describes the deployments, pools and storage blocks this runs on.
"""

from tasks.workpool.backend import WorkPoolBackend
from tasks.workpool.launcher import SETTLE_MARGIN_S, settle_cancelling_later
from tasks.workpool.protocol import DEADLINE_GRACE_S

__all__ = ["DEADLINE_GRACE_S", "SETTLE_MARGIN_S", "WorkPoolBackend", "settle_cancelling_later"]

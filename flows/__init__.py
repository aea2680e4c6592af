"""The flows: `train` and its rounds, `impact`, scheduler training, the paper's experiments and the
work pool's actor flows. Thin: the logic they orchestrate is models/, its Prefect tasks tasks/.

Two environment defaults for Prefect's own temporary server (a flow called from Python with no
PREFECT_API_URL), set here so that they precede every import of Prefect by the flows: no analytics
calls offline, and time for a first database migration on a busy 2-core machine (20+ s).
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

"""Every change this project makes to Prefect's own code, in one place, each pinned to the Prefect
it was written for (3.9, pyproject.toml) and refused on any other with a message that says so.

Nothing is patched on import: the entry points call `install()` (the client patches, in every
process that runs flows: the CLIs and the flows' own bodies) and the project's own API server
calls `sqlite_server.install()`. A user's own Prefect server is never patched.

| patch | where | why | saves (measured, BENCHMARKS.md) |
|---|---|---|---|
| heartbeats | client | a sync flow's exit joins a heartbeat thread that sleeps in 1 s steps | 0-1 s at every flow exit |
| tls_context | client | every API client loads the whole CA bundle | ~25 ms per client; a subflow 147 -> 117 ms |
| lean_subflow | client | a subflow run is run with 8 API calls | 5 calls a round (8 -> 3) |
| quick_retry | client | a stock SQLite server's busy 503 is retried after ~2 s | see "Which Prefect server" |
| shared_task_runner | client | each round's task runner starts and joins its own threads | 30-60 ms a round; results_of ~18 ms a round |
| sqlite_server | our server | DEFERRED SQLite writes fail at once under the task-run recorder; the request limiter counts websockets | a 2.4 s retry per subflow; an API hung by 100+ websockets |
"""

from __future__ import annotations

WRITTEN_FOR = "3.9"
"""The Prefect minor version every patch here was read against and tested with."""


class PrefectVersionError(RuntimeError):
    """A patch met a Prefect it was not written for: it refuses rather than guess."""


def check_prefect(patch: str, shape_ok: bool = True, installed: str | None = None) -> None:
    """Refuse, naming the patch and both versions, when the installed Prefect is not the one the
    patch was written for, or when the code it replaces no longer has the shape it expects."""
    if installed is None:
        import prefect

        installed = prefect.__version__
    if not installed.startswith(f"{WRITTEN_FOR}.") or not shape_ok:
        what = ("is not" if not installed.startswith(f"{WRITTEN_FOR}.")
                else "has the version but not the code")
        raise PrefectVersionError(
            f"flows/prefect_patches/{patch}.py was written for prefect {WRITTEN_FOR}.x and the installed "
            f"prefect {installed} {what} it was written for: install the pinned one "
            f"(pip install 'prefect>={WRITTEN_FOR},<3.10', as pyproject.toml says), or read that module "
            "against the new Prefect before changing its pin")


def install() -> None:
    """The client patches, once per process (idempotent); every entry point calls this first."""
    from flows.prefect_patches import heartbeats, lean_subflow, quick_retry, tls_context

    heartbeats.install()
    tls_context.install()
    lean_subflow.install()
    quick_retry.install()

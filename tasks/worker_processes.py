"""How this machine's actor processes start: forked from a preloaded fork server.

A `spawn` worker is a new interpreter that imports torch, gymnasium and models/ and then
re-imports the parent's main module (multiprocessing runs it as `__mp_main__`): with
`python -m flows.train` as the main, that is Prefect and MLflow too. Measured on the 2-core
machine: 3.2-3.5 s until two workers are ready, and 0.9 s to close them, in every run.

The `forkserver` start method pays that once per parent process: the fork server imports the
modules below (and what the parent's main module imports), then forks each worker from itself. A worker is
still a fresh process with its own pid and memory (copy-on-write), and the fork server is
single-threaded, so forking it is safe beside Prefect's threads in the parent; it exits with
the parent. Workers forked from it leave with os._exit, without the interpreter's shut-down.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import types
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.context import BaseContext

# What every actor process needs before its first job, imported once in the fork server.
PRELOAD = ("torch", "gymnasium", "models.rl.rollout", "models.envs.batch", "models.rl.policy", "tasks.local_pool",
           # and what a run's plots need (run_aside: rendered while the model is logged)
           "matplotlib.figure", "matplotlib.backends.backend_agg", "models.report.run_report")


def main_imports() -> list[str]:
    """The modules the parent's main module took its globals from (`from flows.train import
    train` -> flows.train): what a worker's re-run of the main would import."""
    main = sys.modules.get("__main__")
    names: set[str] = set()
    for value in vars(main).values() if main is not None else ():
        if isinstance(value, types.ModuleType):  # `import flows.train` binds `flows`: its submodules too
            names.add(value.__name__)
            names.update(f"{value.__name__}.{attr}" for attr, sub in vars(value).items()
                         if isinstance(sub, types.ModuleType) and sub.__name__ == f"{value.__name__}.{attr}")
        elif isinstance(getattr(value, "__module__", None), str):
            names.add(value.__module__)
    return sorted(n for n in names if n not in ("__main__", "builtins") and n in sys.modules)


def worker_context() -> BaseContext:
    """The multiprocessing context actor processes start from: the preloaded fork server where
    the platform has one (Linux, macOS), else spawn.

    Each worker re-runs the parent's main module as `__mp_main__` (multiprocessing's rule), so
    the preload also holds the modules the main module's globals come from: with those imported
    in the fork server, the re-run costs milliseconds, not seconds. (Not the main module itself:
    runpy warns when it re-runs a module already imported.)
    The preload is fixed when the fork server starts (the process's first worker).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(dict.fromkeys([*PRELOAD, *main_imports()])))
    return ctx


def start_worker_server() -> None:
    """Start the fork server now (its preload takes seconds), e.g. while a temporary API starts,
    so that the first pool's workers fork at once."""
    ctx = worker_context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def ready_worker_server() -> float:
    """Start the fork server and wait until it has loaded its preload (by forking one process
    from it and joining it): seconds taken. An experiment calls this before its first run, so
    the preload (~3 s) is not billed as start-up to whichever run comes first."""
    started = time.perf_counter()
    ctx = worker_context()
    if ctx.get_start_method() == "forkserver":
        probe = ctx.Process(target=_exit_at_once, daemon=True)
        probe.start()
        probe.join()
    return time.perf_counter() - started


def _exit_at_once() -> None:
    """ready_worker_server's probe: a process that only proves the fork server forks."""


def run_aside(fn: Callable, *args, **kwargs) -> Future:
    """fn(*args, **kwargs) in a new process forked from the fork server, so that CPU-bound work
    (a run's plots) runs on another core beside this process's GIL-bound work; a Future of its
    result. Where there is no fork server (a spawn would re-import everything), it runs here
    before this returns."""
    ctx = worker_context()
    if ctx.get_start_method() != "forkserver":
        done: Future = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:
            done.set_exception(exc)
        return done
    pool = ProcessPoolExecutor(1, mp_context=ctx)
    future = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)  # its process exits after this job
    return future

"""Prefect's API clients share one TLS context instead of building one each.

Prefect 3.9 builds a new `ssl.SSLContext` in every PrefectClient and SyncPrefectClient it
creates (prefect/client/orchestration/__init__.py: `ssl.create_default_context(cafile=...)`),
which loads the whole CA bundle: 25 ms each, measured on the 2-core machine, and the engine
creates clients inside every subflow (the subflow's tracking task run gets its own). A trivial
subflow took 147-148 ms, 116-120 ms with this (benchmarks/orchestration_costs.py measures it).

`install()` hands each new client a context built exactly as Prefect builds it (the same
settings: PREFECT_API_TLS_INSECURE_SKIP_VERIFY, PREFECT_API_SSL_CERT_FILE or certifi's
bundle), made once per distinct setting and reused. A `verify` a caller passes in
`httpx_settings` is left alone. Pinned to prefect 3.9 (refused on another);
tests/test_tls_context.py checks it.
"""

from __future__ import annotations

import functools
import inspect
import ssl
from typing import Any

from flows.prefect_patches import check_prefect

_installed = False


@functools.lru_cache(maxsize=8)
def shared_context(skip_verify: bool, cafile: str) -> ssl.SSLContext:
    """The context Prefect's client would build for these settings, built once."""
    if skip_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=cafile)


def context_for_current_settings() -> ssl.SSLContext:
    import certifi
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY

    return shared_context(bool(PREFECT_API_TLS_INSECURE_SKIP_VERIFY.value()),
                          PREFECT_API_SSL_CERT_FILE.value() or certifi.where())


def install() -> None:
    """Patch Prefect's two client classes once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from prefect.client import orchestration

    check_prefect("tls_context", all("httpx_settings" in inspect.signature(cls.__init__).parameters
                                     for cls in (orchestration.PrefectClient, orchestration.SyncPrefectClient)))
    for cls in (orchestration.PrefectClient, orchestration.SyncPrefectClient):
        original = cls.__init__

        @functools.wraps(original)
        def init(self, api: Any, *args: Any, httpx_settings: dict[str, Any] | None = None,
                 _original=original, **kwargs: Any) -> None:
            settings = dict(httpx_settings or {})
            if "verify" not in settings:  # a caller's own choice stays as Prefect would treat it
                settings["verify"] = context_for_current_settings()
            _original(self, api, *args, httpx_settings=settings, **kwargs)

        cls.__init__ = init
    _installed = True

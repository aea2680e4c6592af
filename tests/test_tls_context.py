"""flows/prefect_patches/tls_context.py: Prefect's API clients share the TLS context Prefect would build."""

from __future__ import annotations

import ssl

from flows.prefect_patches import tls_context


def test_clients_share_one_context_built_from_prefects_tls_settings(prefect_api_url):
    from prefect import get_client
    from prefect.client.orchestration import PrefectClient, SyncPrefectClient
    from prefect.settings import PREFECT_API_TLS_INSECURE_SKIP_VERIFY, temporary_settings

    tls_context.install()  # idempotent
    first, second = SyncPrefectClient(prefect_api_url), PrefectClient(prefect_api_url)
    shared = tls_context.context_for_current_settings()
    assert first._client._transport._pool._ssl_context is shared
    assert second._client._transport._pool._ssl_context is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname  # verified, as Prefect's
    with temporary_settings(updates={PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}):
        insecure = SyncPrefectClient(prefect_api_url)._client._transport._pool._ssl_context
    assert insecure is not shared and insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    mine = ssl.create_default_context()
    assert SyncPrefectClient(prefect_api_url, httpx_settings={"verify": mine})._client._transport._pool._ssl_context is mine
    with get_client(sync_client=True) as client:  # and they still talk to the API
        assert client.api_healthcheck() is None

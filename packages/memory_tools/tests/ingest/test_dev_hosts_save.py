"""Saves by ``sourceUrl`` over MCP (in-process) from a page server on 127.0.0.1.

The services' fetcher is the one a server builds from its settings (``fetch_policy``, the
system resolver), with and without ``ASSET_FETCH_DEV_HOSTS``. Redirects to non-web schemes are
``unsafe_url`` naming the scheme, and are logged as refusals (no error, no traceback).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from fastmcp import Client
from structlog.testing import capture_logs

from memory_db import MemorySettings
from memory_db.dev_hosts import parse_dev_hosts
from memory_tools import MemoryServices, build_memory_server
from memory_tools.ingest import SafeFetcher
from memory_tools.ingest.fetch import fetch_policy
from memory_tools.serving.bootstrap import warn_of_dev_hosts
from memory_tools.testing.web import Reply, WebServer, serve_web

from ..pictures import picture
from ..tool_calls import call, error


def with_dev_hosts(settings: MemorySettings, dev_hosts: str | None) -> MemorySettings:
    """``settings`` as if ``ASSET_FETCH_DEV_HOSTS=dev_hosts`` had been set."""
    pairs = parse_dev_hosts(dev_hosts) if dev_hosts else ()
    return settings.model_copy(update={"asset_fetch_dev_hosts": pairs})


def to(location: str) -> Reply:
    return Reply(status=302, headers={"Location": location})


@pytest.fixture
def page_server() -> Any:
    with serve_web() as server:
        server.routes.update(
            {
                "/cat.png": Reply(body=picture(41), headers={"Content-Type": "image/png"}),
                "/to-data": to("data:image/png;base64,iVBORw0KGgo="),
                "/to-mailto": to("mailto:someone@example.com"),
                "/to-javascript": to("javascript:alert(document.domain)"),
            }
        )
        yield server


async def _client(
    services: MemoryServices, key: str, dev_hosts: str | None
) -> AsyncIterator[Client[Any]]:
    settings = with_dev_hosts(services.settings, dev_hosts)
    fetcher = SafeFetcher(fetch_policy(settings))
    try:
        served = replace(services, settings=settings, fetcher=fetcher, default_api_key=key)
        async with Client(build_memory_server(served)) as client:
            yield client
    finally:
        await fetcher.aclose()


@pytest.fixture
async def dev_client(
    services: MemoryServices, alice: Any, page_server: WebServer
) -> AsyncIterator[Client[Any]]:
    async for client in _client(services, alice.key, f"127.0.0.1:{page_server.port}"):
        yield client


@pytest.fixture
async def plain_client(services: MemoryServices, alice: Any) -> AsyncIterator[Client[Any]]:
    async for client in _client(services, alice.key, None):
        yield client


async def test_a_local_page_is_saved_by_url_with_the_allowance(
    dev_client: Client[Any], page_server: WebServer
) -> None:
    saved = await call(dev_client, "image_asset_save", {"sourceUrl": page_server.url("/cat.png")})
    assert saved["assetId"].startswith("ast_")
    assert saved["mimeType"] == "image/png"
    assert page_server.requested == ["/cat.png"]


async def test_without_the_allowance_the_refusal_names_the_loopback_address_first(
    plain_client: Client[Any], page_server: WebServer
) -> None:
    text = await error(plain_client, "image_asset_save", {"sourceUrl": page_server.url("/cat.png")})
    assert text.startswith("unsafe_url: the host 127.0.0.1 is a loopback address; ")
    assert "ASSET_FETCH_DEV_HOSTS (never set it in production)" in text
    assert page_server.requested == []


@pytest.mark.parametrize(
    ("path", "scheme"),
    [("/to-data", "data"), ("/to-mailto", "mailto"), ("/to-javascript", "javascript")],
)
async def test_a_redirect_to_a_non_web_scheme_is_unsafe_url_without_a_traceback(
    dev_client: Client[Any], page_server: WebServer, path: str, scheme: str
) -> None:
    with capture_logs() as logs:
        text = await error(dev_client, "image_asset_save", {"sourceUrl": page_server.url(path)})
    assert text == f"unsafe_url: the server redirected to a {scheme}: URL; only http(s) is followed"
    assert [entry for entry in logs if entry["log_level"] in ("error", "critical")] == []
    assert [entry for entry in logs if entry.get("exc_info")] == []


def test_the_allowance_is_announced_with_one_warning(services: MemoryServices) -> None:
    settings = with_dev_hosts(services.settings, "127.0.0.1:8000,[::1]:8000")
    with capture_logs() as logs:
        warn_of_dev_hosts(settings)
        warn_of_dev_hosts(services.settings)  # off: nothing said
    assert [(entry["event"], entry["log_level"], entry["hosts"]) for entry in logs] == [
        ("fetch_dev_hosts_allowed", "warning", ["127.0.0.1:8000", "[::1]:8000"])
    ]

"""The scraper tools against a page server on 127.0.0.1 under ``ASSET_FETCH_DEV_HOSTS``.

The services are built as a server builds them: settings naming the pair, the fetcher from
``fetch_policy`` with the system resolver (no test allowance), the real Chromium. A second
server, the *canary*, stands for another service on the same machine (another port): its
empty request log proves that nothing of a page reached it, although Chromium asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pyvips
from fastmcp import Client
from structlog.testing import capture_logs

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.ingest import SafeFetcher
from memory_tools.ingest.fetch import fetch_policy
from memory_tools.operations import admin
from memory_tools.testing.web import Reply, WebServer, serve_web
from scraper_mcp import build_aggregate_server

NON_WEB = [("/to-data", "data"), ("/to-mailto", "mailto"), ("/to-javascript", "javascript")]


def picture(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(40, 30)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    return red.bandjoin([red, red]).copy(interpretation="srgb").pngsave_buffer()


def to(location: str) -> Reply:
    return Reply(status=302, headers={"Location": location})


@pytest.fixture
def canary() -> Iterator[WebServer]:
    """Another service on this machine: every request reaching it is recorded."""
    with serve_web() as server:
        yield server


@pytest.fixture
def site(canary: WebServer) -> Iterator[WebServer]:
    """The developer's page server: a page, its image, and redirects to elsewhere."""
    with serve_web() as server:
        logo = b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="9" height="9"/></svg>'
        server.routes.update(
            {
                "/cat.png": Reply(body=picture(1), headers={"Content-Type": "image/png"}),
                "/logo.svg": Reply(body=logo, headers={"Content-Type": "image/svg+xml"}),
                "/index.html": page('<h1>Mine</h1><img src="/cat.png" alt="a cat">'),
                "/to-canary": to(canary.url("/secret?via=redirect")),
                "/to-data": to("data:image/png;base64,iVBORw0KGgo="),
                "/to-mailto": to("mailto:someone@example.com"),
                "/to-javascript": to("javascript:alert(document.domain)"),
            }
        )
        yield server


def page(body: str) -> Reply:
    html = f"<!doctype html><html><head><title>Local</title></head><body>{body}</body></html>"
    return Reply(body=html.encode(), headers={"Content-Type": "text/html; charset=utf-8"})


def dev_services(database: Database, tmp_path: Path, dev_hosts: str | None) -> MemoryServices:
    settings = MemorySettings.model_validate(
        {
            "memory_data_dir": tmp_path / "data",
            "asset_fetch_dev_hosts": dev_hosts or (),
            "asset_max_bytes": 1024 * 1024,
            "scraper_screenshot_timeout_seconds": 30,
        }
    )
    return MemoryServices(
        database=database,
        store=LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"k" * 32), "http://x"),
        settings=settings,
        embedder=LocalEmbedder(),
        fetcher=SafeFetcher(fetch_policy(settings)),
    )


@pytest.fixture
async def key(database: Database) -> str:
    with contextlib.suppress(Exception):
        await admin.create_identity(database, "alice@example.com", 10**9)
    return (await admin.create_key(database, "alice@example.com", ("read", "write"))).secret


@pytest.fixture
async def client_with(
    database: Database, tmp_path: Path, key: str
) -> AsyncIterator[Callable[[str | None], contextlib.AbstractAsyncContextManager[Client[Any]]]]:
    """An in-process aggregate client whose server has ``ASSET_FETCH_DEV_HOSTS=<given>``."""
    opened: list[MemoryServices] = []

    def make(dev_hosts: str | None) -> Client[Any]:
        services = dev_services(database, tmp_path, dev_hosts)
        opened.append(services)
        return Client(build_aggregate_server(replace(services, default_api_key=key)))

    yield make
    for services in opened:
        assert services.fetcher is not None
        await services.fetcher.aclose()


async def refusal(client: Client[Any], tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


async def test_the_scraper_tools_read_an_allowed_local_page(
    client_with: Callable[[str | None], Client[Any]], site: WebServer
) -> None:
    async with client_with(f"127.0.0.1:{site.port}") as client:
        images = (
            await client.call_tool("scrape_page_images", {"url": site.url("/index.html")})
        ).structured_content
        download = (
            await client.call_tool("scrape_image_download", {"imageUrl": site.url("/cat.png")})
        ).structured_content
        shot = (
            await client.call_tool("scrape_page_screenshot", {"url": site.url("/index.html")})
        ).structured_content
    assert images is not None
    assert [image["url"] for image in images["candidates"]] == [site.url("/cat.png")]
    assert download is not None and download["artifactId"].startswith("art_")
    assert shot is not None and shot["pageTitle"] == "Local"


async def test_without_the_allowance_the_scraper_tools_name_the_loopback_address(
    client_with: Callable[[str | None], Client[Any]], site: WebServer
) -> None:
    async with client_with(None) as client:
        for tool, arguments in (
            ("scrape_page_images", {"url": site.url("/index.html")}),
            ("scrape_image_download", {"imageUrl": site.url("/cat.png")}),
            ("scrape_page_screenshot", {"url": site.url("/index.html")}),
        ):
            text = await refusal(client, tool, arguments)
            assert text.startswith("unsafe_url: the host 127.0.0.1 is a loopback address; "), tool
    assert site.requested == []


async def test_a_page_on_an_allowed_pair_cannot_reach_another_local_port(
    client_with: Callable[[str | None], Client[Any]], site: WebServer, canary: WebServer
) -> None:
    """Every request Chromium makes is checked: only the allowed pair answers the page."""
    site.routes["/page.html"] = page(
        f"""<h1>Mine</h1>
        <img src="/logo.svg">
        <img src="{canary.url("/secret?via=img")}">
        <img src="{canary.url("/secret?via=localhost", host="localhost")}">
        <img src="{site.url("/logo.svg", host="localhost")}">
        <img src="/to-canary">
        <link rel="stylesheet" href="{canary.url("/secret?via=css")}">
        <script>fetch("{canary.url("/secret?via=fetch")}").catch(() => 0);</script>"""
    )
    with capture_logs() as logs:
        async with client_with(f"127.0.0.1:{site.port}") as client:
            shot = (
                await client.call_tool("scrape_page_screenshot", {"url": site.url("/page.html")})
            ).structured_content
    assert shot is not None and shot["mimeType"] == "image/png"
    assert canary.requested == []
    # The page's own image came from the allowed pair; nothing came by the unnamed "localhost".
    assert site.requested.count("/logo.svg") == 1
    assert "/to-canary" in site.requested
    refused = [entry["reason"] for entry in logs if entry["event"] == "page_request_refused"]
    assert sum("the host 127.0.0.1 is a loopback address" in reason for reason in refused) >= 3
    assert sum("'localhost' is this machine" in reason for reason in refused) == 2


@pytest.mark.parametrize(("path", "scheme"), NON_WEB)
async def test_a_redirect_to_a_non_web_scheme_is_unsafe_url_for_the_scraper_tools(
    client_with: Callable[[str | None], Client[Any]],
    site: WebServer,
    path: str,
    scheme: str,
) -> None:
    expected = f"unsafe_url: the server redirected to a {scheme}: URL; only http(s) is followed"
    with capture_logs() as logs:
        async with client_with(f"127.0.0.1:{site.port}") as client:
            downloaded = await refusal(
                client, "scrape_image_download", {"imageUrl": site.url(path)}
            )
            captured = await refusal(client, "scrape_page_screenshot", {"url": site.url(path)})
    assert downloaded == captured == expected
    assert [entry for entry in logs if entry["log_level"] in ("error", "critical")] == []
    assert [entry for entry in logs if entry.get("exc_info")] == []

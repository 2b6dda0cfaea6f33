"""The scrape → save → find walk through the aggregate server, over stdio and over HTTP.

A local site on 127.0.0.1 (reached as ``site.test`` through the fetcher's test resolver
allowance) serves a page with two images. Through the aggregate server, with the official MCP
SDK client: scrape the page; save one image with the opt-in ``save`` and download the other as
an artifact and save that; find the first by its alt text and the second by a similar image;
screenshot the page, save the screenshot and find it by the page's title. Over HTTP the server
is uvicorn in this process; over stdio it is a process of its own (``walk_server.py``). The
embedding worker of this process embeds what either saves.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pyvips
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory_db import Database
from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web import Reply, WebServer
from scraper_mcp import build_aggregate_server
from scraper_mcp.aggregate import AGGREGATE_SELECTION
from scraper_mcp.chromium import system_chromium

from .test_scrape_page_images import html, picture

PAGE = """<!doctype html><html lang="en"><head><title>Harbour lighthouse gallery</title>
<meta property="og:image" content="/img/lighthouse.png"></head><body>
<h1>Harbour lighthouse gallery</h1>
<figure><img src="/img/lighthouse.png" alt="A striped lighthouse above the harbour wall"
 width="640" height="480"><figcaption>The old light</figcaption></figure>
<img src="/img/boats.png" alt="Fishing boats" width="600" height="400">
</body></html>"""

Session = Callable[[], Any]


def _site(site: WebServer) -> str:
    site.routes.update(
        {
            "/walk": html(PAGE),
            "/img/lighthouse.png": Reply(
                body=picture(21, 96, 72), headers={"Content-Type": "image/png"}
            ),
            "/img/boats.png": Reply(
                body=picture(22, 96, 72), headers={"Content-Type": "image/png"}
            ),
        }
    )
    return site.url("/walk", host="site.test")


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def _found(answer: dict[str, Any]) -> list[str]:
    return [hit["assetId"] for hit in answer["results"]]


@asynccontextmanager
async def _http(
    services: MemoryServices, key: str, serve_http: Any
) -> AsyncIterator[ClientSession]:
    server = build_http_server(
        services, build_server=build_aggregate_server, tools=AGGREGATE_SELECTION
    )
    async with (
        serve_http(server) as endpoint,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def _stdio(
    services: MemoryServices, key: str, database_url: str, site: WebServer
) -> AsyncIterator[ClientSession]:
    store = services.store
    assert isinstance(store, LocalAssetObjectStore)
    env = {
        **os.environ,
        "WALK_DATABASE_URL": database_url,
        "WALK_DATA_DIR": str(store.root.parent),
        "WALK_SITE_PORT": str(site.port),
        "WALK_KEY": key,
    }
    script = Path(__file__).with_name("walk_server.py")
    parameters = StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_scrape_save_find_through_the_aggregate_server(
    scraper_services: MemoryServices,
    database: Database,
    database_url: str,
    make_key: Callable[..., Any],
    site: WebServer,
    serve_http: Any,
    transport: str,
) -> None:
    assert system_chromium(scraper_services.settings) is not None, "make test installs chromium"
    services = scraper_services  # the stdio server keeps its objects where this one reads
    key = await make_key("walker@example.com")
    url = _site(site)
    connect = (
        _http(services, key, serve_http)
        if transport == "http"
        else _stdio(services, key, database_url, site)
    )
    async with connect as session:
        # 1. Scrape the page: both images, the page declaring the lighthouse its image.
        page = await _call(session, "scrape_page_images", {"url": url})
        assert page["title"] == "Harbour lighthouse gallery"
        by_url = {c["url"]: c for c in page["candidates"]}
        lighthouse = site.url("/img/lighthouse.png", host="site.test")
        boats = site.url("/img/boats.png", host="site.test")
        assert set(by_url) == {lighthouse, boats}

        # 2. Save two images with their context: the top one with the opt-in save, the other
        #    as an artifact handed to image_asset_save.
        saved_page = await _call(session, "scrape_page_images", {"url": url, "save": {"max": 1}})
        first = saved_page["candidates"][0]
        assert first["url"] == lighthouse and first["assetId"].startswith("ast_")
        artifact = await _call(
            session, "scrape_image_download", {"imageUrl": boats, "pageUrl": url}
        )
        second = await _call(session, "image_asset_save", {"artifactId": artifact["artifactId"]})
        kept = await _call(session, "image_asset_get", {"assetId": second["assetId"]})
        assert kept["sourceKind"] == "scrape" and kept["sourceRef"]["pageUrl"] == url
        await job_worker(services).drain()

        # 3. Find one by its alt text, the other by a similar image.
        by_words = await _call(
            session, "image_asset_search", {"query": "striped lighthouse harbour wall"}
        )
        assert _found(by_words)[0] == first["assetId"]
        similar = pyvips.Image.new_from_buffer(picture(22, 96, 72), "").resize(0.75)
        by_image = await _call(
            session,
            "image_asset_search",
            {"imageBase64": base64.b64encode(similar.pngsave_buffer()).decode()},
        )
        assert _found(by_image)[0] == second["assetId"]

        # 4. Screenshot the page and save it; 5. find the screenshot by the page's title.
        shot = await _call(session, "scrape_page_screenshot", {"url": url})
        screenshot = await _call(session, "image_asset_save", {"artifactId": shot["artifactId"]})
        shown = await _call(session, "image_asset_get", {"assetId": screenshot["assetId"]})
        assert shown["sourceKind"] == "screenshot"
        await job_worker(services).drain()
        by_title = await _call(
            session, "image_asset_search", {"query": "Harbour lighthouse gallery"}
        )
        assert screenshot["assetId"] in _found(by_title)[:2]

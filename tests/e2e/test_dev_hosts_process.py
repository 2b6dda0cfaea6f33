"""ASSET_FETCH_DEV_HOSTS as a developer meets it: the real aggregate server process, a page
server on 127.0.0.1, and the official MCP SDK client over streamable HTTP.

A second local server, the *canary*, stands for another service on the same machine: the
page loads from it and a save names it, and its empty request log proves nothing reached it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memory_tools.testing.keys import new_key as make_key
from memory_tools.testing.processes import serving_http
from memory_tools.testing.web import Reply, WebServer, serve_web

from .test_processes import (  # pyright: ignore[reportPrivateUsage]
    _env,  # pyright: ignore[reportPrivateUsage]
    _free_port,  # pyright: ignore[reportPrivateUsage]
    _png,  # pyright: ignore[reportPrivateUsage]
)

pytestmark = pytest.mark.slow

AGGREGATE = [sys.executable, "-m", "aggregate_server"]
OWNER = "dev@example.com"


@contextmanager
def aggregate_server(env: dict[str, str], log: Path) -> Generator[str]:
    """`scraper-mcp-server serve --transport http`, its log in ``log``; stopped afterwards."""
    # Generous: the process starts PostgreSQL and loads the embedder on a shared machine.
    with serving_http(AGGREGATE, env, seconds=120, log=log) as url:
        yield url


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_a_bad_entry_stops_the_server_naming_it(tmp_path: Path) -> None:
    env = _env(tmp_path, ASSET_FETCH_DEV_HOSTS="127.0.0.1:8000,localhost")
    port = str(_free_port())
    command = [*AGGREGATE, "serve", "--transport", "http", "--host", "127.0.0.1", "--port", port]
    ended = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert ended.returncode == 2
    assert "ASSET_FETCH_DEV_HOSTS: 'localhost': needs a port" in ended.stderr


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
async def test_a_local_page_is_scraped_and_nothing_else_is_reached(tmp_path: Path) -> None:
    with serve_web() as canary, serve_web() as site:
        _site_routes(site, canary)
        env = _env(tmp_path, ASSET_FETCH_DEV_HOSTS=f"127.0.0.1:{site.port}")
        key = make_key(env, OWNER, "read,write")
        log = tmp_path / "server.log"
        with aggregate_server(env, log) as url:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
                streamable_http_client(url + "/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                shot = await session.call_tool(
                    "scrape_page_screenshot", {"url": site.url("/index.html")}
                )
                assert not shot.is_error, _text(shot)
                assert shot.structured_content["pageTitle"] == "Mine"
                download = await session.call_tool(
                    "scrape_image_download", {"imageUrl": site.url("/cat.png")}
                )
                assert not download.is_error, _text(download)
                saved = await session.call_tool(
                    "image_asset_save", {"sourceUrl": site.url("/cat.png")}
                )
                assert not saved.is_error, _text(saved)
                elsewhere = await session.call_tool(
                    "image_asset_save", {"sourceUrl": canary.url("/secret")}
                )
                assert _text(elsewhere).startswith(
                    "unsafe_url: the host 127.0.0.1 is a loopback address; "
                )
                for scheme in ("data", "javascript"):
                    redirected = await session.call_tool(
                        "scrape_image_download", {"imageUrl": site.url(f"/to-{scheme}")}
                    )
                    assert _text(redirected) == (
                        f"unsafe_url: the server redirected to a {scheme}: URL; "
                        "only http(s) is followed"
                    )
    assert canary.requested == []
    assert "/cat.png" in site.requested
    lines = log.read_text().splitlines()
    warnings = [line for line in lines if "fetch_dev_hosts_allowed" in line]
    assert len(warnings) == 1
    assert f'"hosts": ["127.0.0.1:{site.port}"]' in warnings[0]
    assert '"level": "warning"' in warnings[0]
    assert [line for line in lines if '"level": "error"' in line or "Traceback" in line] == []


def _site_routes(site: WebServer, canary: WebServer) -> None:
    page = f"""<!doctype html><html><head><title>Mine</title>
        <link rel="stylesheet" href="{canary.url("/secret?via=css")}"></head><body>
        <img src="/cat.png"><img src="{canary.url("/secret?via=img")}">
        <img src="{canary.url("/secret?via=localhost", host="localhost")}">
        <script>fetch("{canary.url("/secret?via=fetch")}").catch(() => 0);</script>
        </body></html>"""
    site.routes.update(
        {
            "/index.html": Reply(body=page.encode(), headers={"Content-Type": "text/html"}),
            "/cat.png": Reply(body=_png(7), headers={"Content-Type": "image/png"}),
            "/to-data": Reply(status=302, headers={"Location": "data:image/png;base64,AAAA"}),
            "/to-javascript": Reply(status=302, headers={"Location": "javascript:alert(1)"}),
        }
    )

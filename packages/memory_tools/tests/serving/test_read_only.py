"""A ``--read-only`` server offers only read-only tools and refuses the direct-upload routes.

The tools are chosen from the registry's specs; a tool that is not offered is not registered,
so fastmcp answers a call to it as an unknown tool. The uploads are refused by the upload
workflow (``policy.require_writable``), so every route into it refuses alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError
from sqlalchemy import text

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.mcp.toolsets import MEMORY, ToolSelection
from memory_tools.serving.app import build_http_server

from .test_uploads import _png

READ_ONLY = ToolSelection((MEMORY,), read_only=True)


async def _counts(services: MemoryServices) -> tuple[int, int]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets),"
                    " (SELECT count(*) FROM mem_asset_upload_reservations)"
                )
            )
        ).one()
    return int(row[0]), int(row[1])


async def test_a_read_only_server_lists_and_calls_only_read_only_tools(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("reader@example.com")
    read_only = replace(services, read_only=True)
    async with (
        serve_http(build_http_server(read_only, tools=READ_ONLY)) as url,
        Client(url, auth=key) as client,
    ):
        listed = {tool.name: tool for tool in await client.list_tools()}
        expected = {spec.name for spec in memory_registry.specs if spec.read_only}
        assert set(listed) == expected and "image_project_list" in expected
        assert all(tool.annotations and tool.annotations.read_only_hint for tool in listed.values())
        # A tool that is not offered cannot be called: fastmcp knows no such tool.
        with pytest.raises(ToolError, match="Unknown tool"):
            await client.call_tool("image_project_create", {"name": "Refused"})
        listed_projects = await client.call_tool("image_project_list", {})
        assert listed_projects.structured_content["projects"] == []
    assert await _counts(services) == (0, 0)


async def test_a_read_only_server_refuses_direct_uploads(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    writable = replace(services, embedder=LocalEmbedder())
    read_only = replace(writable, read_only=True)
    key = await make_key("uploader@example.com")
    auth = {"Authorization": f"Bearer {key}"}
    data = _png(5)
    start = {"contentType": "image/png", "contentLength": len(data)}
    # An upload begun on a writable server of the same database ...
    async with serve_http(build_http_server(writable)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = (await http.post(f"{base}/uploads", json=start, headers=auth)).json()
    assert await _counts(services) == (0, 1)
    # ... is neither started, written nor completed through a read-only one.
    async with (
        serve_http(build_http_server(read_only, tools=READ_ONLY)) as mcp_url,
        httpx.AsyncClient() as http,
    ):
        base = mcp_url.removesuffix("/mcp")
        refused_start = await http.post(f"{base}/uploads", json=start, headers=auth)
        signed = httpx.URL(ticket["url"])
        refused_put = await http.put(
            httpx.URL(base).join(signed.raw_path.decode()), content=data, headers=ticket["headers"]
        )
        refused_complete = await http.post(
            f"{base}/uploads/{ticket['uploadId']}/complete", json={}, headers=auth
        )
    message = "this server is read-only (started with --read-only): it changes nothing"
    for refused in (refused_start, refused_complete):
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == {"code": "forbidden", "message": message}
    assert refused_put.status_code == 403 and "read-only" in refused_put.text
    assert await _counts(services) == (0, 1)

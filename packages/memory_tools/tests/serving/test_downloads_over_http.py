"""Original downloads and thumbnails through the real HTTP stack, with the official MCP SDK
client: the download link's answer, its tampering, a delete while it is live, and the
thumbnails as image content an agent can decode."""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import pyvips
from mcp_types import CallToolResult, ImageContent, TextContent

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices, metrics
from memory_tools.serving import build_http_server
from memory_tools.serving.job_worker import job_worker


def _photo(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(640, 480)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").jpegsave_buffer(Q=80)


@asynccontextmanager
async def _session(url: str, key: str) -> AsyncGenerator[Any, None]:
    """An official MCP SDK client session over streamable HTTP with a bearer key."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http2,
        streamable_http_client(url, http_client=http2) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _call(session: Any, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    result: CallToolResult = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result


def _thumbnails(result: CallToolResult) -> dict[str, pyvips.Image]:
    """Each image block decoded, by the assetId its preceding text line names."""
    found: dict[str, pyvips.Image] = {}
    blocks = result.content
    for before, block in itertools.pairwise(blocks):
        if isinstance(block, ImageContent):
            assert isinstance(before, TextContent) and block.mime_type == "image/jpeg"
            asset_id = before.text.split("assetId ", 1)[1].split()[0]
            found[asset_id] = pyvips.Image.new_from_buffer(base64.b64decode(block.data), "")
    return found


async def test_original_download_and_thumbnails_over_http(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    services = replace(services, embedder=LocalEmbedder())
    key = await make_key("alice@example.com", ("read", "write", "destructive"))
    photo = _photo(1)
    async with serve_http(build_http_server(services)) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")

        def reachable(link: str) -> str:
            return base + link.removeprefix("http://testserver")

        async with _session(url, key) as session:
            saved = await _call(
                session,
                "image_asset_save",
                {"imageBase64": base64.b64encode(photo).decode(), "title": "Harbour at dusk"},
            )
            assert saved.structured_content is not None
            asset_id = saved.structured_content["assetId"]
            await job_worker(services).drain()
            issued = metrics.issued("original")
            got = await _call(
                session,
                "image_asset_get",
                {"assetId": asset_id, "includeOriginal": True, "includeThumbnails": True},
            )
            found = await _call(
                session, "image_asset_search", {"query": "harbour", "includeThumbnails": True}
            )
        assert metrics.issued("original") == issued + 1
        assert got.structured_content is not None
        link = got.structured_content["original"]["url"]
        assert got.structured_content["original"]["filename"] == f"{asset_id}.jpg"
        for result in (got, found):
            (shown,) = _thumbnails(result).items()
            assert shown[0] == asset_id and (shown[1].width, shown[1].height) == (256, 192)

        # The download: the original bytes, their MIME type, never inline, never sniffed.
        download = await http.get(reachable(link))
        assert download.status_code == 200
        assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(photo).hexdigest()
        assert download.headers["content-type"] == "image/jpeg"
        assert download.headers["content-disposition"] == f'attachment; filename="{asset_id}.jpg"'
        assert download.headers["x-content-type-options"] == "nosniff"
        assert download.headers["cache-control"] == "private, no-store"

        # Tampered: another name, no name, the preview's key. Each refusal is counted.
        denied = metrics.denied()
        parts = httpx.URL(reachable(link))
        renamed = parts.copy_set_param("filename", "harbour.jpg")
        unnamed = parts.copy_remove_param("filename")
        preview_key = parts.path.replace("/original.jpg", "/preview.webp")
        as_preview = parts.copy_with(path=preview_key)
        for tampered in (renamed, unnamed, as_preview):
            assert (await http.get(tampered)).status_code == 403, tampered
        assert metrics.denied() == denied + 3

        # Deleted while the link is live: the object is no longer available, the link is dead.
        async with _session(url, key) as session:
            await _call(session, "image_asset_delete", {"assetId": asset_id})
        gone = await http.get(reachable(link))
        assert gone.status_code == 404 and photo not in gone.content

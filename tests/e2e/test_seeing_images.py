"""`memory-server serve --transport stdio` with the official MCP SDK client: the original comes
back through the stdio server's loopback link, and thumbnails arrive as images."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import sys
from pathlib import Path

import httpx
import pytest
import pyvips
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import ImageContent, TextContent

from memory_tools.testing.keys import new_key as make_key

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]


def _photo() -> bytes:
    xyz = pyvips.Image.xyz(800, 600)
    red = ((xyz[0] * 3 + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * 5) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").jpegsave_buffer(Q=85)


async def test_original_and_thumbnails_over_stdio(tmp_path: Path, database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(
        MEMORY_DATA_DIR=str(tmp_path / "data"),
        MEMORY_LOG_FORMAT="json",
        MEMORY_DATABASE_URL=database_url,  # migrated (the template's clone)
    )
    key = make_key(env, "a@example.com", "read,write")
    photo = _photo()
    server = StdioServerParameters(
        command=SERVER[0],
        args=[*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": key},
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            saved = await session.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(photo).decode(), "title": "Over stdio"},
            )
            assert not saved.is_error and saved.structured_content is not None
            asset_id = saved.structured_content["assetId"]
            got = await session.call_tool(
                "image_asset_get",
                {"assetId": asset_id, "includeOriginal": True, "includeThumbnails": True},
            )
            assert not got.is_error and got.structured_content is not None
            original = got.structured_content["original"]
            # The loopback server of this stdio process answers the link while it runs.
            async with httpx.AsyncClient() as http:
                download = await http.get(original["url"])
    assert original["url"].startswith("http://127.0.0.1:")
    assert download.status_code == 200
    assert hashlib.sha256(download.content).digest() == hashlib.sha256(photo).digest()
    assert download.headers["content-type"] == "image/jpeg"
    assert download.headers["content-disposition"] == f'attachment; filename="{asset_id}.jpg"'
    pairs = [
        (before, block)
        for before, block in itertools.pairwise(got.content)
        if isinstance(block, ImageContent)
    ]
    assert len(pairs) == 1
    before, image = pairs[0]
    assert isinstance(before, TextContent) and f"assetId {asset_id} " in before.text
    thumbnail = pyvips.Image.new_from_buffer(base64.b64decode(image.data), "")
    assert (thumbnail.width, thumbnail.height) == (256, 192)

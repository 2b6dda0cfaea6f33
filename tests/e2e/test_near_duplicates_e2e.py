"""Near-duplicates from outside: a real ``memory-server serve`` (its worker in process) and the
official MCP SDK client over HTTP. A save with ``waitSeconds`` names the near-duplicate it
already has in one call; another owner's copy of the same photo is never named."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
import pyvips
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory_db.testing import PostgresForTests
from memory_tools.testing.keys import new_key
from memory_tools.testing.processes import serving_http

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]


def _photo(fmt: str, **options: Any) -> str:
    import skimage.data

    array = np.ascontiguousarray(np.asarray(skimage.data.coffee())[..., :3].astype(np.uint8))
    image = pyvips.Image.new_from_array(array, interpretation="srgb")
    return base64.b64encode(image.write_to_buffer(fmt, **options)).decode()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVER, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
async def env(tmp_path: Path, postgres: PostgresForTests) -> Any:
    name = await postgres.create_empty()
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))
    }
    environment.update(
        MEMORY_DATA_DIR=str(tmp_path / "data"),
        MEMORY_LOG_FORMAT="json",
        MEMORY_DATABASE_URL=postgres.url(name),
        ASSET_OCR="off",
    )
    assert _cli(environment, "migrate").returncode == 0
    try:
        yield environment
    finally:
        await postgres.drop(name)


def _http(key: str) -> httpx2.AsyncClient:
    # A save that waits answers within its waitSeconds; the read timeout only bounds a hang.
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    )


async def _save(client: Client, image: str, title: str, **more: Any) -> dict[str, Any]:
    saved = await client.call_tool(
        "image_asset_save", {"imageBase64": image, "title": title, **more}
    )
    assert not saved.is_error and saved.structured_content is not None, saved.content
    return saved.structured_content


async def test_a_save_waits_for_its_near_duplicates_over_http(
    tmp_path: Path, env: dict[str, str]
) -> None:
    alice, bob = (
        new_key(env, "alice@example.com", "read,write"),
        new_key(env, "bob@example.com", "read,write"),
    )
    # The server's own worker embeds: 90 s bounds a cold start on a loaded machine.
    with serving_http(SERVER, env, seconds=90, log=tmp_path / "server.log") as url:
        async with (
            _http(bob) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as c,
        ):
            bobs = await _save(c, _photo(".png"), "Bob's coffee", waitSeconds=30)
        assert bobs["embeddingStatus"] == "ready" and bobs["nearDuplicates"] == []
        async with (
            _http(alice) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as c,
        ):
            first = await _save(c, _photo(".png"), "Coffee", waitSeconds=30)
            assert first["embeddingStatus"] == "ready"
            assert first["nearDuplicates"] == []  # bob's copy is his: never named here
            copy = await _save(c, _photo(".jpg", Q=70), "Coffee, re-encoded", waitSeconds=30)
            assert copy["embeddingStatus"] == "ready"
            assert [(n["assetId"], n["title"]) for n in copy["nearDuplicates"]] == [
                (first["assetId"], "Coffee")
            ]
            listed = await c.call_tool("image_asset_duplicates", {})
            assert listed.structured_content is not None
            clusters = listed.structured_content["clusters"]
            assert [[a["assetId"] for a in cl["assets"]] for cl in clusters] == [
                [copy["assetId"], first["assetId"]]
            ]

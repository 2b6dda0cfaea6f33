"""Assets as MCP resources, tried as a client would: the official MCP SDK client against a real
`memory-server serve`, over stdio (a subprocess) and over HTTP (bearer keys).

Each server runs with `--no-worker`; the embedding is done by a separate `memory-server worker`
process started once the client has subscribed, so the update can only reach the client through
PostgreSQL's NOTIFY, the server's listener and the MCP notification: nothing is polled.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
import pyvips
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError

from memory_tools.testing.keys import new_key as make_key
from memory_tools.testing.processes import serving_http

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]
TEMPLATE = "image-memory://assets/{assetId}"
# A worker embeds a small image in well under a second once started; the bound covers a cold
# process start (imports, connecting) on a loaded 2-core machine, and only keeps a broken
# notification path from hanging the suite.
NOTIFIED_WITHIN = 90.0


def _photo(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(320, 240)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * 5 + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").jpegsave_buffer(Q=85)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVER, *args], env=env, capture_output=True, text=True, timeout=120)


def _key(env: dict[str, str], owner: str) -> str:
    return make_key(env, owner, "read,write")


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    """A server environment on a migrated database of its own (the template's clone)."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))
    }
    environment.update(
        MEMORY_DATA_DIR=str(tmp_path / "data"),
        MEMORY_LOG_FORMAT="json",
        MEMORY_DATABASE_URL=database_url,
        ASSET_OCR="off",
    )
    return environment


@contextmanager
def _worker(env: dict[str, str], tmp_path: Path) -> Iterator[None]:
    """A `memory-server worker` process for the block: it embeds what is queued."""
    with (tmp_path / "worker.log").open("w") as log:
        process = subprocess.Popen([*SERVER, "worker"], env=env, stdout=log, stderr=log)
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _save(client: Client, seed: int, title: str) -> str:
    saved = await client.call_tool(
        "image_asset_save", {"imageBase64": base64.b64encode(_photo(seed)).decode(), "title": title}
    )
    assert not saved.is_error and saved.structured_content is not None, saved.content
    return str(saved.structured_content["assetId"])


async def _check_reads(client: Client, own: str, others: str) -> None:
    """Templates, the listing (own assets only), one read, and another owner's asset."""
    templates = await client.list_resource_templates()
    assert [t.uri_template for t in templates.resource_templates] == [TEMPLATE]
    listed = await client.list_resources()
    assert [r.uri for r in listed.resources] == [f"image-memory://assets/{own}"]
    read = await client.read_resource(f"image-memory://assets/{own}")
    blob, text = read.contents
    assert isinstance(blob, mcp_types.BlobResourceContents) and blob.mime_type == "image/webp"
    assert isinstance(text, mcp_types.TextResourceContents)
    assert text.mime_type == "application/json"
    preview = pyvips.Image.new_from_buffer(base64.b64decode(blob.blob), "")
    assert (preview.width, preview.height) == (320, 240)  # the preview, not the JPEG original
    assert "exif-data" not in preview.get_fields()
    metadata = json.loads(text.text)
    assert metadata["assetId"] == own and metadata["mimeType"] == "image/jpeg"
    assert metadata["embeddingStatus"] == "pending" and metadata["rendition"] == "preview"
    with pytest.raises(MCPError) as refused:
        await client.read_resource(f"image-memory://assets/{others}")
    assert refused.value.error.message == "not_found: asset not found"
    with pytest.raises(MCPError) as malformed:
        await client.read_resource("image-memory://assets/../../etc/passwd")
    assert malformed.value.error.code == mcp_types.INVALID_PARAMS


async def _listen_until_updated(
    client: Client,
    asset_id: str,
    env: dict[str, str],
    tmp_path: Path,
    *,
    also: anyio.Event | None = None,
) -> None:
    """Listen for ``asset_id``, start a worker, and see the update arrive (and ``also`` set:
    another client's notification that the same worker's embedding sends)."""
    uri = f"image-memory://assets/{asset_id}"
    async with client.listen(resource_subscriptions=[uri]) as subscription:
        assert subscription.honored is not None
        assert subscription.honored.resource_subscriptions == [uri]
        with _worker(env, tmp_path), anyio.fail_after(NOTIFIED_WITHIN):
            event = await anext(aiter(subscription))
            if also is not None:
                await also.wait()
    assert event == ResourceUpdated(uri=uri)
    got = await client.call_tool("image_asset_get", {"assetId": asset_id})
    assert got.structured_content is not None
    assert got.structured_content["embeddingStatus"] == "ready"


def _stdio(env: dict[str, str], key: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=SERVER[0],
        args=[*SERVER[1:], "serve", "--transport", "stdio", "--no-worker"],
        env={**env, "MEMORY_API_KEY": key},
    )


# resources/subscribe: deprecated by the SDK for 2026-07-28 only; the session revisions have it.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_resources_over_stdio(tmp_path: Path, env: dict[str, str]) -> None:
    alice, bob = _key(env, "alice@example.com"), _key(env, "bob@example.com")
    async with Client(_stdio(env, bob)) as client:
        bobs = await _save(client, 9, "Bob's")
    updates: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(message.params.uri)
            arrived.set()

    # Two server processes of Alice's at once: the 2026-07-28 revision (the SDK's default:
    # subscriptions/listen) and a session revision (resources/subscribe, notifications on the
    # stdio stream). One worker, started once both are subscribed, embeds both images.
    async with (
        Client(_stdio(env, alice)) as client,
        Client(_stdio(env, alice), mode="legacy", message_handler=on_message) as legacy,
    ):
        for connected in (client, legacy):
            caps = connected.server_capabilities
            assert caps is not None and caps.resources is not None and caps.resources.subscribe
        first = await _save(client, 1, "Alice's first")
        await _check_reads(client, first, bobs)
        second = await _save(legacy, 2, "Alice's second")
        with pytest.raises(MCPError) as refused:
            await legacy.subscribe_resource(f"image-memory://assets/{bobs}")  # pyright: ignore[reportDeprecated]
        assert refused.value.error.message == "not_found: asset not found"
        await legacy.subscribe_resource(f"image-memory://assets/{second}")  # pyright: ignore[reportDeprecated]
        await _listen_until_updated(client, first, env, tmp_path, also=arrived)
    # The session client heard of its subscription only, not of the other image's update.
    assert updates == [f"image-memory://assets/{second}"]


def _http(key: str) -> httpx2.AsyncClient:
    # The MCP SDK's own timeouts (mcp.shared._httpx_utils): a listen stream is silent until an
    # update, so httpx's default 5 s read timeout would end it while the worker starts.
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300)
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _http_server(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with serving_http(SERVER, env, "--no-worker", seconds=90, log=tmp_path / "server.log") as url:
        yield url + "/mcp"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_resources_over_http(tmp_path: Path, env: dict[str, str]) -> None:
    alice, bob = _key(env, "alice@example.com"), _key(env, "bob@example.com")
    with _http_server(env, tmp_path) as url:
        async with (
            _http(bob) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            bobs = await _save(client, 9, "Bob's")
        async with _http(alice) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                caps = client.server_capabilities
                assert caps is not None and caps.resources is not None
                assert caps.resources.subscribe is True  # subscriptions/listen
                own = await _save(client, 1, "Alice's")
                await _check_reads(client, own, bobs)
                await _listen_until_updated(client, own, env, tmp_path)
            # A session revision over this stateless HTTP server has no channel for updates:
            # it is not offered resources/subscribe, and is told so by its capabilities.
            async with Client(
                streamable_http_client(url, http_client=http), mode="legacy"
            ) as client:
                caps = client.server_capabilities
                assert caps is not None and caps.resources is not None
                assert caps.resources.subscribe is False
                with pytest.raises(MCPError) as refused:
                    await client.subscribe_resource(f"image-memory://assets/{own}")  # pyright: ignore[reportDeprecated]
                assert refused.value.error.code == mcp_types.METHOD_NOT_FOUND

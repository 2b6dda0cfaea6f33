"""``includeOriginal`` (a counted download link) and ``includeThumbnails`` (pictures an agent
can see) on ``image_asset_get``, ``image_asset_search`` and ``image_asset_list``."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import pyvips
from fastmcp import Client
from mcp_types import ImageContent, TextContent

from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices, build_memory_server, metrics
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows import thumbnails

from ..pictures import picture


def photo(seed: int, width: int = 600, height: int = 400) -> bytes:
    """A distinct JPEG larger than a thumbnail (small in bytes: the test server takes 64 KiB)."""
    xyz = pyvips.Image.xyz(width, height)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 17) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").jpegsave_buffer(Q=70)


async def _save(client: Client[Any], image: bytes, **fields: Any) -> str:
    arguments = {"imageBase64": base64.b64encode(image).decode(), **fields}
    result = (await client.call_tool("image_asset_save", arguments)).structured_content
    assert result is not None
    return result["assetId"]


def _shown(content: list[Any]) -> dict[str, tuple[int, int]]:
    """The thumbnails of an answer: assetId (from the line before each image) -> its size.

    Every image must decode as a JPEG of at most 256 px on the long side.
    """
    shown: dict[str, tuple[int, int]] = {}
    for before, block in itertools.pairwise(content):
        if isinstance(block, ImageContent):
            assert block.mime_type == "image/jpeg"
            assert isinstance(before, TextContent) and "assetId ast_" in before.text
            asset_id = before.text.split("assetId ", 1)[1].split()[0]
            data = base64.b64decode(block.data)
            assert data.startswith(b"\xff\xd8\xff")
            image = pyvips.Image.new_from_buffer(data, "")
            assert max(image.width, image.height) <= thumbnails.THUMBNAIL_EDGE
            shown[asset_id] = (image.width, image.height)
    return shown


async def test_include_original_gives_a_download_link_counted_by_purpose(
    saving: MemoryServices, alice: Any
) -> None:
    # ASSET_SIGNED_GET_TTL_SECONDS sets the lifetime of download links as of preview links.
    settings = saving.settings.model_copy(update={"asset_signed_get_ttl_seconds": 120})
    services = replace(saving, settings=settings, default_api_key=alice.key)
    async with Client(build_memory_server(services)) as client:
        asset_id = await _save(client, picture(1))
        plain = (await client.call_tool("image_asset_get", {"assetId": asset_id})).data
        assert plain.original is None and plain.preview is None
        before = metrics.issued("original"), metrics.issued("preview")
        got = (
            await client.call_tool(
                "image_asset_get",
                {"assetId": asset_id, "includeOriginal": True, "includePreview": True},
            )
        ).structured_content
    assert got is not None
    assert (metrics.issued("original"), metrics.issued("preview")) == (
        before[0] + 1,
        before[1] + 1,
    )
    original = got["original"]
    assert original["filename"] == f"{asset_id}.png" and original["unavailable"] is None
    expires = datetime.fromisoformat(original["expiresAt"])
    assert timedelta(seconds=100) < expires - datetime.now(UTC) <= timedelta(seconds=120)
    url = httpx.URL(original["url"])
    key = url.path.removeprefix("/objects/")
    assert key.endswith("/original.png")
    assert int(url.params["expires"]) - datetime.now(UTC).timestamp() <= 120
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    served = store.verify_signed_get(
        key, url.params["expires"], url.params["signature"], url.params["filename"]
    )
    assert served.content_type == "image/png"
    assert served.disposition == f'attachment; filename="{asset_id}.png"'


async def test_a_stdio_server_without_links_says_why_there_is_no_download(
    saving: MemoryServices, alice: Any
) -> None:
    services = replace(saving, default_api_key=alice.key, links_unavailable="no links here")
    async with Client(build_memory_server(services)) as client:
        asset_id = await _save(client, picture(2))
        before = metrics.issued("original")
        got = (
            await client.call_tool(
                "image_asset_get", {"assetId": asset_id, "includeOriginal": True}
            )
        ).structured_content
    assert got is not None
    assert got["original"] == {
        "url": None,
        "expiresAt": None,
        "filename": f"{asset_id}.png",
        "unavailable": "no links here",
    }
    assert metrics.issued("original") == before  # nothing was handed out


async def test_thumbnails_on_get_search_and_list_leave_the_structured_answer_alone(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        wide = await _save(client, photo(1), title="Harbour wide")
        tall = await _save(client, photo(2, 300, 500), title="Harbour tall")
        small = await _save(client, picture(3), title="Harbour small")
        await job_worker(saving).drain()
        calls = {
            "image_asset_get": {"assetId": wide},
            "image_asset_search": {"query": "harbour"},
            "image_asset_list": {},
        }
        shown: dict[str, tuple[int, int]] = {}
        for tool, arguments in calls.items():
            plain = await client.call_tool(tool, arguments)
            seen = await client.call_tool(tool, {**arguments, "includeThumbnails": True})
            assert seen.structured_content == plain.structured_content, tool
            # The first block is the answer's JSON, as without thumbnails.
            assert isinstance(seen.content[0], TextContent)
            assert json.loads(seen.content[0].text) == seen.structured_content
            assert len(plain.content) == 1, tool
            shown = _shown(seen.content)
            expected = {wide} if tool == "image_asset_get" else {wide, tall, small}
            assert set(shown) == expected, tool
    # ~256 px on the long side, from the preview; a smaller image is never enlarged.
    assert shown[wide] == (256, 171) and shown[tall] == (154, 256) and shown[small] == (48, 48)


async def test_thumbnails_are_bounded_in_count_and_bytes_and_the_answer_says_so(
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with client_as(alice.key) as client:
        saved = [await _save(client, photo(10 + seed, 320, 240)) for seed in range(4)]
        newest_first = list(reversed(saved))
        monkeypatch.setattr(thumbnails, "MAX_THUMBNAILS", 3)
        listed = await client.call_tool("image_asset_list", {"includeThumbnails": True})
        assert list(_shown(listed.content)) == newest_first[:3]
        lines = [block.text for block in listed.content[1:] if isinstance(block, TextContent)]
        assert lines[0] == "Thumbnails: 3 of 4 result(s), each after the line naming its assetId."
        assert lines[-1] == (
            f"Result 4: assetId {newest_first[3]}: no thumbnail ({thumbnails.PAST_COUNT})."
        )
        # A byte budget that holds about two thumbnails: the rest go without, in result order.
        one = len(
            base64.b64decode(next(b for b in listed.content if isinstance(b, ImageContent)).data)
        )
        monkeypatch.setattr(thumbnails, "MAX_THUMBNAIL_BYTES", 2 * one + one // 2)
        listed = await client.call_tool("image_asset_list", {"includeThumbnails": True})
        assert list(_shown(listed.content)) == newest_first[:2]
        said = [block.text for block in listed.content if isinstance(block, TextContent)]
        assert (
            f"Result 3: assetId {newest_first[2]}: no thumbnail ({thumbnails.PAST_BYTES})." in said
        )
        # The whole answer is bounded too: a long answer's JSON leaves less room for pictures.
        monkeypatch.setattr(thumbnails, "MAX_THUMBNAIL_BYTES", 10**9)
        listed = await client.call_tool("image_asset_list", {"includeThumbnails": True})
        images = [block for block in listed.content if isinstance(block, ImageContent)]
        sizes = [len(base64.b64decode(image.data)) for image in images]
        first = listed.content[0]
        assert isinstance(first, TextContent)
        lines = thumbnails.LINE_BYTES * (len(saved) + 1)
        # Room in base64 for the first thumbnail and half the second.
        room = (sizes[0] + sizes[1] // 2) * 4 // 3 + 4
        bound = 2 * len(first.text.encode()) + lines + room
        monkeypatch.setattr(thumbnails, "MAX_ANSWER_BYTES", bound)
        listed = await client.call_tool("image_asset_list", {"includeThumbnails": True})
        assert list(_shown(listed.content)) == newest_first[:1]
        images = [block for block in listed.content if isinstance(block, ImageContent)]
        assert 2 * len(first.text.encode()) + sum(len(image.data) for image in images) <= bound


async def test_a_preview_that_fails_its_check_gets_no_thumbnail(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    async with client_as(alice.key) as client:
        good = await _save(client, photo(20, 320, 240))
        bad = await _save(client, photo(21, 320, 240))
        # The bad one's preview is altered at rest: it is never decoded, let alone shown.
        previews = sorted(store.root.rglob("preview.webp"), key=lambda p: p.stat().st_mtime)
        previews[-1].write_bytes(previews[-1].read_bytes()[:-8] + b"\x00" * 8)
        listed = await client.call_tool("image_asset_list", {"includeThumbnails": True})
    assert set(_shown(listed.content)) == {good}
    said = [block.text for block in listed.content if isinstance(block, TextContent)]
    assert f"Result 1: assetId {bad}: no thumbnail ({thumbnails.UNREADABLE})." in said

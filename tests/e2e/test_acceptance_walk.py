"""The acceptance walk (docs/design.md#acceptance) against a real `memory-server` HTTP process.

Save a photo into a project folder, poll until it is ready, find it by words and by a second
similar image, open its signed preview and see the link expire, move it without changing its
object key, check that another user discovers nothing, then delete it and see the vectors go at
once and the bytes go with the worker's next sweep (the server runs without a delete grace
window, ``ASSET_DELETE_GRACE_HOURS=0``; restores within the window are tested in
``packages/memory_tools/tests/changes/test_restore.py``).

The everyday walk (``test_the_everyday_walk``) goes on with what a user does next: wait for
readiness without polling, edit a title and find the image by its new words, download the
original and compare its SHA-256, see thumbnails in a search answer, rename a folder, and
revoke a grant with the operator command, after which the grantee sees nothing.

The photo is sent inline (base64): the server's fetch policy rightly refuses loopback
addresses, and tests reach no public web server.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
import pyvips
from fastmcp import Client
from mcp_types import ImageContent

from memory_tools.testing.keys import new_key as make_key

from .test_processes import _cli, _env, serve_http

pytestmark = pytest.mark.slow


def _photo(scale: float = 1.0, quality: int = 85) -> bytes:
    import skimage.data

    image = pyvips.Image.new_from_array(
        np.ascontiguousarray(skimage.data.coffee()), interpretation="srgb"
    )
    if scale != 1.0:
        image = image.resize(scale)
    return image.write_to_buffer(".jpg", Q=quality)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def server(tmp_path: Path, embedded_data_dir: Path) -> Iterator[tuple[str, dict[str, str]]]:
    env = _env(
        tmp_path,
        ASSET_SIGNED_GET_TTL_SECONDS="3",
        ASSET_WORKER_SWEEP_SECONDS="1",
        ASSET_DELETE_GRACE_HOURS="0",
    )
    with serve_http(env, capture=False) as (url, _process):
        yield url, env


async def _call(client: Client[Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = (await client.call_tool(tool, arguments)).structured_content
    assert result is not None
    return result


async def _eventually(check: Any, what: str, within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await anyio.sleep(0.2)
    pytest.fail(f"{what} did not happen within {within:.0f} s")


async def test_the_acceptance_walk(server: tuple[str, dict[str, str]]) -> None:
    url, env = server
    alice = make_key(env, "alice@example.com")
    bob = make_key(env, "bob@example.com")
    async with Client(url + "/mcp", auth=alice) as client:
        # 1. Save into a project folder.
        pid = (await _call(client, "image_project_create", {"name": "Cafés"}))["projectId"]
        first = await _call(client, "image_folder_create", {"projectId": pid, "name": "Inbox"})
        second = await _call(client, "image_folder_create", {"projectId": pid, "name": "Best"})
        saved = await _call(
            client,
            "image_asset_save",
            {
                "imageBase64": _b64(_photo()),
                "title": "Morning coffee",
                "altText": "a cup of coffee on a saucer",
                "projectId": pid,
                "folderId": first["folderId"],
            },
        )
        asset = saved["assetId"]

        # 2. Poll until ready (the server's own worker embeds it).
        async def ready() -> dict[str, Any] | None:
            state = await _call(client, "image_asset_get", {"assetId": asset})
            return state if state["embeddingStatus"] == "ready" else None

        await _eventually(ready, "embedding")

        # 3. Natural-language query; 4. a second, similar image (smaller, re-encoded).
        by_words = await _call(client, "image_asset_search", {"query": "cup of coffee"})
        assert by_words["results"][0]["assetId"] == asset
        similar = _b64(_photo(scale=0.5, quality=50))
        by_image = await _call(client, "image_asset_search", {"imageBase64": similar})
        assert by_image["results"][0]["assetId"] == asset
        assert by_image["results"][0]["score"] > 0.9

        # 5. The signed preview works, then expires; the private store has no unsigned access.
        state = await _call(client, "image_asset_get", {"assetId": asset, "includePreview": True})
        link = state["preview"]["url"]
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.get(link)
            assert opened.status_code == 200 and opened.content[8:12] == b"WEBP"
            assert (await http.get(link.split("?")[0])).status_code == 403
            original_link = link.replace("/preview.webp", "/original.jpg")
            assert (await http.get(original_link)).status_code == 403  # signature binds the key

            async def expired() -> bool:
                return (await http.get(link)).status_code == 403

            await _eventually(expired, "link expiry", within=10)
        refreshed = await _call(
            client, "image_asset_get", {"assetId": asset, "includePreview": True}
        )
        key_before = httpx.URL(refreshed["preview"]["url"]).path

        # 6. Move to another folder: same object, same key.
        moved = await _call(
            client,
            "image_asset_move",
            {"assetId": asset, "projectId": pid, "folderId": second["folderId"]},
        )
        assert moved["moved"] and moved["objectId"] == saved["objectId"]
        after = await _call(client, "image_asset_get", {"assetId": asset, "includePreview": True})
        assert after["folderId"] == second["folderId"]
        assert httpx.URL(after["preview"]["url"]).path == key_before
        in_folder = await _call(
            client,
            "image_asset_search",
            {
                "query": "coffee",
                "vault": "Library",
                "projectId": pid,
                "folderId": second["folderId"],
            },
        )
        assert [r["assetId"] for r in in_folder["results"]] == [asset]

    # 7. Another user discovers nothing: no metadata, no vector hit, no object.
    async with Client(url + "/mcp", auth=bob) as other:
        got = await other.call_tool("image_asset_get", {"assetId": asset}, raise_on_error=False)
        assert got.content[0].text == "not_found: asset not found"  # type: ignore[union-attr]
        hits = await _call(other, "image_asset_search", {"imageBase64": similar})
        assert hits["results"] == []
        words = await _call(other, "image_asset_search", {"query": "cup of coffee"})
        assert words["results"] == []
        listed = await _call(other, "image_asset_list", {})
        assert listed["items"] == []

    # 8. Delete: vectors at once, bytes with the next sweep.
    async with Client(url + "/mcp", auth=alice) as client:
        objects = Path(env["MEMORY_DATA_DIR"]) / "objects"
        # (Checked before the delete: the 1 s sweep may purge right after it.)
        assert any(p.is_file() for p in objects.rglob("*"))
        deleted = await _call(client, "image_asset_delete", {"assetId": asset})
        assert deleted["vectorsRemoved"] == 2 and deleted["objectReleased"]
        gone = await _call(client, "image_asset_search", {"imageBase64": similar})
        assert asset not in {r["assetId"] for r in gone["results"]}

        async def purged() -> bool:
            return not any(p.is_file() for p in objects.rglob("*"))

        await _eventually(purged, "object purge", within=15)
        again = await _call(client, "image_asset_delete", {"assetId": asset})
        assert again["alreadyDeleted"]


def _found(answer: dict[str, Any]) -> list[str]:
    return [r["assetId"] for r in answer["results"]]


async def test_the_everyday_walk(server: tuple[str, dict[str, str]]) -> None:
    url, env = server
    alice = make_key(env, "alice@example.com")
    bob = make_key(env, "bob@example.com", "read")
    photo = _photo()
    async with Client(url + "/mcp", auth=alice) as client:
        pid = (await _call(client, "image_project_create", {"name": "Trips"}))["projectId"]
        inbox = await _call(client, "image_folder_create", {"projectId": pid, "name": "Inbox"})
        saved = await _call(
            client,
            "image_asset_save",
            {
                "imageBase64": _b64(photo),
                "title": "Harbour at noon",
                "projectId": pid,
                "folderId": inbox["folderId"],
            },
        )
        asset = saved["assetId"]

        # 1. Wait for readiness without polling: one call that answers when the worker is done.
        waited = await _call(client, "image_asset_get", {"assetId": asset, "waitSeconds": 30})
        assert waited["embeddingStatus"] == "ready"

        # 2. Edit the title; once re-embedded, the new words find it and the old ones do not.
        edited = await _call(
            client, "image_asset_update", {"assetId": asset, "title": "Zeppelin over meadow"}
        )
        assert edited["changed"] == ["title"] and edited["title"] == "Zeppelin over meadow"
        again = await _call(client, "image_asset_get", {"assetId": asset, "waitSeconds": 30})
        assert again["embeddingStatus"] == "ready"
        assert _found(await _call(client, "image_asset_search", {"query": "zeppelin"})) == [asset]
        by_old = await _call(client, "image_asset_search", {"query": "harbour"})
        assert asset not in _found(by_old)

        # 3. Download the original: the very bytes saved, as an attachment.
        got = await _call(client, "image_asset_get", {"assetId": asset, "includeOriginal": True})
        async with httpx.AsyncClient(timeout=10) as http:
            download = await http.get(got["original"]["url"])
        assert download.status_code == 200
        assert download.headers["content-type"] == "image/jpeg"
        assert download.headers["content-disposition"].startswith("attachment")
        assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(photo).hexdigest()

        # 4. Thumbnails in a search answer are images an agent can see.
        seen = await client.call_tool(
            "image_asset_search", {"query": "zeppelin", "includeThumbnails": True}
        )
        assert _found(seen.structured_content or {}) == [asset]
        images = [block for block in seen.content if isinstance(block, ImageContent)]
        assert len(images) == 1 and images[0].mime_type == "image/jpeg"
        thumbnail = pyvips.Image.new_from_buffer(base64.b64decode(images[0].data), "")
        assert max(thumbnail.width, thumbnail.height) == 256

        # 5. Rename a folder: its path follows.
        renamed = await _call(
            client,
            "image_folder_update",
            {"projectId": pid, "folderId": inbox["folderId"], "name": "Best of"},
        )
        assert renamed["path"] == "/Best of"
        tree = await _call(client, "image_folder_list", {"projectId": pid})
        assert [f["path"] for f in tree["folders"]] == ["/Best of"]

    # 6. Share, then revoke with the operator command: the grantee sees nothing after.
    shared = {"vault": "alice@example.com/Library"}
    granted = _cli(
        env, "admin", "grant", "--vault-owner", "alice@example.com", "--vault", "Library",
        "--to", "bob@example.com", "--permission", "read",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    async with Client(url + "/mcp", auth=bob) as other:
        listed = await _call(other, "image_asset_list", shared)
        assert [a["assetId"] for a in listed["items"]] == [asset]
        vaults = (await _call(other, "image_vault_list", {}))["vaults"]
        assert {v["vault"]: v["permission"] for v in vaults} == {
            "Library": "owner",
            "alice@example.com/Library": "read",
        }
        revoked = _cli(
            env, "admin", "revoke-grant", "--vault-owner", "alice@example.com", "--vault",
            "Library", "--grantee", "bob@example.com",
        )  # fmt: skip
        assert revoked.returncode == 0, revoked.stderr
        refused = await other.call_tool("image_asset_list", shared, raise_on_error=False)
        assert refused.is_error
        gone = await other.call_tool("image_asset_get", {"assetId": asset}, raise_on_error=False)
        assert gone.content[0].text == "not_found: asset not found"  # type: ignore[union-attr]
        assert (await _call(other, "image_asset_search", {"query": "zeppelin"}))["results"] == []
        vaults = (await _call(other, "image_vault_list", {}))["vaults"]
        assert [v["vault"] for v in vaults] == ["Library"]  # only Bob's own

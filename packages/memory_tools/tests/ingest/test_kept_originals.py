"""What a save keeps: the original outlives its source URL, and embedding works from it.

Two acceptance criteria (docs/acceptance.md): original bytes survive the removal of their source
URL, and a failed embedding is retried without the original being uploaded again. Real
PostgreSQL, a real local object store and a real web server on 127.0.0.1 that stops serving the
image right after the save; nothing fetches it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client
from sqlalchemy import text

from memory_db.embedding import ScriptedEmbedder
from memory_db.errors import ProviderUnavailable
from memory_db.storage import LocalAssetObjectStore, read_verified
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices, build_memory_server
from memory_tools.access import Caller
from memory_tools.jobs.queue import retry_asset_embedding
from memory_tools.jobs.worker import EmbeddingWorker, WorkerConfig
from memory_tools.testing.web import Reply, WebServer

from ..pictures import b64, picture, stored_files
from ..tool_calls import call, error

FAST = WorkerConfig(
    batch_size=8,
    lease_seconds=30,
    heartbeat_seconds=10,
    poll_seconds=0.2,
    retry_base_seconds=0.01,
    retry_max_seconds=0.02,
)


async def _object_of(services: MemoryServices, asset_id: str) -> dict[str, Any]:
    async with services.database.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    text(
                        "SELECT o.id, o.storage_key, o.sha256, o.status FROM mem_assets a "
                        "JOIN mem_asset_objects o ON o.id = a.object_id WHERE a.id = :a"
                    ),
                    {"a": asset_id},
                )
            )
            .mappings()
            .one()
        )
    return dict(row)


async def _accounts(services: MemoryServices, owner: str) -> tuple[int, int, int]:
    """Object rows, upload reservations ever made, and used bytes of ``owner``."""
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_asset_objects WHERE owner_identity = :o),"
                    " (SELECT count(*) FROM mem_asset_upload_reservations"
                    "   WHERE owner_identity = :o),"
                    " used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def _fingerprint(services: MemoryServices) -> dict[str, tuple[str, int]]:
    """Every stored file with its SHA-256 and modification time: a rewrite changes it."""
    store = services.store
    assert isinstance(store, LocalAssetObjectStore)
    result: dict[str, tuple[str, int]] = {}
    for name in stored_files(services):
        path: Path = store.root / name
        result[name] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return result


def _asked_for(web: WebServer, path: str) -> int:
    return sum(1 for requested in web.requested if requested.split("?", 1)[0] == path)


async def test_an_image_saved_by_url_outlives_its_source(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices, web: WebServer
) -> None:
    data = picture(31)
    web.routes["/lighthouse.png"] = Reply(body=data, headers={"Content-Type": "image/png"})
    url = web.url("/lighthouse.png", host="img.test")
    async with client_as(alice.key) as client:
        saved = await call(client, "image_asset_save", {"sourceUrl": url, "title": "Lighthouse"})
        # The source disappears before the image is even embedded ...
        del web.routes["/lighthouse.png"]
        gone = await error(client, "image_asset_save", {"sourceUrl": url})
        assert gone.startswith("fetch_failed: ")
        # ... and the worker embeds it all the same, from the stored preview.
        await EmbeddingWorker(saving).drain()
        got = await call(client, "image_asset_get", {"assetId": saved["assetId"]})
        by_image = await call(client, "image_asset_search", {"imageBase64": b64(data)})
        by_words = await call(client, "image_asset_search", {"query": "lighthouse"})
    assert (got["status"], got["embeddingStatus"]) == ("ready", "ready")
    assert got["sourceUrl"] == url  # kept as provenance, never used again
    assert by_image["results"][0]["assetId"] == saved["assetId"]
    assert by_words["results"][0]["assetId"] == saved["assetId"]
    # The original is the very bytes the source sent, read back from our private store and
    # checked against the SHA-256 the database recorded when they were validated.
    stored = await _object_of(saving, saved["assetId"])
    assert stored["status"] == "available"
    kept = await read_verified(
        saving.store, stored["storage_key"], stored["sha256"], max_bytes=10**6
    )
    assert kept == data
    # The source was asked twice: by the save and by the refused second save. Never by the worker.
    assert _asked_for(web, "/lighthouse.png") == 2


async def test_a_failed_embedding_is_retried_from_the_stored_bytes(
    alice: Any, saving: MemoryServices, web: WebServer
) -> None:
    data = picture(32)
    web.routes["/harbour.png"] = Reply(body=data, headers={"Content-Type": "image/png"})
    caller = Caller(alice.email, alice.key_id, frozenset({"read", "write", "destructive"}))
    # The provider is down for every attempt the worker makes, so the image fails.
    down = ScriptedEmbedder(
        model_name="local-hash-v1",
        script=[ProviderUnavailable("http_503", "provider down") for _ in range(5)],
    )
    failing = replace(saving, embedder=down)
    async with Client(build_memory_server(replace(failing, default_api_key=alice.key))) as client:
        saved = await call(
            client,
            "image_asset_save",
            {"sourceUrl": web.url("/harbour.png", host="img.test"), "title": "Harbour"},
        )
    del web.routes["/harbour.png"]  # nothing could be fetched again, should anything try
    # An outage spends no attempts while a job is young (the worker waits it out); a job past
    # that patience spends them again, so this one fails after its five.
    async with saving.database.unit_of_work() as uow:
        await session_of(uow).execute(
            text("UPDATE mem_asset_embedding_jobs SET created_at = now() - interval '2 days'")
        )
    worker = EmbeddingWorker(failing, FAST)
    for _ in range(12):
        await worker.run_once()
        await anyio.sleep(0.03)
    assert len(down.calls) == 5
    async with saving.database.unit_of_work() as uow:
        failed = await uow.assets.get_for_owner(alice.email, saved["assetId"])
    assert failed is not None and (failed.status, failed.embedding_status) == ("failed", "failed")
    files, accounts = _fingerprint(saving), await _accounts(saving, alice.email)

    # The provider is back: the owner retries both representations (the asset page's Retry),
    # and the worker embeds them.
    for representation in ("visual", "fused"):
        async with saving.database.unit_of_work() as uow:
            retried = await retry_asset_embedding(
                uow, caller, saving, asset_id=saved["assetId"], representation=representation
            )
        assert retried.status == "queued"
    await EmbeddingWorker(saving, FAST).drain()
    async with saving.database.unit_of_work() as uow:
        ready = await uow.assets.get_for_owner(alice.email, saved["assetId"])
    assert ready is not None and (ready.status, ready.embedding_status) == ("ready", "ready")
    assert ready.object_id == saved["objectId"]
    # Not one byte written again, no new object, no new reservation, no second charge.
    assert _fingerprint(saving) == files
    assert await _accounts(saving, alice.email) == accounts
    assert _asked_for(web, "/harbour.png") == 1
    async with Client(build_memory_server(replace(saving, default_api_key=alice.key))) as client:
        found = await call(client, "image_asset_search", {"imageBase64": b64(data)})
    assert found["results"][0]["assetId"] == saved["assetId"]

"""The S3 endpoint goes away during a save (moto behind a forwarder that the test cuts).

The caller gets the retryable tool error ``unavailable``; no metadata row is left (asset, object,
job, held quota); bytes already written become orphan candidates that the worker's sweep deletes
after the safety window; once the endpoint is back, the same save works.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastmcp import Client
from sqlalchemy import text
from structlog.testing import capture_logs

from memory_db.testing.outage import OutageProxy
from memory_db.testing.s3_peers import S3Peer
from memory_tools import MemoryServices, build_memory_server
from memory_tools.serving.job_worker import job_worker

from ..pictures import picture

OWNER = "alice@example.com"


@pytest.fixture(autouse=True)
def _log_events_kept() -> Iterator[None]:
    """Each refused call logs a warning with its traceback: keep it unrendered."""
    with capture_logs():
        yield


@pytest.fixture
def proxy(moto_peer: S3Peer) -> Iterator[OutageProxy]:
    upstream = urlsplit(moto_peer.endpoint_url)
    assert upstream.hostname is not None and upstream.port is not None
    proxy = OutageProxy(upstream.hostname, upstream.port).start()
    try:
        yield proxy
    finally:
        proxy.cut()


async def _count(services: MemoryServices, sql: str) -> int:
    async with services.database.engine.connect() as conn:
        return int((await conn.execute(text(sql))).scalar_one())


async def _metadata(services: MemoryServices) -> dict[str, int]:
    tables = ("mem_assets", "mem_asset_objects", "mem_asset_embedding_jobs")
    counts = {table: await _count(services, f"SELECT count(*) FROM {table}") for table in tables}
    counts["reserved"] = await _count(
        services, "SELECT coalesce(sum(reserved_bytes), 0) FROM mem_asset_namespaces"
    )
    return counts


async def _save(client: Client[Any], seed: int) -> tuple[bool, str]:
    result = await client.call_tool(
        "image_asset_save",
        {"imageBase64": base64.b64encode(picture(seed)).decode(), "title": f"s3 {seed}"},
        raise_on_error=False,
    )
    if result.is_error:
        return False, str(getattr(result.content[0], "text", ""))
    return True, str(result.structured_content["assetId"])


async def test_a_save_while_the_object_store_is_down(
    saving: MemoryServices, moto_peer: S3Peer, proxy: OutageProxy, make_person: Any
) -> None:
    s3 = replace(moto_peer, endpoint_url=proxy.url)
    store, bucket = s3.new_store("out")
    services = replace(saving, store=store)
    alice = await make_person(OWNER)
    try:
        async with Client(build_memory_server(replace(services, default_api_key=alice.key))) as c:
            ok, first = await _save(c, 1)
            assert ok, first
            before = await _metadata(services)

            # 1. Down in the middle of the save: the original was stored, the preview's PUT is
            # never forwarded and nothing listens any more.
            proxy.cut_before(b"PUT ", nth=2)
            ok, error = await _save(c, 2)
            assert not ok and error.startswith("unavailable:"), error
            assert proxy.cuts == 1 and not proxy.up
            assert await _metadata(services) == before  # no row, no held quota
            listed = moto_peer.client().list_objects_v2(Bucket=bucket)["Contents"]
            written = {item["Key"] for item in listed} - await _stored_keys(services)
            assert len(written) == 1  # the orphaned original
            candidates = await _open_candidates(services)
            assert written <= candidates and len(candidates) == 2  # original and preview

            # 2. Down before the save starts: refused the same way, nothing written.
            ok, error = await _save(c, 3)
            assert not ok and error.startswith("unavailable:"), error
            assert await _metadata(services) == before

            # 3. Back: the same images save; the orphan's key is now an object's, and kept.
            proxy.restore()
            for seed in (2, 3):
                ok, asset = await _save(c, seed)
                assert ok, asset
        assert await _count(services, "SELECT count(*) FROM mem_assets") == 3

        # The retried saves stored their bytes under new object ids: no row claims the orphan.
        # The sweep, once the candidates are older than the safety window, deletes it and
        # resolves them all; every byte left in the bucket is an object's, none was lost.
        async with services.database.engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE mem_asset_orphan_candidates SET created_at = now() - interval '2 hours'"
                )
            )
        await job_worker(services).sweep()
        assert await _open_candidates(services) == set()
        stored = {
            item["Key"] for item in moto_peer.client().list_objects_v2(Bucket=bucket)["Contents"]
        }
        assert stored == await _stored_keys(services)
        assert len(stored) == 6
    finally:
        await store.close()


async def _stored_keys(services: MemoryServices) -> set[str]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT storage_key, preview_storage_key FROM mem_asset_objects")
        )
        return {key for row in rows for key in row if key}


async def _open_candidates(services: MemoryServices) -> set[str]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT storage_key FROM mem_asset_orphan_candidates WHERE resolved_at IS NULL")
        )
        return {row[0] for row in rows}

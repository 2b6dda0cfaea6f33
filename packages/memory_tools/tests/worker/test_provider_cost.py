"""What reaches the provider: each image embedded once per model (docs/embeddings.md).

Counted at the Jina-protocol test server: within a batch, across batches, for a deduplicated
save, after a retry whose visual part succeeded, never reused across owners, and the usage
ledger's zero tokens where nothing was sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from memory_db.embedding import EmbedderIdentity, JinaEmbedder
from memory_db.testing.jina_server import MODEL, Fault, JinaTestServer
from memory_db.unit_of_work import session_of
from memory_db.vectors import DEFAULT_ALIAS, create_index, resolve_alias, start_rebuild
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import EmbeddingWorker, WorkerConfig
from memory_tools.operations import admin
from memory_tools.operations.reindex import ReindexRequest, reindex
from memory_tools.workflows.edits import update_asset

from ..pictures import b64, picture

ALICE = Caller("alice@example.com", "akey_a", frozenset({"read", "write"}))
BOB = Caller("bob@example.com", "akey_b", frozenset({"read", "write"}))
FAST = WorkerConfig(batch_size=8, retry_base_seconds=0.0, retry_max_seconds=0.0)


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"test-key"}).start()
    try:
        yield server
    finally:
        server.stop()


def _embedder(jina: JinaTestServer, mode: str = "combine") -> JinaEmbedder:
    return JinaEmbedder(
        api_keys=["test-key"],
        base_url=jina.base_url,
        model=MODEL,
        dimensions=1024,
        max_attempts=1,  # the worker's retries are under test, not the client's
        fused_mode=mode,  # type: ignore[arg-type]
    )


@pytest.fixture
async def paid(saving: MemoryServices, jina: JinaTestServer) -> AsyncIterator[MemoryServices]:
    """Services embedding with the Jina client (combine mode) against the test server."""
    embedder = _embedder(jina)
    services = replace(saving, embedder=embedder)
    for caller in (ALICE, BOB):
        await admin.create_identity(services.database, caller.identity, 10**9)
    try:
        yield services
    finally:
        await services.embedders.close()
        await embedder.close()


async def _save(services: MemoryServices, caller: Caller, seed: int, title: str | None) -> str:
    request = SaveRequest(image_base64=b64(picture(seed)), title=title)
    return (await AssetSaver(services).save(caller, request)).asset_id


def _kinds(jina: JinaTestServer, since: int) -> list[list[str]]:
    """The input kinds of each request since ``since`` (answered or not; sorted: a batch's
    jobs come in no particular order)."""
    return [sorted(seen.kinds) for seen in jina.state.seen[since:]]


async def _rows(services: MemoryServices, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with services.database.engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(text(sql), params)]


async def _vector(services: MemoryServices, asset_id: str, representation: str) -> list[float]:
    rows = await _rows(
        services,
        "SELECT CAST(CAST(embedding AS vector) AS real[]) FROM memory_assets_v1 "
        "WHERE asset_id = :a AND representation = :r",
        a=asset_id,
        r=representation,
    )
    assert len(rows) == 1
    return list(rows[0][0])


async def test_each_image_is_sent_once_and_deduplicated_bytes_reuse_their_vector(
    paid: MemoryServices, jina: JinaTestServer
) -> None:
    worker = EmbeddingWorker(paid, FAST)

    # One save with a title: one request, the image once (the fused vector reuses it).
    first = await _save(paid, ALICE, 1, "a red harbour")
    await worker.drain()
    assert _kinds(jina, 0) == [["image", "text"]]

    # The same bytes again (deduplicated), another title: only the new text is sent.
    mark = len(jina.state.seen)
    again = await _save(paid, ALICE, 1, "the harbour at dusk")
    await worker.drain()
    assert _kinds(jina, mark) == [["text"]]
    assert await _vector(paid, again, "visual") == await _vector(paid, first, "visual")
    ledger = await _rows(
        paid,
        "SELECT total_tokens, image_tokens FROM mem_usage_ledger WHERE asset_id = :a "
        "ORDER BY image_tokens",
        a=again,
    )
    assert [row[1] for row in ledger] == [0, 0]  # no image sent for either vector
    assert sorted(row[0] for row in ledger)[0] == 0  # the copied visual vector cost nothing

    # The same bytes saved without a title by the same owner: nothing is sent at all; and
    # with a title another asset of these bytes already has: nothing either (both copied).
    mark = len(jina.state.seen)
    await _save(paid, ALICE, 1, None)
    await worker.drain()
    same = await _save(paid, ALICE, 1, "a red harbour")
    await worker.drain()
    assert _kinds(jina, mark) == []
    assert await _vector(paid, same, "fused") == await _vector(paid, first, "fused")

    # Across batches: the title changes, the fused vector is embedded again from text alone.
    mark = len(jina.state.seen)
    async with paid.database.unit_of_work() as uow:
        await update_asset(
            uow,
            ALICE,
            paid,
            asset_id=first,
            title="a blue harbour",
            description=None,
            alt_text=None,
            tags=None,
        )
    await worker.drain()
    assert _kinds(jina, mark) == [["text"]]

    # Another owner's save of the same bytes never borrows alice's vector: its image is sent.
    mark = len(jina.state.seen)
    await _save(paid, BOB, 1, "a red harbour")
    await worker.drain()
    assert _kinds(jina, mark) == [["image", "text"]]

    # Two new images with titles in one batch, one of them saved twice: three images in all
    # would be sent per image and representation before; now each image once.
    mark = len(jina.state.seen)
    for seed, title in ((2, "a hill"), (3, "a lake"), (3, "a lake")):
        await _save(paid, ALICE, seed, title)
    await worker.drain()
    sent = _kinds(jina, mark)
    assert sent == [["image", "image", "text", "text"]]
    statuses = await _rows(paid, "SELECT DISTINCT status FROM mem_assets")
    assert statuses == [("ready",)]


async def test_a_retry_after_the_visual_part_succeeded_sends_no_image(
    paid: MemoryServices, jina: JinaTestServer
) -> None:
    worker = EmbeddingWorker(paid, FAST)
    await _save(paid, ALICE, 4, "a red barn")
    # The batch is refused (one bad item must not fail the rest: each job is embedded alone,
    # the visual one first); the visual job succeeds, the fused job meets an outage.
    jina.state.faults.extend([Fault(status=400, code="BAD"), Fault(status=200), Fault(status=503)])
    await worker.run_once()
    assert _kinds(jina, 0) == [["image", "text"], ["image"], ["text"]]
    jobs = await _rows(
        paid, "SELECT representation, status FROM mem_asset_embedding_jobs ORDER BY 1"
    )
    assert jobs == [("fused", "retry"), ("visual", "done")]

    mark = len(jina.state.seen)
    await worker.drain()
    assert _kinds(jina, mark) == [["text"]]  # the retry reuses the stored visual vector
    assert await _rows(paid, "SELECT DISTINCT status FROM mem_assets") == [("ready",)]


async def test_native_mode_sends_one_grouped_input_and_still_copies_visual_vectors(
    saving: MemoryServices, jina: JinaTestServer
) -> None:
    embedder = _embedder(jina, "native")
    services = replace(saving, embedder=embedder)
    await admin.create_identity(services.database, ALICE.identity, 10**9)
    try:
        worker = EmbeddingWorker(services, FAST)
        await _save(services, ALICE, 5, "a green field")
        await worker.drain()
        assert _kinds(jina, 0) == [["content", "image"]]
        mark = len(jina.state.seen)
        await _save(services, ALICE, 5, "a field in spring")
        await worker.drain()
        assert _kinds(jina, mark) == [["content"]]  # the visual vector is copied
    finally:
        await services.embedders.close()
        await embedder.close()


async def test_without_reuse_every_job_sends_its_own_inputs(
    paid: MemoryServices, jina: JinaTestServer
) -> None:
    """The benchmark's baseline switch restores the old behaviour (and shows what it cost)."""
    worker = EmbeddingWorker(paid, FAST, reuse_vectors=False)
    await _save(paid, ALICE, 6, "a stone bridge")
    await _save(paid, ALICE, 6, "a stone bridge")
    await worker.drain()
    assert _kinds(jina, 0) == [["image", "image", "image", "image", "text", "text"]]


async def test_while_a_rebuild_fills_the_new_model_gets_each_image_once(
    saving: MemoryServices, jina: JinaTestServer
) -> None:
    """The dual-write of new saves reuses the filling index's own stored vectors."""
    settings = saving.settings.model_copy(
        update={"jina_api_keys": [SecretStr("test-key")], "jina_base_url": jina.base_url}
    )
    services = replace(saving, settings=settings)  # active: the local embedder
    await admin.create_identity(services.database, ALICE.identity, 10**9)
    worker = EmbeddingWorker(services, FAST)
    try:
        await worker.drain(limit=0)  # creates the active index
        async with services.database.unit_of_work() as uow:
            source = await resolve_alias(session_of(uow), DEFAULT_ALIAS)
            await create_index(
                session_of(uow),
                "assets_jina_v2",
                dimensions=256,
                identity=EmbedderIdentity("jina", MODEL, 256),
            )
            await start_rebuild(
                session_of(uow), alias=DEFAULT_ALIAS, target="assets_jina_v2", source=source
            )
        first = await _save(services, ALICE, 8, "a windmill")
        await worker.drain()
        assert _kinds(jina, 0) == [["image", "text"]]
        mark = len(jina.state.seen)
        again = await _save(services, ALICE, 8, "a windmill at noon")
        await worker.drain()
        assert _kinds(jina, mark) == [["text"]]
        async with services.database.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT count(*) FROM assets_jina_v2 WHERE asset_id = ANY(:ids)"),
                {"ids": [first, again]},
            )
            assert rows.scalar_one() == 4  # both assets, both representations, in the new index
    finally:
        await services.embedders.close()


async def test_a_reindex_sends_each_image_once_and_fused_vectors_only_their_text(
    saving: MemoryServices, jina: JinaTestServer
) -> None:
    """`memory-server reindex` plans its batches as the worker does (embed_reuse)."""
    settings = saving.settings.model_copy(
        update={"jina_api_keys": [SecretStr("test-key")], "jina_base_url": jina.base_url}
    )
    services = replace(saving, settings=settings)  # active: the local embedder
    await admin.create_identity(services.database, ALICE.identity, 10**9)
    try:
        first = await _save(services, ALICE, 9, "a lighthouse")
        again = await _save(services, ALICE, 9, "a lighthouse at night")  # the same bytes
        plain = await _save(services, ALICE, 10, None)  # no text: a visual vector only
        await EmbeddingWorker(services, FAST).drain()
        assert jina.state.seen == []
        report = await reindex(
            services,
            ReindexRequest(target="assets_jina_v3", provider="jina", model=MODEL, dimensions=256),
        )
        assert report.switched
        # Two images, two texts in one request: not two images per titled asset.
        assert _kinds(jina, 0) == [["image", "image", "text", "text"]]
        async with services.database.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT asset_id, representation FROM assets_jina_v3 "
                    "WHERE asset_id = ANY(:ids) ORDER BY 1, 2"
                ),
                {"ids": [first, again, plain]},
            )
            found = {(a, r) for a, r in rows.all()}
        assert found == {
            (first, "visual"),
            (first, "fused"),
            (again, "visual"),
            (again, "fused"),
            (plain, "visual"),
        }
    finally:
        await services.embedders.close()

"""Switching the embedding model under load: ``memory_tools.operations.reindex`` with a real worker.

The library starts on the local embedder (1,024-d); the rebuild moves it to the Jina client
(256-d) against the Jina-protocol test server on 127.0.0.1, while images keep being saved and
searched. Searches never fail and never mix models; after the switch every image (saved before
or during the rebuild) is found, through the new model.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import anyio
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from memory_db.testing.jina_server import MODEL, JinaTestServer
from memory_db.unit_of_work import session_of
from memory_db.vectors import create_index, resolve_alias
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure, EmbeddingUnavailable, InvalidInputFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations.reindex import ReindexRequest, reindex
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.changes import delete_asset
from memory_tools.workflows.search import AssetSearcher, SearchRequest

from ..pictures import picture

OWNER = "alice@example.com"
FAST = WorkerConfig(batch_size=4, poll_seconds=0.1, sweep_seconds=600, retry_base_seconds=0.05)
WORDS = [
    "apricot", "bison", "cobalt", "dolphin", "ember", "fjord", "glacier", "harbor", "iris",
    "juniper", "kestrel", "lagoon", "meadow", "nebula", "orchid", "pebble", "quartz", "raven",
    "saffron", "tundra", "umber", "violet", "walnut", "yarrow", "zephyr", "acorn", "birch",
    "canyon", "delta", "falcon",
]  # fmt: skip


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"test-key"}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def library(services: MemoryServices, jina: JinaTestServer, database: Any) -> Any:
    from memory_tools.operations import admin

    settings = services.settings.model_copy(
        update={"jina_api_keys": [SecretStr("test-key")], "jina_base_url": jina.base_url}
    )
    served = replace(services, settings=settings)
    await admin.create_identity(database, OWNER, 10**9)
    yield served
    await served.embedders.close()


CALLER = Caller(OWNER, "akey_a", frozenset({"read", "write", "destructive"}))


async def _save(services: MemoryServices, seed: int) -> str:
    request = SaveRequest(
        image_base64=base64.b64encode(picture(seed)).decode(), title=f"photo {WORDS[seed]}"
    )
    return (await AssetSaver(services).save(CALLER, request)).asset_id


async def _until_ready(services: MemoryServices, ids: list[str]) -> None:
    with anyio.fail_after(90):  # a deadline for a loaded machine, not a timing assertion
        while True:
            async with services.database.engine.connect() as conn:
                waiting = (
                    await conn.execute(
                        text(
                            "SELECT count(*) FROM mem_assets WHERE id = ANY(:ids) "
                            "AND embedding_status <> 'ready'"
                        ),
                        {"ids": ids},
                    )
                ).scalar_one()
            if not waiting:
                return
            await anyio.sleep(0.05)


async def _models(services: MemoryServices, table: str) -> set[tuple[str, int]]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(text(f"SELECT DISTINCT model, dimensions FROM {table}"))
        return {(str(r[0]), int(r[1])) for r in rows}


async def test_switching_models_under_saves_and_searches(
    library: MemoryServices, jina: JinaTestServer
) -> None:
    services = library
    searcher = AssetSearcher(services)
    worker = job_worker(services, FAST)
    before = [await _save(services, seed) for seed in range(12)]
    during: list[str] = []
    seen_models: list[str] = []
    failures: list[BaseException] = []
    report = None
    old = ""
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await _until_ready(services, before)
        old = await _alias(services)
        stop = anyio.Event()

        async def save_and_search() -> None:
            seed = 12
            while not stop.is_set():
                try:
                    if seed < len(WORDS) - 1:  # the last one is saved after the switch
                        during.append(await _save(services, seed))
                        seed += 1
                    view = await searcher.search(
                        CALLER, SearchRequest(query=f"photo {WORDS[seed % 12]}", limit=5)
                    )
                    models = {hit.embedding_model for hit in view.results}
                    assert len(models) <= 1, models  # one model per answer
                    seen_models.extend(models)
                except Exception as exc:  # every failure is the finding
                    failures.append(exc)
                    raise
                await anyio.sleep(0.01)

        group.start_soon(save_and_search)
        report = await reindex(
            services,
            ReindexRequest(
                target="assets_jina_v2", provider="jina", model=MODEL, dimensions=256, batch_size=4
            ),
        )
        stop.set()
        await anyio.sleep(0.05)
        await _until_ready(services, before + during)
        group.cancel_scope.cancel()
    assert not failures
    assert report is not None and report.switched and report.source == old
    assert report.recall is not None and report.recall >= 0.95
    assert report.target_assets >= len(before)
    assert await _alias(services) == "assets_jina_v2"
    assert await _models(services, "assets_jina_v2") == {(MODEL, 256)}
    assert await _models(services, old) == {("local-hash-v1", 1024)}
    assert set(seen_models) <= {"local-hash-v1", MODEL}
    assert during, "images were saved while the rebuild ran"
    # Every image (saved before or during the rebuild) has its vectors in the new index.
    async with services.database.engine.connect() as conn:
        lacking = (
            await conn.execute(
                text(
                    "SELECT a.id, a.title FROM mem_assets a WHERE a.status = 'ready' AND NOT "
                    "EXISTS (SELECT 1 FROM assets_jina_v2 v WHERE v.asset_id = a.id)"
                )
            )
        ).all()
    assert lacking == []
    # After the switch: every image is found, through the new model (the query goes to Jina).
    queries_before = sum(1 for s in jina.state.seen if s.task == "retrieval.query")
    for seed, asset_id in enumerate(before + during):
        view = await searcher.search(CALLER, SearchRequest(query=WORDS[seed], limit=30))
        found = {hit.asset_id: hit for hit in view.results}
        assert asset_id in found, WORDS[seed]
        assert found[asset_id].embedding_model == MODEL
    queries_after = sum(1 for s in jina.state.seen if s.task == "retrieval.query")
    assert queries_after - queries_before == len(before + during)
    # A process without the new provider's key fails its searches clearly; it never falls
    # back to its configured (local) model against the Jina index.
    keyless = replace(services, settings=services.settings.model_copy(update={"jina_api_keys": []}))
    with pytest.raises(EmbeddingUnavailable, match="cannot embed queries for the active vector"):
        await AssetSearcher(keyless).search(CALLER, SearchRequest(query="photo apricot"))
    # Refusals change nothing: the current index, an existing name, an unknown provider, a
    # dimension out of range.
    async with services.database.unit_of_work() as uow:
        await create_index(session_of(uow), "taken_v1", dimensions=8)
    async with services.database.engine.connect() as conn:
        tables = (await conn.execute(text("SELECT count(*) FROM mem_vector_indexes"))).scalar_one()
    for request, failure, message in [
        (ReindexRequest("assets_jina_v2"), InvalidInputFailure, "points at already"),
        (ReindexRequest("taken_v1", provider="local"), ConflictFailure, "exists"),
        (
            ReindexRequest("v3", provider="openai"),
            InvalidInputFailure,
            "unknown embedding provider",
        ),
        (ReindexRequest("v3", provider="jina", dimensions=5000), InvalidInputFailure, "1-4000"),
    ]:
        with pytest.raises(failure, match=message):
            await reindex(services, request)
    async with services.database.engine.connect() as conn:
        assert (
            await conn.execute(text("SELECT count(*) FROM mem_vector_indexes"))
        ).scalar_one() == tables
        assert (await conn.execute(text("SELECT to_regclass('v3')"))).scalar_one() is None
    # A delete reaches the kept old index too (so a switch back cannot resurrect it).
    async with services.database.unit_of_work() as uow:
        await delete_asset(uow, CALLER, services, asset_id=before[1])
    for table in ("assets_jina_v2", old):
        assert await _vectors(services, table, before[1]) == 0, table
    # Switching back before the old index is dropped: it was kept in step for deletes, and
    # only what was saved since the switch is embedded again.
    late = await _save(services, 29)
    await worker.drain()
    back = await reindex(services, ReindexRequest(old))
    assert back.switched and back.target == old and await _alias(services) == old
    view = await searcher.search(CALLER, SearchRequest(query=WORDS[29], limit=5))
    assert [hit.embedding_model for hit in view.results if hit.asset_id == late] == [
        "local-hash-v1"
    ]
    # --drop-old drops the index switched away from, and reports the run (dropping it used to
    # cascade onto the finished rebuild's record and fail the command after its work was done).
    last = await reindex(services, ReindexRequest("assets_local_v3", drop_old=True))
    assert (last.switched, last.dropped_old, last.source) == (True, True, old)
    assert last.embedded > 0 and await _alias(services) == "assets_local_v3"
    async with services.database.engine.connect() as conn:
        assert (await conn.execute(text(f"SELECT to_regclass('{old}')"))).scalar_one() is None


async def _vectors(services: MemoryServices, table: str, asset_id: str) -> int:
    async with services.database.engine.connect() as conn:
        query = text(f"SELECT count(*) FROM {table} WHERE asset_id = :a")
        return int((await conn.execute(query, {"a": asset_id})).scalar_one())


async def _alias(services: MemoryServices) -> str:
    async with services.database.unit_of_work() as uow:
        return await resolve_alias(session_of(uow))


async def test_a_quarantined_object_does_not_block_the_switch(
    library: MemoryServices, jina: JinaTestServer
) -> None:
    """Reconciliation quarantined an image whose bytes are gone; the rebuild still switches.

    The rebuild cannot embed it (it skips it), and before the fix the verification waited for
    its vector forever: ``conflict: assets kept appearing ...``, whatever the operator did.
    Once the bytes are back, reconciliation lifts the quarantine and re-queues its embedding
    into the index that is active then.
    """
    from memory_tools.operations.reconcile import reconcile_store

    services = library
    worker = job_worker(services, FAST)
    kept, broken = await _save(services, 0), await _save(services, 1)
    await worker.drain()
    await _until_ready(services, [kept, broken])
    async with services.database.unit_of_work() as uow:
        asset = await uow.assets.get_many_for_owners([(OWNER, broken)])
        stored = await uow.objects.get_many([(OWNER, asset[(OWNER, broken)].object_id)])
    record = next(iter(stored.values()))
    original = b"".join([chunk async for chunk in services.store.get_stream(record.storage_key)])
    await services.store.delete(record.storage_key)
    found = await reconcile_store(services, safety_window=timedelta(hours=1), verify_limit=None)
    assert found.count("object_missing") == 1
    old = await _alias(services)

    report = await reindex(
        services, ReindexRequest("assets_jina_q", provider="jina", dimensions=256)
    )

    assert report.switched and await _alias(services) == "assets_jina_q"
    assert report.skipped == 1
    assert await _vectors(services, "assets_jina_q", kept) > 0
    assert await _vectors(services, "assets_jina_q", broken) == 0
    # The bytes come back: the quarantine is lifted and the image is embedded with the new model.
    await services.store.put(
        record.storage_key, original, content_type=record.mime_type, checksum_sha256=record.sha256
    )
    lifted = await reconcile_store(services, safety_window=timedelta(hours=1), verify_limit=None)
    assert lifted.count("object_restored") == 1
    await worker.drain()
    await _until_ready(services, [broken])
    assert await _vectors(services, "assets_jina_q", broken) > 0
    assert await _vectors(services, old, kept) > 0  # the old index is kept until dropped


async def test_recall_counts_equally_near_duplicates_as_found(
    services: MemoryServices, database: Any
) -> None:
    """The same image saved as many assets: their vectors tie, and any of them is a right hit.

    Exact and graph search each list ten of the thirty identical vectors, not necessarily the
    same ten: compared by id, a rebuild with the very same embedder measured a recall far below
    1 and was refused.
    """
    from memory_tools.operations import admin

    await admin.create_identity(database, OWNER, 10**9)
    same = base64.b64encode(picture(1)).decode()
    saver = AssetSaver(services)
    for copy in range(30):
        await saver.save(CALLER, SaveRequest(image_base64=same, title=f"copy {WORDS[copy]}"))
    await job_worker(services, FAST).drain()
    report = await reindex(services, ReindexRequest("copies_v2", provider="local", min_recall=1.0))
    assert report.switched and report.recall == 1.0


async def test_a_rebuild_builds_the_configured_graph(
    services: MemoryServices, database: Any
) -> None:
    """ASSET_VECTOR_GRAPH_M applies to the index a reindex builds (docs/scaling.md)."""
    from memory_tools.operations import admin

    await admin.create_identity(database, OWNER, 10**9)
    await _save(services, 1)
    await job_worker(services, FAST).drain()
    assert services.settings.asset_vector_graph_m == 32  # the default
    narrow = replace(
        services, settings=services.settings.model_copy(update={"asset_vector_graph_m": 16})
    )
    report = await reindex(narrow, ReindexRequest("graph16_v2", provider="local"))
    assert report.switched
    async with services.database.engine.connect() as conn:
        m = await conn.scalar(
            text(
                "SELECT o.option_value FROM pg_class i, pg_options_to_table(i.reloptions) o "
                "WHERE i.oid = 'graph16_v2_hnsw'::regclass AND o.option_name = 'm'"
            )
        )
    assert m == "16"


async def test_switching_to_a_local_clip_model(
    services: MemoryServices, database: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``reindex --provider clip --model NAME``: the model's own dimension, found by name."""
    from memory_db.testing.clip_model import write_tiny_model
    from memory_tools.operations import admin

    models = tmp_path_factory.mktemp("models")
    write_tiny_model(models / "tiny-clip")
    services = replace(
        services, settings=services.settings.model_copy(update={"asset_embed_model_dir": models})
    )
    await admin.create_identity(database, OWNER, 10**9)
    ids = [await _save(services, seed) for seed in range(4)]
    await job_worker(services, FAST).drain()
    for request, message in [
        (ReindexRequest("clip_v2", provider="clip"), "--provider clip needs --model"),
        (ReindexRequest("clip_v2", provider="clip", model="absent"), "no model directory"),
        (ReindexRequest("clip_v2", provider="clip", model="tiny-clip", dimensions=64), "32-d"),
    ]:
        with pytest.raises(InvalidInputFailure, match=message):
            await reindex(services, request)
    report = await reindex(
        services, ReindexRequest("clip_v2", provider="clip", model="tiny-clip", batch_size=2)
    )
    try:
        assert report.switched and report.embedder == "clip/tiny-clip/32"
        assert await _models(services, "clip_v2") == {("tiny-clip", 32)}
        async with services.database.engine.connect() as conn:
            identity = (
                await conn.execute(text("SELECT * FROM mem_vector_indexes WHERE name = 'clip_v2'"))
            ).one()
        assert str(models) not in str(
            identity
        )  # the index names the model, not this machine's path
        # A query image is embedded with the clip model and finds its own asset first.
        view = await AssetSearcher(services).search(
            CALLER, SearchRequest(image_base64=base64.b64encode(picture(2)).decode(), limit=4)
        )
        assert view.results[0].asset_id == ids[2]
        assert {hit.embedding_model for hit in view.results} == {"tiny-clip"}
    finally:
        await services.embedders.close()

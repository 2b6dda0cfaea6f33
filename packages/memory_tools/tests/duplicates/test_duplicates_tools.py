"""Near-duplicates over MCP (docs/tools.md): ``nearDuplicates`` on get and save, save's
``waitSeconds`` answering them in one call, ``image_asset_duplicates``, and the ``duplicates``
job that ``memory-server enrich --what duplicates`` and ``image_asset_enrich`` queue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db import Database
from memory_db.database import create_engine
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.operations.enrich import enrich_vault
from memory_tools.operations.reindex import ReindexRequest, reindex
from memory_tools.serving.job_worker import job_worker

from ..state_waits import Waits, record_waits
from ..tool_calls import call, error
from .photos import b64, photo


@pytest.fixture
async def worker_services(saving: MemoryServices, database_url: str) -> Any:
    # The worker on an engine of its own, as a separate worker process would be.
    database = Database(create_engine(database_url, pool_size=3))
    try:
        yield replace(saving, database=database)
    finally:
        await database.close()


@pytest.fixture
async def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    return record_waits(monkeypatch)


async def _save(c: Client[Any], data: bytes, title: str, **more: Any) -> dict[str, Any]:
    return await call(c, "image_asset_save", {"imageBase64": b64(data), "title": title, **more})


async def test_save_and_get_name_the_near_duplicates(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as c:
        first = await _save(c, photo("coffee"), "Coffee")
        # Without waiting: not embedded yet, so not known yet (null, not "none").
        assert first["nearDuplicates"] is None and first["embeddingStatus"] == "pending"
        got = await call(c, "image_asset_get", {"assetId": first["assetId"]})
        assert got["nearDuplicates"] is None
        await job_worker(saving, handlers={}).drain()
        got = await call(c, "image_asset_get", {"assetId": first["assetId"]})
        assert got["nearDuplicates"] == []  # embedded, and nothing like it
        copy = await _save(c, photo("coffee", ".jpg", Q=50), "Coffee again", idempotencyKey="k")
        await job_worker(saving, handlers={}).drain()
        got = await call(c, "image_asset_get", {"assetId": first["assetId"]})
        [near] = got["nearDuplicates"]
        assert (near["assetId"], near["title"]) == (copy["assetId"], "Coffee again")
        assert 0 <= near["distance"] < 0.01
        # The save repeated under its key: the stored, embedded asset, its pairs at once.
        again = await _save(c, photo("coffee", ".jpg", Q=50), "Coffee again", idempotencyKey="k")
        assert again["replayed"] and again["assetId"] == copy["assetId"]
        assert [n["assetId"] for n in again["nearDuplicates"]] == [first["assetId"]]
        refused = await error(
            c, "image_asset_save", {"imageBase64": b64(photo("rocket")), "waitSeconds": 31}
        )
        assert "waitSeconds" in refused


async def test_save_with_wait_seconds_answers_them_in_one_call(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    saving: MemoryServices,
    worker_services: MemoryServices,
    waits: Waits,
) -> None:
    async with client_as(alice.key) as c:
        first = await _save(c, photo("astronaut"), "Astronaut")
        await job_worker(worker_services, handlers={}).drain()
        answers: list[dict[str, Any]] = []

        async def save_and_wait() -> None:
            answers.append(
                await _save(c, photo("astronaut", ".webp", Q=70), "Astronaut", waitSeconds=25)
            )

        async with anyio.create_task_group() as group:
            group.start_soon(save_and_wait)
            with anyio.fail_after(30):  # a hang guard: the call waits on the state
                await waits.began.wait()
            # A worker that starts after the save began embeds it; its commit wakes the call.
            await job_worker(worker_services, handlers={}).drain()
    [answer] = answers
    assert answer["embeddingStatus"] == "ready" and answer["status"] == "ready"
    assert [n["assetId"] for n in answer["nearDuplicates"]] == [first["assetId"]]
    # Ended by the worker's notice, not by the call's 25 s deadline.
    assert waits.ended == ["notified"], waits.ended


async def test_the_duplicates_tool_lists_and_dismisses(
    client_as: Callable[[str], Client[Any]], alice: Any, bob: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as c:
        cat = (await _save(c, photo("chelsea"), "Cat"))["assetId"]
        copy = (await _save(c, photo("chelsea", ".jpg", Q=60), "Cat copy"))["assetId"]
        await job_worker(saving, handlers={}).drain()
        page = await call(c, "image_asset_duplicates", {})
        assert page["vault"] == "Library" and page["dismissed"] is None
        assert [[a["assetId"] for a in cl["assets"]] for cl in page["clusters"]] == [[copy, cat]]
        assert page["nextCursor"] is None and page["truncated"] is False
        done = await call(c, "image_asset_duplicates", {"dismiss": [cat, copy]})
        assert (done["dismissed"], done["clusters"]) == (1, [])
        got = await call(c, "image_asset_get", {"assetId": cat})
        assert got["nearDuplicates"] == []
        for bad, wanted in (
            ({"dismiss": [cat]}, "dismiss"),
            ({"dismiss": [cat, "x" * 30]}, "invalid_input: dismiss: 'xxx"),
            ({"dismiss": [cat, cat]}, "invalid_input: dismiss: at least 2 different asset ids"),
            ({"cursor": "nope"}, "not a cursor"),
            ({"vault": "bob@example.com/Library"}, "not_found"),
        ):
            message = await error(c, "image_asset_duplicates", bad)
            assert wanted in message, (bad, message)


async def test_enrich_finds_pairs_of_stored_vectors_and_keeps_dismissals(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as c:
        ids = [
            (await _save(c, photo("coffee"), "Coffee"))["assetId"],
            (await _save(c, photo("coffee", ".jpg", Q=60), "Coffee copy"))["assetId"],
            (await _save(c, photo("chelsea"), "Cat"))["assetId"],
            (await _save(c, photo("chelsea", ".jpg", Q=60), "Cat copy"))["assetId"],
        ]
        await job_worker(saving, handlers={}).drain()
        await call(c, "image_asset_duplicates", {"dismiss": ids[:2]})
    # As for images embedded before pairs were kept: no pair at all.
    async with saving.database.unit_of_work() as uow:
        await session_of(uow).execute(
            text("DELETE FROM mem_asset_near_duplicates WHERE decision = 'open'")
        )
    seen: list[tuple[int, int]] = []
    report = await enrich_vault(
        saving, alice.email, "Library", ["duplicates"], progress=lambda d, t: seen.append((d, t))
    )
    assert (report.assets, report.queued, seen) == (4, 4, [(4, 4)])
    again = await enrich_vault(saving, alice.email, "Library", ["duplicates"])
    assert (again.queued, again.already_queued) == (0, 4)  # idempotent while queued
    await job_worker(saving).drain()
    async with client_as(alice.key) as c:
        page = await call(c, "image_asset_duplicates", {})
        # The cat pair is found again; the dismissed coffee pair stays dismissed.
        assert [{a["assetId"] for a in cl["assets"]} for cl in page["clusters"]] == [set(ids[2:])]
        queued = await call(c, "image_asset_enrich", {"assetId": ids[0], "what": ["duplicates"]})
        assert queued["queued"] == ["duplicates"]
    await job_worker(saving).drain()
    async with saving.database.unit_of_work() as uow:
        rows = await session_of(uow).execute(
            text("SELECT decision, count(*) FROM mem_asset_near_duplicates GROUP BY decision")
        )
        assert dict(rows.all()) == {"dismissed": 1, "open": 1}
        jobs = await session_of(uow).execute(
            text(
                "SELECT status, count(*) FROM mem_asset_embedding_jobs "
                "WHERE kind = 'duplicates' GROUP BY status"
            )
        )
        assert dict(jobs.all()) == {"done": 5}


async def test_a_reindex_switch_hides_old_pairs_and_keeps_decisions(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as c:
        coffee = [
            (await _save(c, photo("coffee"), "Coffee"))["assetId"],
            (await _save(c, photo("coffee", ".jpg", Q=60), "Coffee copy"))["assetId"],
        ]
        cat = [
            (await _save(c, photo("chelsea"), "Cat"))["assetId"],
            (await _save(c, photo("chelsea", ".jpg", Q=60), "Cat copy"))["assetId"],
        ]
        await job_worker(saving, handlers={}).drain()
        await call(c, "image_asset_duplicates", {"dismiss": coffee})
        assert len((await call(c, "image_asset_duplicates", {}))["clusters"]) == 1
    report = await reindex(saving, ReindexRequest("assets_local_v9"))
    assert report.switched
    async with client_as(alice.key) as c:
        # The pairs were found in the index switched away from: not read any more.
        assert (await call(c, "image_asset_duplicates", {}))["clusters"] == []
        got = await call(c, "image_asset_get", {"assetId": cat[0]})
        assert got["nearDuplicates"] == []
    await enrich_vault(saving, alice.email, "Library", ["duplicates"])
    await job_worker(saving).drain()
    async with client_as(alice.key) as c:
        page = await call(c, "image_asset_duplicates", {})
        # Found again in the new index; the coffee pair's dismissal held across the switch.
        assert [{a["assetId"] for a in cl["assets"]} for cl in page["clusters"]] == [set(cat)]

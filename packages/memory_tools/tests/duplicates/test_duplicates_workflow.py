"""Near-duplicates (docs/design.md#near-duplicates): pairs found by the embedding job, listed as
clusters, dismissed for good, decided by keeping one; the distance setting both ways; another
index's pairs, trashed assets and other vaults never shown."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db import UnitOfWork, VaultScope
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows import duplicates, keys, near_duplicates
from memory_tools.workflows.calls import ApiKey

from ..tool_calls import call
from ..workflow_calls import refused, run
from .photos import b64, photo


async def _save(c: Client[Any], data: bytes, title: str) -> str:
    saved = await call(c, "image_asset_save", {"imageBase64": b64(data), "title": title})
    return saved["assetId"]


async def _pairs(services: MemoryServices) -> list[tuple[str, str, str, float]]:
    async with services.database.unit_of_work() as uow:
        rows = await session_of(uow).execute(
            text(
                "SELECT asset_a, asset_b, decision, distance FROM mem_asset_near_duplicates "
                "ORDER BY asset_a, asset_b"
            )
        )
        return [(r[0], r[1], r[2], float(r[3])) for r in rows]


async def _find_again(services: MemoryServices, asset_ids: list[str]) -> int:
    """The pair search of these assets, run again as a ``duplicates`` job or enrich runs it."""
    async with services.database.unit_of_work() as uow:
        index = await uow.vector_indexes.open_alias(services.vector_alias, hold=False)
        return await duplicates.find_pairs(uow, services, index, asset_ids)


async def _clusters(services: MemoryServices, key: str, **kwargs: Any) -> list[set[str]]:
    page = await run(services, key, duplicates.list_clusters, **kwargs)
    return [{a.asset_id for a in cluster.assets} for cluster in page.clusters]


async def test_the_job_pairs_re_encodes_and_not_different_photos(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    async with client_as(alice.key) as c:
        cat = await _save(c, photo("chelsea"), "Cat")
        cat_jpeg = await _save(c, photo("chelsea", ".jpg", Q=60), "Cat, re-encoded")
        coffee = await _save(c, photo("coffee"), "Coffee")
        astronaut = await _save(c, photo("astronaut"), "Astronaut")
    await job_worker(saving, handlers={}).drain()
    pairs = await _pairs(saving)
    assert [(a, b, decision) for a, b, decision, _ in pairs] == [(*sorted((cat, cat_jpeg)), "open")]
    assert pairs[0][3] < 0.01
    assert await _clusters(saving, alice.key) == [{cat, cat_jpeg}]
    page = await run(saving, alice.key, duplicates.list_clusters, vault="Library")
    assert page.vault == "Library" and page.next_cursor is None and not page.truncated
    # Newest first within the cluster: the re-encode was saved last.
    assert [a.asset_id for a in page.clusters[0].assets] == [cat_jpeg, cat]
    async with saving.database.unit_of_work() as uow:
        owner = (await _scope(uow, cat)).owner_identity
        near = await duplicates.near_duplicates_of(uow, saving, owner, cat)
    assert [(n.asset_id, n.title) for n in near] == [(cat_jpeg, "Cat, re-encoded")]
    assert {coffee, astronaut}.isdisjoint({a for p in pairs for a in p[:2]})


async def _scope(uow: UnitOfWork, asset_id: str) -> VaultScope:
    rows = await session_of(uow).execute(
        text("SELECT owner_identity, vault FROM mem_assets WHERE id = :id"), {"id": asset_id}
    )
    owner, vault = rows.one()
    return VaultScope(owner, vault)


async def test_a_dismissed_cluster_never_comes_back(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    async with client_as(alice.key) as c:
        ids = [
            await _save(c, photo("coffee"), "Coffee"),
            await _save(c, photo("coffee", ".jpg", Q=50), "Coffee small"),
            await _save(c, photo("coffee", ".webp", Q=70), "Coffee webp"),
        ]
        cat = await _save(c, photo("chelsea"), "Cat")
        cat_copy = await _save(c, photo("chelsea", ".jpg", Q=70), "Cat copy")
    await job_worker(saving, handlers={}).drain()
    assert await _clusters(saving, alice.key) == [{cat, cat_copy}, set(ids)]
    # Paged: one cluster a page, newest first, the cursor going on after the last.
    first = await run(saving, alice.key, duplicates.list_clusters, limit=1)
    assert first.next_cursor is not None
    second = await run(
        saving, alice.key, duplicates.list_clusters, limit=1, cursor=first.next_cursor
    )
    assert {a.asset_id for a in second.clusters[0].assets} == set(ids)
    assert second.next_cursor is None
    dismissed = await run(saving, alice.key, duplicates.dismiss_cluster, asset_ids=ids)
    assert dismissed.dismissed == 3 and dismissed.vault == "Library"
    assert await _clusters(saving, alice.key) == [{cat, cat_copy}]
    # Found again (a re-run of enrich, a later job): still dismissed.
    assert await _find_again(saving, [*ids, cat]) >= 3
    assert await _clusters(saving, alice.key) == [{cat, cat_copy}]
    decisions = {(a, b): d for a, b, d, _ in await _pairs(saving)}
    assert sorted(decisions.values()) == ["dismissed"] * 3 + ["open"]
    async with saving.database.unit_of_work() as uow:
        owner = (await _scope(uow, ids[0])).owner_identity
        assert await duplicates.near_duplicates_of(uow, saving, owner, ids[0]) == []
    # Dismissing again changes nothing and says so.
    again = await run(saving, alice.key, duplicates.dismiss_cluster, asset_ids=ids)
    assert again.dismissed == 0


async def test_keep_one_trashes_the_others_item_by_item(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    careful = await make_person("alice@example.com", ("read", "write"))
    async with client_as(alice.key) as c:
        keep = await _save(c, photo("astronaut"), "Astronaut")
        copy = await _save(c, photo("astronaut", ".jpg", Q=60), "Astronaut copy")
        crop = await _save(c, photo("astronaut", ".jpg", crop=0.03, Q=85), "Astronaut crop")
    await job_worker(saving, handlers={}).drain()
    assert await _clusters(saving, alice.key) == [{keep, copy, crop}]
    # Without the destructive scope each item is refused, and nothing changes.
    refusal = await duplicates.keep_one(saving, ApiKey(careful.key), keep=keep, trash=[copy, crop])
    assert [(i.asset_id, i.trashed, i.code) for i in refusal.items] == [
        (copy, False, "forbidden"),
        (crop, False, "forbidden"),
    ]
    # Another owner cannot claim to keep Alice's image: not_found, and none of his own trashed.
    bob = await make_person("bob@example.com")
    async with client_as(bob.key) as c:
        his = await _save(c, photo("coffee"), "Coffee")
    answer = await refused(duplicates.keep_one(saving, ApiKey(bob.key), keep=keep, trash=[his]))
    assert answer.startswith("not_found: ")
    assert await _clusters(saving, alice.key) == [{keep, copy, crop}]
    async with saving.database.unit_of_work() as uow:
        deleted = await session_of(uow).scalar(
            text("SELECT deleted_at FROM mem_assets WHERE id = :id"), {"id": his}
        )
        assert deleted is None  # still there, not trashed
    missing = "ast_" + "z" * 26
    result = await duplicates.keep_one(
        saving, ApiKey(alice.key), keep=keep, trash=[copy, keep, missing, crop]
    )
    assert result.kept == keep
    assert [(i.asset_id, i.trashed, i.code) for i in result.items] == [
        (copy, True, None),
        (missing, False, "not_found"),
        (crop, True, None),
    ]
    # Trashed assets are never shown: no cluster, no near-duplicate.
    assert await _clusters(saving, alice.key) == []
    async with saving.database.unit_of_work() as uow:
        owner = (await _scope(uow, keep)).owner_identity
        assert await duplicates.near_duplicates_of(uow, saving, owner, keep) == []


@dataclass
class PausedAfter(ApiKey):
    """A key the operator pauses once it has been checked ``checks`` times."""

    key_id: str = ""
    checks: int = 0

    async def check(self, uow: UnitOfWork) -> Caller:
        if self.checks == 0:
            # In the item's own transaction, just before its check: paused between items.
            await keys.change_key(uow, self.key_id, "pause", actor="operator", owner=None)
        self.checks -= 1
        return await super().check(uow)


async def test_keep_one_refuses_the_rest_once_the_key_is_paused(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    """Keeping one checks the key again for each image it trashes, as a bulk delete does: a
    key paused mid-way trashes nothing more."""
    alice = await make_person("alice@example.com")
    async with client_as(alice.key) as c:
        kept = await _save(c, photo("astronaut"), "Astronaut")
    ids = [kept, "ast_" + "b" * 26, "ast_" + "c" * 26, "ast_" + "d" * 26]
    # Checked with the kept image's read, once for the run, then once per image: paused after
    # those two and two images.
    key = PausedAfter(alice.key, key_id=alice.key_id, checks=4)
    result = await duplicates.keep_one(saving, key, keep=ids[0], trash=ids[1:])
    assert [i.code for i in result.items] == ["not_found", "not_found", "unauthenticated"]


async def test_the_distance_setting_both_ways(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    wide = replace(
        saving,
        settings=saving.settings.model_copy(update={"asset_near_duplicate_distance": 0.5}),
    )
    async with client_as(alice.key) as c:
        cat = await _save(c, photo("chelsea"), "Cat")
        cropped = await _save(c, photo("chelsea", ".jpg", crop=0.1, Q=80), "Cat cropped")
    await job_worker(wide, handlers={}).drain()
    [(_, _, _, distance)] = await _pairs(saving)
    assert 0.0005 < distance < 0.5
    async with saving.database.unit_of_work() as uow:
        await session_of(uow).execute(text("DELETE FROM mem_asset_near_duplicates"))

    def at(limit: float) -> MemoryServices:
        update = {"asset_near_duplicate_distance": limit}
        return replace(saving, settings=saving.settings.model_copy(update=update))

    assert await _find_again(at(distance - 0.0002), [cat, cropped]) == 0
    assert await _pairs(saving) == []
    assert await _find_again(at(distance + 0.0002), [cat, cropped]) == 1
    assert [p[:2] for p in await _pairs(saving)] == [tuple(sorted((cat, cropped)))]


async def test_other_vaults_and_owners_never_appear(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    reader = await make_person("reader@example.com")
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    await admin.create_vault(saving.database, "alice@example.com", "Work")
    async with client_as(alice.key) as c:
        cat = await _save(c, photo("chelsea"), "Cat")
        saved = await call(
            c,
            "image_asset_save",
            {"imageBase64": b64(photo("chelsea", ".jpg", Q=60)), "title": "Cat", "vault": "Work"},
        )
        cat_at_work = saved["assetId"]
    async with client_as(bob.key) as c:
        bobs_cat = await _save(c, photo("chelsea", ".jpg", Q=50), "Bob's cat")
    await job_worker(saving, handlers={}).drain()
    # The same photo in three vaults of two owners: no pair crosses a vault.
    assert await _pairs(saving) == []
    async with client_as(alice.key) as c:
        copy = await _save(c, photo("chelsea", ".webp", Q=60), "Cat again")
    await job_worker(saving, handlers={}).drain()
    assert [p[:2] for p in await _pairs(saving)] == [tuple(sorted((cat, copy)))]
    assert cat_at_work not in {a for p in await _pairs(saving) for a in p[:2]}
    assert bobs_cat not in {a for p in await _pairs(saving) for a in p[:2]}
    # Bob cannot name alice's vault; the reader may list it and not dismiss in it.
    assert await _clusters(saving, bob.key) == []
    assert (
        await refused(
            run(saving, bob.key, duplicates.list_clusters, vault="alice@example.com/Library")
        )
    ).startswith("not_found")
    shared = await _clusters(saving, reader.key, vault="alice@example.com/Library")
    assert shared == [{cat, copy}]
    assert (
        await refused(
            run(
                saving,
                reader.key,
                duplicates.dismiss_cluster,
                vault="alice@example.com/Library",
                asset_ids=[cat, copy],
            )
        )
    ).startswith("forbidden")
    # Bob dismissing alice's ids in his own vault matches nothing of hers.
    mine = await run(saving, bob.key, duplicates.dismiss_cluster, asset_ids=[cat, copy])
    assert mine.dismissed == 0
    assert await _clusters(saving, alice.key) == [{cat, copy}]


async def test_pairs_of_another_index_are_not_read(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    async with client_as(alice.key) as c:
        await _save(c, photo("chelsea"), "Cat")
        await _save(c, photo("chelsea", ".jpg", Q=60), "Cat copy")
    await job_worker(saving, handlers={}).drain()
    assert len(await _clusters(saving, alice.key)) == 1
    # As after a reindex switch: the pairs name the index they were found in.
    async with saving.database.unit_of_work() as uow:
        await session_of(uow).execute(
            text("UPDATE mem_asset_near_duplicates SET index_name = 'memory_assets_v0'")
        )
    assert await _clusters(saving, alice.key) == []


async def test_refused_input_changes_nothing(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    alice = await make_person("alice@example.com")
    one = "ast_" + "a" * 26
    cases: list[tuple[Callable[..., Awaitable[Any]], dict[str, Any], str]] = [
        (duplicates.dismiss_cluster, {"asset_ids": [one]}, "between 2 and 100"),
        (duplicates.dismiss_cluster, {"asset_ids": [one, one]}, "at least 2 different"),
        (duplicates.dismiss_cluster, {"asset_ids": [one, "nope"]}, "is not an asset id"),
        (duplicates.dismiss_cluster, {"asset_ids": [one] * 101}, "between 2 and 100"),
        (duplicates.dismiss_cluster, {"asset_ids": [one, "ast_\x00"]}, "assetIds"),
        (duplicates.list_clusters, {"limit": 0}, "limit: between 1 and 50"),
        (duplicates.list_clusters, {"cursor": "bm90IGEgY3Vyc29y"}, "not a cursor"),
        (duplicates.list_clusters, {"vault": "Nowhere"}, "not_found"),
    ]
    for workflow, kwargs, wanted in cases:
        message = await refused(run(saving, alice.key, workflow, **kwargs))
        assert wanted in message, (kwargs, message)
    assert await _pairs(saving) == []


async def test_a_picture_and_its_copy_completed_at_once_are_still_paired(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two worker slots embed a picture and its copy at once: the pair is found all the same.

    Each batch's pair search waits (at most 5 s) until the other's has come too, as when two
    transactions finish together. Without the pair-search lock both searched before the other
    committed, and neither found the pair; with it the second completion waits for the first
    to commit, then finds the pair.
    """
    alice = await make_person("alice@example.com")
    async with client_as(alice.key) as c:
        cat = await _save(c, photo("chelsea"), "Cat")
        cat_jpeg = await _save(c, photo("chelsea", ".jpg", Q=60), "Cat, re-encoded")
    real = near_duplicates.find_pairs
    searching: list[str] = []
    both = anyio.Event()

    async def meet(
        uow: UnitOfWork, services: MemoryServices, index: Any, asset_ids: Any, **kwargs: Any
    ) -> int:
        if asset_ids:
            searching.extend(asset_ids)
            if len(searching) == 2:
                both.set()
            with anyio.move_on_after(5):
                await both.wait()
        return await real(uow, services, index, asset_ids, **kwargs)

    monkeypatch.setattr(near_duplicates, "find_pairs", meet)
    one_job = WorkerConfig(batch_size=1, concurrency=1, poll_seconds=0.1)
    async with anyio.create_task_group() as workers:
        for name in ("w1", "w2"):
            workers.start_soon(job_worker(saving, one_job, name=name, handlers={}).drain)
    assert sorted(searching) == sorted((cat, cat_jpeg))  # one search each, by two batches
    pairs = await _pairs(saving)
    assert [(a, b) for a, b, _, _ in pairs] == [tuple(sorted((cat, cat_jpeg)))]

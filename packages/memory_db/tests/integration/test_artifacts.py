"""Scraper artifacts: owned reads, expiry, the sweep's listing, and what the database refuses."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memory_db import Database, new_id
from memory_db.repositories import ArtifactRecord
from memory_db.repositories._errors import constraint_name
from memory_db.storage import build_artifact_key
from memory_db.unit_of_work import session_of

A, B = "alice@example.com", "bob@example.com"
SHA = "ab" * 32


async def _namespaces(database: Database) -> dict[str, str]:
    async with database.unit_of_work() as uow:
        return {owner: (await uow.identities.create(owner, 10**9)).namespace_id for owner in (A, B)}


async def _create(
    database: Database,
    owner: str,
    namespace_id: str,
    *,
    ttl: timedelta = timedelta(hours=1),
    **overrides: Any,
) -> ArtifactRecord:
    artifact_id = overrides.pop("artifact_id", new_id("art"))
    values: dict[str, Any] = {
        "artifact_id": artifact_id,
        "owner": owner,
        "namespace_id": namespace_id,
        "storage_key": build_artifact_key("test", namespace_id, artifact_id, "png"),
        "sha256": SHA,
        "mime_type": "image/png",
        "nbytes": 100,
        "width": 10,
        "height": 20,
        "source_kind": "scrape",
        "source_ref": {"pageUrl": "https://example.com/"},
        "ttl": ttl,
    }
    values.update(overrides)
    async with database.unit_of_work() as uow:
        return await uow.artifacts.create(**values)


async def test_an_artifact_is_read_by_its_owner_only_and_until_it_expires(
    database: Database,
) -> None:
    ns = await _namespaces(database)
    live = await _create(database, A, ns[A])
    short = await _create(database, A, ns[A], ttl=timedelta(milliseconds=300))
    assert live.expires_at > live.created_at
    assert (live.width, live.height, live.source_kind) == (10, 20, "scrape")
    async with database.unit_of_work() as uow:
        assert await uow.artifacts.get_owned(A, live.id) == live
        assert await uow.artifacts.get_owned(B, live.id) is None  # another owner's: unknown
        assert await uow.artifacts.get_owned(A, new_id("art")) is None
        assert await uow.artifacts.get_owned(A, short.id) is not None
        usage = await uow.artifacts.live_usage(A)
        assert (usage.count, usage.bytes) == (2, 200)
        assert (await uow.artifacts.live_usage(B)).count == 0
    await asyncio.sleep(0.4)
    async with database.unit_of_work() as uow:
        assert await uow.artifacts.get_owned(A, short.id) is None  # expired: unknown too
        assert (await uow.artifacts.live_usage(A)).count == 1
        assert [record.id for record in await uow.artifacts.expired()] == [short.id]
        # Reconciliation still counts an expired artifact's bytes as accounted for.
        assert await uow.artifacts.stored_keys(A) == {live.storage_key, short.storage_key}
        assert await uow.artifacts.delete([short.id]) == 1
        assert await uow.artifacts.expired() == []
        assert await uow.artifacts.delete_owned(B, live.id) is None  # not Bob's to delete
        assert await uow.artifacts.delete_owned(A, live.id) == live
        assert await uow.artifacts.stored_keys(A) == set()


async def test_an_orphaned_artifact_key_is_claimed_while_its_row_exists(database: Database) -> None:
    ns = await _namespaces(database)
    record = await _create(database, A, ns[A])
    stray = build_artifact_key("test", ns[A], new_id("art"), "png")
    async with database.unit_of_work() as uow:
        assert await uow.orphans.claimed([record.storage_key, stray]) == {record.storage_key}


async def _refused(database: Database, owner: str, namespace_id: str, **overrides: Any) -> str:
    with pytest.raises(IntegrityError) as caught:
        await _create(database, owner, namespace_id, **overrides)
    return constraint_name(caught.value) or ""


async def test_the_database_ties_an_artifact_to_its_owners_namespace(database: Database) -> None:
    ns = await _namespaces(database)
    # Alice's row cannot name Bob's namespace ...
    assert "fk_mem_scrape_artifacts" in await _refused(database, A, ns[B])
    # ... nor a key under Bob's namespace, nor a key of another artifact id.
    bobs_key = build_artifact_key("test", ns[B], new_id("art"), "png")
    assert await _refused(database, A, ns[A], storage_key=bobs_key) == (
        "ck_mem_scrape_artifacts_key_in_namespace"
    )
    other_id = build_artifact_key("test", ns[A], new_id("art"), "png")
    assert await _refused(database, A, ns[A], storage_key=other_id) == (
        "ck_mem_scrape_artifacts_key_in_namespace"
    )
    assert await _refused(database, A, ns[A], source_kind="upload") == (
        "ck_mem_scrape_artifacts_source_kind_known"
    )
    assert await _refused(database, A, ns[A], source_ref={"x": "y" * 9000}) == (
        "ck_mem_scrape_artifacts_source_ref_bounded"
    )
    assert await _refused(database, A, ns[A], ttl=timedelta(0)) == (
        "ck_mem_scrape_artifacts_expires_after_created"
    )


async def test_an_owners_artifacts_go_with_their_identity(database: Database) -> None:
    ns = await _namespaces(database)
    await _create(database, A, ns[A])
    async with database.unit_of_work() as uow:
        await session_of(uow).execute(
            text("DELETE FROM mem_identities WHERE owner_identity = :o"), {"o": A}
        )
        assert (await uow.artifacts.live_usage(A)).count == 0

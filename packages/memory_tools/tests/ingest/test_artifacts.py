"""Scraper artifacts: stored like a save validates, bounded per owner, saved by their owner only
(``image_asset_save`` with ``artifactId``), swept when expired, known to reconciliation."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db.ids import new_id
from memory_db.storage import LocalAssetObjectStore, UrlSigner, build_artifact_key
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import (
    Forbidden,
    InvalidImage,
    InvalidInputFailure,
    QuotaExceeded,
    ToolFailure,
)
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.artifacts import ArtifactView, store_artifact

from ..conftest import Person
from ..pictures import picture, stored_files
from ..tool_calls import call, error

A, B = "alice@example.com", "bob@example.com"
SWEEP = WorkerConfig(poll_seconds=0.2)
REF = {
    "imageUrl": "https://cdn.example.com/cat.png?token=s3cr3t&w=640#frag",
    "pageUrl": "https://user:pw@example.com/cats",
    "pageTitle": "Cats on sofas",
    "altText": "a ginger cat asleep on a green sofa",
    "caption": "Marmalade, 2024",
}


def caller(person: Person, scopes: tuple[str, ...] = ("read", "write")) -> Caller:
    return Caller(person.email, person.key_id, frozenset(scopes))


async def rows(services: MemoryServices, owner: str | None = None) -> list[dict[str, Any]]:
    query = "SELECT * FROM mem_scrape_artifacts" + (" WHERE owner_identity = :o" if owner else "")
    async with services.database.engine.connect() as conn:
        result = await conn.execute(text(query + " ORDER BY created_at"), {"o": owner})
        return [dict(row) for row in result.mappings()]


async def stored(
    services: MemoryServices, person: Person, seed: int = 1, **ref: Any
) -> ArtifactView:
    return await store_artifact(
        services, caller(person), picture(seed), source_kind="scrape", source_ref=ref or REF
    )


# --- storing --------------------------------------------------------------------------------


async def test_an_artifact_is_validated_stored_privately_and_expires(
    saving: MemoryServices, alice: Person
) -> None:
    before = datetime.now(UTC)
    view = await stored(saving, alice, 3)
    assert view.artifact_id.startswith("art_")
    assert (view.mime_type, view.width, view.height, view.bytes) == (
        "image/png",
        48,
        48,
        len(picture(3)),
    )
    ttl = timedelta(seconds=saving.settings.scraper_artifact_ttl_seconds)
    slack = timedelta(seconds=5)
    assert before + ttl - slack < view.expires_at < before + ttl + slack
    wire = view.model_dump(mode="json")
    assert set(wire) == {"artifactId", "mimeType", "bytes", "width", "height", "expiresAt"}
    [row] = await rows(saving, A)
    # The source ref is scrubbed as a save scrubs it: no credentials, query secrets, fragments.
    assert row["source_ref"]["imageUrl"] == "https://cdn.example.com/cat.png?w=640"
    assert row["source_ref"]["pageUrl"] == "https://example.com/cats"
    # The bytes sit under Alice's namespace prefix, nowhere else, and are not an object.
    files = stored_files(saving)
    assert files == [row["storage_key"]]
    assert f"/tenants/{row['namespace_id']}/artifacts/{view.artifact_id}/" in files[0]
    async with saving.database.unit_of_work() as uow:
        assert (await uow.quota.usage(A)).used_bytes == 0  # counted against no quota
    async with saving.database.engine.connect() as conn:
        events = (
            await conn.execute(
                text(
                    "SELECT actor_identity, target_kind, target_id, outcome, detail "
                    "FROM mem_provenance WHERE operation = 'artifact_store'"
                )
            )
        ).all()
    assert [tuple(event) for event in events] == [
        (
            A,
            "artifact",
            view.artifact_id,
            "succeeded",
            {"sourceKind": "scrape", "bytes": view.bytes},
        )
    ]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"),
        (b"\x89PNG\r\n\x1a\n" + b"pixels" * 20, "truncated"),
        (picture(1) + b"<script>alert(1)</script>" * 4, "polyglot"),
    ],
)
async def test_what_a_save_refuses_is_refused_and_nothing_is_stored(
    saving: MemoryServices, alice: Person, data: bytes, code: str
) -> None:
    with pytest.raises(InvalidImage, match=code):
        await store_artifact(saving, caller(alice), data, source_kind="scrape", source_ref={})
    assert await rows(saving) == [] and stored_files(saving) == []


async def test_the_save_limits_are_the_artifact_limits(
    saving: MemoryServices, alice: Person
) -> None:
    small = replace(
        saving, settings=saving.settings.model_copy(update={"asset_max_decoded_pixels": 100})
    )
    with pytest.raises(InvalidImage, match="the limit is 100"):
        await stored(small, alice)
    tight = replace(saving, settings=saving.settings.model_copy(update={"asset_max_bytes": 100}))
    with pytest.raises(InvalidImage, match="ASSET_MAX_BYTES"):
        await stored(tight, alice)
    with pytest.raises(InvalidInputFailure, match="sourceRef"):
        await stored(saving, alice, 1, **{"bad key": "x"})
    with pytest.raises(Forbidden, match="write"):
        await store_artifact(
            saving, caller(alice, ("read",)), picture(1), source_kind="scrape", source_ref={}
        )
    assert await rows(saving) == [] and stored_files(saving) == []


async def test_live_artifacts_are_bounded_per_owner(
    saving: MemoryServices, alice: Person, bob: Person
) -> None:
    capped = replace(
        saving,
        settings=saving.settings.model_copy(
            update={"scraper_artifact_max_live": 2, "scraper_artifact_max_live_bytes": 10**6}
        ),
    )
    await stored(capped, alice, 1)
    await stored(capped, alice, 2)
    with pytest.raises(QuotaExceeded, match="SCRAPER_ARTIFACT_MAX_LIVE"):
        await stored(capped, alice, 3)
    await stored(capped, bob, 3)  # per owner
    by_bytes = replace(
        saving,
        settings=saving.settings.model_copy(
            update={"scraper_artifact_max_live_bytes": 2 * len(picture(1)) + len(picture(4)) - 1}
        ),
    )
    with pytest.raises(QuotaExceeded, match="SCRAPER_ARTIFACT_MAX_LIVE_BYTES"):
        await stored(by_bytes, alice, 4)
    assert len(await rows(saving, A)) == 2


async def test_concurrent_stores_cannot_pass_the_bound_together(
    saving: MemoryServices, alice: Person
) -> None:
    capped = replace(
        saving, settings=saving.settings.model_copy(update={"scraper_artifact_max_live": 3})
    )
    outcomes: list[str] = []

    async def one(seed: int) -> None:
        try:
            await stored(capped, alice, seed)
            outcomes.append("stored")
        except QuotaExceeded:
            outcomes.append("refused")

    async with anyio.create_task_group() as group:
        for seed in range(8):
            group.start_soon(one, seed)
    assert sorted(outcomes) == ["refused"] * 5 + ["stored"] * 3
    assert len(await rows(saving, A)) == 3


async def test_a_store_that_refuses_the_bytes_leaves_no_artifact(
    saving: MemoryServices, alice: Person, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_bytes(b"")  # the store's root is a file: every write fails
    one = replace(
        saving, settings=saving.settings.model_copy(update={"scraper_artifact_max_live": 1})
    )
    refusing = replace(
        one, store=LocalAssetObjectStore(blocked, UrlSigner(b"s" * 32), "http://127.0.0.1:9")
    )
    with pytest.raises(ToolFailure, match="object store could not take the image"):
        await stored(refusing, alice, 16)
    assert await rows(saving) == []
    async with saving.database.engine.connect() as conn:
        outcomes = (
            await conn.execute(
                text("SELECT outcome FROM mem_provenance WHERE operation = 'artifact_store'")
            )
        ).scalars()
        assert list(outcomes) == ["succeeded", "failed"]  # the row's commit, then its removal
    await stored(one, alice, 16)  # the failed one holds no place under the bound of one


# --- the handoff: image_asset_save with artifactId ------------------------------------------


async def test_saving_an_artifact_records_its_kind_and_context(
    saving: MemoryServices, alice: Person, client_as: Callable[[str], Client[Any]]
) -> None:
    view = await stored(saving, alice, 5)
    async with client_as(alice.key) as client:
        saved = await call(
            client,
            "image_asset_save",
            {
                "artifactId": view.artifact_id,
                "tags": ["cats"],
                # The artifact's recorded context wins; the caller's other keys are kept.
                "sourceRef": {"pageTitle": "Forged title", "campaign": "spring"},
            },
        )
        asset = await call(client, "image_asset_get", {"assetId": saved["assetId"]})
    assert (saved["width"], saved["bytes"], saved["deduplicated"]) == (48, view.bytes, False)
    assert asset["sourceKind"] == "scrape"
    assert asset["sourceRef"] == {
        "imageUrl": "https://cdn.example.com/cat.png?w=640",
        "pageUrl": "https://example.com/cats",
        "pageTitle": "Cats on sofas",
        "altText": "a ginger cat asleep on a green sofa",
        "caption": "Marmalade, 2024",
        "campaign": "spring",
    }
    assert asset["altText"] == "a ginger cat asleep on a green sofa"
    assert asset["title"] == "Image from cdn.example.com"
    # The page title and alt text make a fused representation (the whitelist).
    async with saving.database.engine.connect() as conn:
        reps = (
            await conn.execute(
                text("SELECT representation FROM mem_asset_embedding_jobs WHERE asset_id = :a"),
                {"a": saved["assetId"]},
            )
        ).scalars()
        assert sorted(reps) == ["fused", "visual"]
    # The artifact stays until it expires (docs/design.md#artifacts).
    assert len(await rows(saving, A)) == 1


async def test_a_screenshot_artifact_saves_as_a_screenshot(
    saving: MemoryServices, alice: Person, client_as: Callable[[str], Client[Any]]
) -> None:
    view = await store_artifact(
        saving,
        caller(alice),
        picture(6),
        source_kind="screenshot",
        source_ref={"pageUrl": "https://example.com/", "pageTitle": "Example Domain"},
    )
    async with client_as(alice.key) as client:
        saved = await call(
            client, "image_asset_save", {"artifactId": view.artifact_id, "altText": "mine"}
        )
        asset = await call(client, "image_asset_get", {"assetId": saved["assetId"]})
    assert asset["sourceKind"] == "screenshot"
    assert asset["altText"] == "mine"  # the caller's altText wins over the recorded one
    assert asset["sourceRef"] == {"pageUrl": "https://example.com/", "pageTitle": "Example Domain"}


async def test_only_the_owner_saves_an_artifact_and_others_learn_nothing(
    saving: MemoryServices,
    alice: Person,
    bob: Person,
    client_as: Callable[[str], Client[Any]],
) -> None:
    view = await stored(saving, alice, 7)
    before = stored_files(saving)
    async with client_as(bob.key) as client:
        answers = [
            await error(client, "image_asset_save", {"artifactId": artifact_id})
            for artifact_id in (view.artifact_id, new_id("art"), "art_nope", "../../etc/passwd")
        ]
    assert answers == ["not_found: artifact not found"] * 4
    assert stored_files(saving) == before
    async with saving.database.unit_of_work() as uow:
        assert (await uow.quota.usage(B)).used_bytes == 0
        assert (await uow.quota.usage(B)).reserved_bytes == 0


async def test_an_expired_artifact_is_not_found(
    saving: MemoryServices, alice: Person, client_as: Callable[[str], Client[Any]]
) -> None:
    brief = replace(
        saving, settings=saving.settings.model_copy(update={"scraper_artifact_ttl_seconds": 1})
    )
    view = await stored(brief, alice, 8)
    await anyio.sleep(1.2)
    async with client_as(alice.key) as client:
        assert await error(client, "image_asset_save", {"artifactId": view.artifact_id}) == (
            "not_found: artifact not found"
        )


async def test_artifact_saves_replay_under_their_idempotency_key(
    saving: MemoryServices, alice: Person, client_as: Callable[[str], Client[Any]]
) -> None:
    first, second = await stored(saving, alice, 9), await stored(saving, alice, 10)
    async with client_as(alice.key) as client:
        args = {"artifactId": first.artifact_id, "idempotencyKey": "k-1"}
        saved = await call(client, "image_asset_save", args)
        again = await call(client, "image_asset_save", args)
        other = await error(
            client,
            "image_asset_save",
            {"artifactId": second.artifact_id, "idempotencyKey": "k-1"},
        )
    assert again["assetId"] == saved["assetId"] and again["replayed"] is True
    assert other.startswith("conflict:")


async def test_missing_artifact_bytes_refuse_the_save_and_release_the_reservation(
    saving: MemoryServices, alice: Person, client_as: Callable[[str], Client[Any]]
) -> None:
    view = await stored(saving, alice, 11)
    [row] = await rows(saving, A)
    await saving.store.delete(row["storage_key"])
    async with client_as(alice.key) as client:
        refused = await error(client, "image_asset_save", {"artifactId": view.artifact_id})
    assert refused.startswith("invalid_input: the artifact's bytes are unavailable")
    async with saving.database.unit_of_work() as uow:
        assert (await uow.quota.usage(A)).reserved_bytes == 0


# --- expiry sweep and reconciliation --------------------------------------------------------


async def test_the_sweep_deletes_expired_artifacts_rows_and_bytes(
    saving: MemoryServices, alice: Person
) -> None:
    brief = replace(
        saving, settings=saving.settings.model_copy(update={"scraper_artifact_ttl_seconds": 1})
    )
    expiring = await stored(brief, alice, 12)
    live = await stored(saving, alice, 13)
    worker = job_worker(saving, SWEEP)
    await worker.sweep()
    assert len(await rows(saving, A)) == 2  # nothing has expired yet
    await anyio.sleep(1.2)
    await worker.sweep()
    [left] = await rows(saving, A)
    assert left["id"] == live.artifact_id
    assert stored_files(saving) == [left["storage_key"]]
    assert expiring.artifact_id not in str(stored_files(saving))


async def test_reconciliation_keeps_live_artifacts_and_removes_rowless_ones(
    saving: MemoryServices, alice: Person
) -> None:
    view = await stored(saving, alice, 14)
    [row] = await rows(saving, A)
    env = saving.settings.asset_storage_env_prefix
    stray_old = build_artifact_key(env, row["namespace_id"], new_id("art"), "png")
    stray_young = build_artifact_key(env, row["namespace_id"], new_id("art"), "png")
    for key in (stray_old, stray_young):
        await saving.store.put(key, picture(15), content_type="image/png")
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    for key in (row["storage_key"], stray_old):  # a live artifact's age never matters
        os.utime(saving.store.root / key, (two_hours_ago, two_hours_ago))  # type: ignore[attr-defined]
    from memory_tools.operations.reconcile import reconcile_store

    report = await reconcile_store(saving, safety_window=timedelta(hours=1))
    assert (report.removed, report.waiting, report.foreign) == (1, 1, 0)
    files = stored_files(saving)
    assert row["storage_key"] in files and stray_young in files and stray_old not in files
    assert view.artifact_id in row["storage_key"]

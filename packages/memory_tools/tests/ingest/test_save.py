"""The save flow against real PostgreSQL, a real local object store and a real web server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from memory_db import MemorySettings
from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import (
    ConflictFailure,
    FetchFailed,
    InvalidImage,
    InvalidInputFailure,
    NotFoundFailure,
    QuotaExceeded,
    ToolFailure,
    UnsafeUrl,
)
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.testing.web import Reply, WebServer

from ..pictures import b64, picture, stored_files
from .test_fetch import HOSTILE
from .test_images import BAD


async def db_state(services: MemoryServices, owner: str) -> dict[str, Any]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets WHERE owner_identity = :o),"
                    " (SELECT count(*) FROM mem_asset_objects WHERE owner_identity = :o),"
                    " (SELECT count(*) FROM mem_asset_embedding_jobs WHERE owner_identity = :o),"
                    " used_bytes, reserved_bytes,"
                    " (SELECT count(*) FROM mem_asset_upload_reservations"
                    "   WHERE owner_identity = :o AND status = 'active')"
                    " FROM mem_asset_namespaces WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
    keys = ("assets", "objects", "jobs", "used", "reserved", "active_reservations")
    return dict(zip(keys, row, strict=True))


@pytest.fixture
async def alice_caller(database: Any) -> Caller:
    await admin.create_identity(database, "alice@example.com", 10**9)
    return Caller("alice@example.com", "akey_test", frozenset({"read", "write", "destructive"}))


@pytest.fixture
async def bob_caller(database: Any) -> Caller:
    await admin.create_identity(database, "bob@example.com", 10**9)
    return Caller("bob@example.com", "akey_test2", frozenset({"read", "write", "destructive"}))


async def test_save_base64_stores_original_unchanged_and_queues_visual(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    data = picture(1)
    result = await AssetSaver(saving).save(alice_caller, SaveRequest(image_base64=b64(data)))
    assert result.status == "processing" and result.embedding_status == "pending"
    assert not result.deduplicated and not result.replayed
    assert len(result.job_ids) == 1  # no meaningful text: no fused vector
    assert (result.width, result.height, result.mime_type) == (48, 48, "image/png")
    files = stored_files(saving)
    assert len(files) == 2 and any(f.endswith("original.png") for f in files)
    original = next(f for f in files if f.endswith("original.png"))
    assert "alice" not in original  # keys never carry identities
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    assert (store.root / original).read_bytes() == data
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", result.asset_id)
    assert asset is not None
    assert asset.source_kind == "upload" and asset.title == "Image PNG 48x48"
    assert asset.metadata["embedding"]["fused"].startswith("skipped")
    state = await db_state(saving, "alice@example.com")
    vector_bytes = 1024 * 2 + 8
    preview = next(f for f in files if f.endswith("preview.webp"))
    assert state["used"] == len(data) + (store.root / preview).stat().st_size + vector_bytes
    assert state["reserved"] == 0 and state["active_reservations"] == 0


async def test_caller_text_adds_a_fused_job(saving: MemoryServices, alice_caller: Caller) -> None:
    result = await AssetSaver(saving).save(
        alice_caller,
        SaveRequest(
            image_base64=b64(picture(2)),
            title="Pricing table",
            tags=["  Pricing ", "pricing", "Competitor  Analysis"],
            source_ref={"pageTitle": "Plans", "pageUrl": "https://example.com/p?token=x&a=1#f"},
        ),
    )
    assert len(result.job_ids) == 2
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", result.asset_id)
        jobs = await uow.jobs.for_asset("alice@example.com", result.asset_id)
    assert asset is not None
    assert asset.tags == ["pricing", "competitor analysis"]
    assert asset.source_ref == {"pageTitle": "Plans", "pageUrl": "https://example.com/p?a=1"}
    assert sorted(job.representation for job in jobs) == ["fused", "visual"]
    assert {job.model for job in jobs} == {"local-hash-v1"}


async def test_save_by_url(saving: MemoryServices, alice_caller: Caller, web: WebServer) -> None:
    data = picture(3)
    web.routes["/photo.png"] = Reply(body=data, headers={"Content-Type": "image/jpeg"})
    url = web.url("/photo.png?session=abc&size=2", host="img.test")
    result = await AssetSaver(saving).save(alice_caller, SaveRequest(source_url=url))
    assert result.mime_type == "image/png"  # sniffed, not the declared type
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", result.asset_id)
    assert asset is not None
    assert asset.source_kind == "external_url"
    assert asset.title == "Image from img.test"
    assert asset.source_url == web.url("/photo.png?size=2", host="img.test")


async def test_a_repeated_scraper_save_returns_the_first_asset_even_when_run_at_once(
    saving: MemoryServices, alice_caller: Caller, web: WebServer
) -> None:
    """Scraper saves repeat by URL and bytes (issue 30); a URL a caller names never does."""
    web.routes["/page-image.png"] = Reply(body=picture(21), headers={"Content-Type": "image/png"})
    url = web.url("/page-image.png", host="img.test")
    scraped = SaveRequest(source_url=url, url_source_kind="scrape")
    saver = AssetSaver(saving)
    results: list[Any] = []

    async def save() -> None:
        results.append(await saver.save(alice_caller, scraped))

    async with anyio.create_task_group() as group:  # two at once: one asset, whoever wins
        for _ in range(2):
            group.start_soon(save)
    later = await saver.save(alice_caller, scraped)
    state = await db_state(saving, "alice@example.com")
    files = stored_files(saving)
    named = await saver.save(alice_caller, SaveRequest(source_url=url))  # external_url
    assert len({r.asset_id for r in [*results, later]}) == 1
    assert sorted(r.deduplicated for r in results) == [False, True] and later.deduplicated
    assert (state["assets"], state["objects"], state["reserved"]) == (1, 1, 0)
    assert state["active_reservations"] == 0
    assert len(files) == 2  # the original and its preview, once: a loser's upload is gone
    assert named.asset_id != later.asset_id and named.object_id == later.object_id


async def test_identical_bytes_share_one_object_per_owner_only(
    saving: MemoryServices, alice_caller: Caller, bob_caller: Caller
) -> None:
    saver = AssetSaver(saving)
    data = b64(picture(4))
    first = await saver.save(alice_caller, SaveRequest(image_base64=data))
    second = await saver.save(alice_caller, SaveRequest(image_base64=data, title="again"))
    theirs = await saver.save(bob_caller, SaveRequest(image_base64=data))
    assert second.object_id == first.object_id and second.deduplicated
    assert second.asset_id != first.asset_id
    assert theirs.object_id != first.object_id and not theirs.deduplicated
    assert len(stored_files(saving)) == 4
    state = await db_state(saving, "alice@example.com")
    assert state["objects"] == 1 and state["assets"] == 2


async def test_idempotency_key_returns_the_same_asset(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    saver = AssetSaver(saving)
    request = SaveRequest(image_base64=b64(picture(5)), idempotency_key="k-1")
    first = await saver.save(alice_caller, request)
    again = await saver.save(alice_caller, request)
    assert again.asset_id == first.asset_id and again.replayed
    assert again.job_ids == first.job_ids
    with pytest.raises(ConflictFailure, match="different save request"):
        await saver.save(
            alice_caller, SaveRequest(image_base64=b64(picture(6)), idempotency_key="k-1")
        )
    assert (await db_state(saving, "alice@example.com"))["assets"] == 1


async def test_a_refused_save_does_not_use_up_its_idempotency_key(
    saving: MemoryServices, alice_caller: Caller, web: WebServer, database: Any
) -> None:
    """After each kind of refusal, the corrected retry under the same key saves."""
    saver = AssetSaver(saving)
    good = picture(40)
    web.routes["/good.png"] = Reply(body=good, headers={"Content-Type": "image/png"})
    url = f"http://img.test:{web.port}"
    refusals: list[tuple[str, SaveRequest, type[ToolFailure]]] = [
        ("fetch", SaveRequest(source_url=f"{url}/missing.png"), FetchFailed),
        ("image", SaveRequest(image_base64=b64(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)), InvalidImage),
        ("unsafe", SaveRequest(source_url=f"{url}/to-intranet"), UnsafeUrl),
    ]
    for index, (name, refused, failure) in enumerate(refusals):
        key = f"retry-{name}"
        with pytest.raises(failure):
            await saver.save(alice_caller, replace(refused, idempotency_key=key))
        corrected = SaveRequest(image_base64=b64(picture(41 + index)), idempotency_key=key)
        saved = await saver.save(alice_caller, corrected)
        assert not saved.replayed
        again = await saver.save(alice_caller, corrected)
        assert again.asset_id == saved.asset_id and again.replayed
        # The key is now used: a different request under it is still a conflict.
        with pytest.raises(ConflictFailure, match="different save request"):
            await saver.save(alice_caller, replace(corrected, title="another"))
    # Over quota, then corrected by a smaller image under the same key.
    await admin.create_identity(database, "erin@example.com", 9000)
    erin = Caller("erin@example.com", "akey_e", frozenset({"read", "write"}))
    with pytest.raises(QuotaExceeded):
        await saver.save(
            erin, SaveRequest(image_base64=b64(picture(50, size=120)), idempotency_key="q")
        )
    small = await saver.save(
        erin, SaveRequest(image_base64=b64(picture(51, size=8)), idempotency_key="q")
    )
    assert not small.replayed
    state = await db_state(saving, "alice@example.com")
    assert (state["assets"], state["reserved"], state["active_reservations"]) == (3, 0, 0)


async def test_a_refused_saves_reservation_lets_go_of_its_key_like_an_uploads(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    """Saves and uploads follow one reservation rule (``ingest/reservations.py``): a refused
    attempt's reservation is released and lets go of its key; the retry opens its own."""
    saver = AssetSaver(saving)
    broken = SaveRequest(image_base64=b64(b"\x89PNG\r\n\x1a\n" + b"\0" * 64), idempotency_key="k")
    with pytest.raises(InvalidImage):
        await saver.save(alice_caller, broken)
    saved = await saver.save(
        alice_caller, SaveRequest(image_base64=b64(picture(60)), idempotency_key="k")
    )
    async with saving.database.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT status, idempotency_key, asset_id, reserved_bytes"
                    " FROM mem_asset_upload_reservations WHERE owner_identity = :o"
                    " ORDER BY created_at"
                ),
                {"o": alice_caller.identity},
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        ("released", None, None, 0),
        ("finalized", "k", saved.asset_id, 0),
    ]


async def test_quota_is_refused_with_the_numbers_and_nothing_is_stored(
    saving: MemoryServices, database: Any
) -> None:
    await admin.create_identity(database, "carol@example.com", 1000)
    carol = Caller("carol@example.com", "akey_c", frozenset({"read", "write"}))
    with pytest.raises(QuotaExceeded) as caught:
        await AssetSaver(saving).save(carol, SaveRequest(image_base64=b64(picture(7))))
    assert caught.value.code == "quota_exceeded"
    assert "> 1000" in caught.value.message and "0 used" in caught.value.message
    assert stored_files(saving) == []
    state = await db_state(saving, "carol@example.com")
    assert state == {
        "assets": 0,
        "objects": 0,
        "jobs": 0,
        "used": 0,
        "reserved": 0,
        "active_reservations": 0,
    }


async def test_a_save_that_exactly_fills_the_quota_is_stored_and_one_byte_less_is_refused(
    saving: MemoryServices, database: Any
) -> None:
    """The quota's boundary: ``used + reserved + bytes > quota`` is refused, so a save whose
    charge (original, preview, vectors) is exactly what is left is stored and fills the quota;
    the same save with one byte less of quota is refused and leaves nothing."""
    saver = AssetSaver(saving)
    await admin.create_identity(database, "meter@example.com", 10**9)
    meter = Caller("meter@example.com", "akey_m", frozenset({"read", "write"}))
    await saver.save(meter, SaveRequest(image_base64=b64(picture(8))))
    charge = (await db_state(saving, "meter@example.com"))["used"]
    assert charge > 0
    await admin.create_identity(database, "exact@example.com", charge)
    exact = Caller("exact@example.com", "akey_x", frozenset({"read", "write"}))
    saved = await saver.save(exact, SaveRequest(image_base64=b64(picture(8))))
    assert not saved.deduplicated
    state = await db_state(saving, "exact@example.com")
    assert (state["assets"], state["used"], state["reserved"]) == (1, charge, 0)
    await admin.create_identity(database, "short@example.com", charge - 1)
    short = Caller("short@example.com", "akey_s", frozenset({"read", "write"}))
    with pytest.raises(QuotaExceeded, match=f"> {charge - 1}"):
        await saver.save(short, SaveRequest(image_base64=b64(picture(8))))
    state = await db_state(saving, "short@example.com")
    assert (state["assets"], state["used"], state["reserved"]) == (0, 0, 0)


async def test_every_hostile_url_is_refused_and_leaves_nothing(
    saving: MemoryServices, alice_caller: Caller, web: WebServer
) -> None:
    saver = AssetSaver(saving)
    for case in HOSTILE:
        with pytest.raises(UnsafeUrl):
            await saver.save(alice_caller, SaveRequest(source_url=case.url.format(port=web.port)))
    assert "/secret" not in web.requested
    assert stored_files(saving) == []
    state = await db_state(saving, "alice@example.com")
    assert (state["assets"], state["objects"], state["used"], state["reserved"]) == (0, 0, 0, 0)
    assert state["active_reservations"] == 0


async def test_every_bad_file_is_refused_and_leaves_nothing(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    saver = AssetSaver(saving)
    for case in BAD:
        data = case.make()
        if not data:
            with pytest.raises(InvalidInputFailure, match="empty"):
                await saver.save(alice_caller, SaveRequest(image_base64=""))
            continue
        with pytest.raises(InvalidImage):
            await saver.save(alice_caller, SaveRequest(image_base64=b64(data)))
    assert stored_files(saving) == []
    state = await db_state(saving, "alice@example.com")
    assert (state["assets"], state["objects"], state["used"], state["reserved"]) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("request_", "error", "fragment"),
    [
        (SaveRequest(), InvalidInputFailure, "exactly one"),
        (
            SaveRequest(source_url="https://img.test/a.png", image_base64="AAAA"),
            InvalidInputFailure,
            "exactly one",
        ),
        (SaveRequest(artifact_id="art_1"), NotFoundFailure, "artifact"),
        (SaveRequest(image_base64="not base64!"), InvalidInputFailure, "base64"),
        (SaveRequest(image_base64="A" * 200_000), InvalidInputFailure, "limit"),
        (
            SaveRequest(image_base64="AAAA", source_ref={"apiKey": "x"}),
            InvalidInputFailure,
            "credential",
        ),
        (SaveRequest(image_base64="AAAA", tags=[" "]), InvalidInputFailure, "empty"),
        (SaveRequest(image_base64="AAAA", tags=["t"] * 33), InvalidInputFailure, "32"),
        (
            SaveRequest(image_base64="AAAA", folder_id="afl_" + "a" * 26),
            InvalidInputFailure,
            "projectId",
        ),
        (
            SaveRequest(image_base64=b64(picture(8)), project_id="apr_" + "a" * 26),
            NotFoundFailure,
            "project",
        ),
        (SaveRequest(image_base64="AAAA", vault="Nope"), NotFoundFailure, "vault"),
        (SaveRequest(image_base64="AAAA", idempotency_key="x" * 201), InvalidInputFailure, "1-200"),
    ],
)
async def test_bad_requests_are_refused_and_change_nothing(
    saving: MemoryServices,
    alice_caller: Caller,
    request_: SaveRequest,
    error: type[ToolFailure],
    fragment: str,
) -> None:
    with pytest.raises(error, match=fragment):
        await AssetSaver(saving).save(alice_caller, request_)
    state = await db_state(saving, "alice@example.com")
    assert (state["assets"], state["used"], state["reserved"]) == (0, 0, 0)
    assert stored_files(saving) == []


async def test_another_owners_project_is_not_found(
    saving: MemoryServices, alice_caller: Caller, bob_caller: Caller
) -> None:
    from memory_tools.workflows import projects

    async with saving.database.unit_of_work() as uow:
        project = await projects.create_project(
            uow, bob_caller, saving, vault="Library", name="Bob's", description=None
        )
    with pytest.raises(NotFoundFailure, match="project"):
        await AssetSaver(saving).save(
            alice_caller,
            SaveRequest(image_base64=b64(picture(9)), project_id=project.project_id),
        )


async def test_a_failed_commit_leaves_orphan_candidates_and_releases_bytes(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    async with saving.database.engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION refuse_asset() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'simulated commit failure'; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_asset BEFORE INSERT ON mem_assets "
                "FOR EACH ROW EXECUTE FUNCTION refuse_asset()"
            )
        )
    with pytest.raises(Exception, match="simulated commit failure"):
        await AssetSaver(saving).save(alice_caller, SaveRequest(image_base64=b64(picture(10))))
    files = stored_files(saving)
    async with saving.database.engine.connect() as conn:
        orphans = sorted(
            (
                await conn.execute(text("SELECT storage_key FROM mem_asset_orphan_candidates"))
            ).scalars()
        )
    assert orphans == files and len(files) == 2
    state = await db_state(saving, "alice@example.com")
    assert (state["objects"], state["used"], state["reserved"]) == (0, 0, 0)
    assert state["active_reservations"] == 0


async def test_expired_reservations_release_their_bytes(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    from datetime import UTC, datetime, timedelta

    async with saving.database.unit_of_work() as uow:
        reservation, _ = await uow.quota.open_reservation(
            "alice@example.com",
            operation="asset_upload",
            idempotency_key=None,
            expected_bytes=5000,
            expires_at=datetime.now(UTC) - timedelta(seconds=1),
        )
        await uow.quota.reserve("alice@example.com", reservation.id, 5000)
    assert (await db_state(saving, "alice@example.com"))["reserved"] == 5000
    async with saving.database.unit_of_work() as uow:
        assert await uow.quota.release_expired() == 1
    state = await db_state(saving, "alice@example.com")
    assert state["reserved"] == 0 and state["active_reservations"] == 0


async def test_quota_holds_under_50_concurrent_saves(saving: MemoryServices, database: Any) -> None:
    sizes = []
    for seed in range(50):
        data = picture(100 + seed)
        sizes.append(len(data))
    # Room for roughly ten images (originals, previews and vectors).
    per_image = max(sizes) + 1200 + 2056
    await admin.create_identity(database, "dave@example.com", per_image * 10)
    dave = Caller("dave@example.com", "akey_d", frozenset({"read", "write"}))
    saver = AssetSaver(saving)
    outcomes: list[str] = []

    async def one(seed: int) -> None:
        try:
            await saver.save(dave, SaveRequest(image_base64=b64(picture(100 + seed))))
            outcomes.append("saved")
        except QuotaExceeded:
            outcomes.append("quota")

    async with anyio.create_task_group() as group:
        for seed in range(50):
            group.start_soon(one, seed)
    state = await db_state(saving, "dave@example.com")
    async with saving.database.unit_of_work() as uow:
        usage = await uow.quota.usage("dave@example.com")
    assert outcomes.count("saved") == state["assets"] >= 5
    assert outcomes.count("quota") == 50 - state["assets"] > 0
    assert usage.used_bytes <= usage.quota_bytes
    assert state["reserved"] == 0 and state["active_reservations"] == 0
    assert len(stored_files(saving)) == 2 * state["objects"] == 2 * state["assets"]


async def test_50_concurrent_saves_with_one_idempotency_key_make_one_asset(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    saver = AssetSaver(saving)
    request = SaveRequest(image_base64=b64(picture(11)), idempotency_key="same-key")
    results: list[str] = []

    async def one() -> None:
        results.append((await saver.save(alice_caller, request)).asset_id)

    async with anyio.create_task_group() as group:
        for _ in range(50):
            group.start_soon(one)
    assert len(results) == 50 and len(set(results)) == 1
    state = await db_state(saving, "alice@example.com")
    assert (state["assets"], state["objects"], state["reserved"]) == (1, 1, 0)


async def test_concurrent_identical_bytes_converge_on_one_object(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    saver = AssetSaver(saving)
    data = b64(picture(12))
    results = []

    async def one(index: int) -> None:
        results.append(
            await saver.save(alice_caller, SaveRequest(image_base64=data, title=f"t{index}"))
        )

    async with anyio.create_task_group() as group:
        for index in range(8):
            group.start_soon(one, index)
    assert len({r.object_id for r in results}) == 1
    assert len({r.asset_id for r in results}) == 8
    assert len(stored_files(saving)) == 2  # losers' uploads were discarded
    state = await db_state(saving, "alice@example.com")
    assert state["objects"] == 1 and state["reserved"] == 0


async def test_a_shared_writer_saves_into_the_owners_quota(
    saving: MemoryServices, alice_caller: Caller, bob_caller: Caller, database: Any
) -> None:
    await admin.grant(database, "alice@example.com", "Library", "bob@example.com", "write")
    result = await AssetSaver(saving).save(
        bob_caller,
        SaveRequest(image_base64=b64(picture(13)), vault="alice@example.com/Library"),
    )
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", result.asset_id)
    assert asset is not None and asset.created_by == "bob@example.com"
    assert (await db_state(saving, "alice@example.com"))["used"] > 0
    assert (await db_state(saving, "bob@example.com"))["used"] == 0


async def test_a_grantee_repeating_the_owners_idempotency_key_gets_a_conflict_not_her_save(
    saving: MemoryServices, alice_caller: Caller, bob_caller: Caller, database: Any
) -> None:
    """Keys are the vault owner's: a writer of her shared vault shares her key space, and the
    same request under her key is still another person's request."""
    await admin.grant(database, "alice@example.com", "Library", "bob@example.com", "write")
    request = SaveRequest(
        image_base64=b64(picture(15)),
        vault="alice@example.com/Library",
        title="Quarterly chart",
        idempotency_key="report-1",
    )
    saver = AssetSaver(saving)
    hers = await saver.save(alice_caller, request)
    assert (await saver.save(alice_caller, request)).asset_id == hers.asset_id  # her repeat
    before = await db_state(saving, "alice@example.com")
    with pytest.raises(ConflictFailure, match="different save request"):
        await saver.save(bob_caller, request)
    assert await db_state(saving, "alice@example.com") == before


def test_settings_fixture_is_the_default(settings: MemorySettings) -> None:
    assert settings.asset_fetch_allow_http is False
    assert settings.asset_fetch_allowed_ports == [80, 443]


async def test_identical_bytes_are_charged_once_and_each_images_vectors_apart(
    saving: MemoryServices, alice_caller: Caller, bob_caller: Caller
) -> None:
    """The quota counts an owner's stored bytes once however many images share them (their
    vectors are each image's own); another owner's copy is charged to that owner."""
    saver = AssetSaver(saving)
    data = b64(picture(14))
    vector_bytes = 1024 * 2 + 8  # one halfvec(1024) and its code
    first = await saver.save(alice_caller, SaveRequest(image_base64=data))
    after_first = (await db_state(saving, "alice@example.com"))["used"]
    second = await saver.save(alice_caller, SaveRequest(image_base64=data))
    after_second = (await db_state(saving, "alice@example.com"))["used"]
    theirs = await saver.save(bob_caller, SaveRequest(image_base64=data))
    assert second.deduplicated and second.object_id == first.object_id
    assert after_second - after_first == vector_bytes
    assert not theirs.deduplicated
    assert (await db_state(saving, "bob@example.com"))["used"] == after_first
    assert (await db_state(saving, "alice@example.com"))["used"] == after_second

"""The trash (``memory_tools.workflows.trash``): who sees which deleted images, restoring from it, and
purging one now without deleting bytes another image still needs."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
from fastmcp import Client
from sqlalchemy import text

from memory_db.storage import LocalAssetObjectStore
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices, ToolFailure
from memory_tools.access import authenticate
from memory_tools.operations import admin
from memory_tools.workflows import changes, trash

from ..locks import backend_pid, until_blocked_by
from ..pictures import b64, picture, stored_files
from ..tool_calls import call as _call
from ..workflow_calls import refused, run, run_outside

OWNER = "alice@example.com"
MISSING = "ast_" + "z" * 26


async def _scalar(services: MemoryServices, sql: str, **params: Any) -> Any:
    async with services.database.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def _used(services: MemoryServices, owner: str = OWNER) -> int:
    sql = "SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"
    return int(await _scalar(services, sql, o=owner))


async def _object_status(services: MemoryServices, object_id: str) -> str:
    sql = "SELECT status FROM mem_asset_objects WHERE id = :i"
    return str(await _scalar(services, sql, i=object_id))


async def _operations(services: MemoryServices, operation: str) -> list[dict[str, Any]]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT actor_identity, target_id, detail FROM mem_provenance "
                "WHERE operation = :op ORDER BY created_at"
            ),
            {"op": operation},
        )
        return [{"actor": a, "target": t, "detail": d} for a, t, d in rows.all()]


async def _save_and_delete(client: Client[Any], seed: int, title: str) -> dict[str, Any]:
    saved = await _call(
        client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": title}
    )
    await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
    return saved


async def test_the_trash_lists_what_the_caller_could_restore(
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Callable[..., Any],
) -> None:
    reader = await make_person("reader@example.com")
    writer = await make_person("writer@example.com")
    await admin.grant(saving.database, OWNER, "Library", reader.email, "read")
    await admin.grant(saving.database, OWNER, "Library", writer.email, "write")
    async with client_as(alice.key) as client:
        older = await _save_and_delete(client, 1, "Old lighthouse")
        newer = await _save_and_delete(client, 2, "New lighthouse")
        live = await _call(client, "image_asset_save", {"imageBase64": b64(picture(3))})
    async with client_as(bob.key) as client:
        bobs = await _save_and_delete(client, 4, "Bob's pier")

    page = await run(saving, alice.key, trash.list_trash, limit=1)
    assert [item.asset_id for item in page.items] == [newer["assetId"]]
    item = page.items[0]
    assert (item.vault, item.title) == ("Library", "New lighthouse")
    assert item.purge_at - item.deleted_at == changes.delete_grace(saving)
    assert item.preview is not None and item.preview.url
    assert page.can_restore and page.next_cursor is not None
    rest = await run(saving, alice.key, trash.list_trash, limit=1, cursor=page.next_cursor)
    assert [i.asset_id for i in rest.items] == [older["assetId"]]
    assert rest.next_cursor is None
    assert live["assetId"] not in {i.asset_id for i in page.items + rest.items}

    # The trash of a shared vault is shown to those who may restore from it, as owner/Library.
    shared = await run(saving, writer.key, trash.list_trash)
    assert [i.vault for i in shared.items] == [f"{OWNER}/Library"] * 2
    # A writer restores but does not purge before the window ends; the owner does.
    assert [i.can_purge for i in shared.items] == [False, False]
    assert item.can_purge
    assert (await run(saving, reader.key, trash.list_trash)).items == []
    # Another owner's deleted images are never listed.
    assert bobs["assetId"] not in {i.asset_id for i in shared.items}
    assert [i.asset_id for i in (await run(saving, bob.key, trash.list_trash)).items] == [
        bobs["assetId"]
    ]
    # A cursor of another list, or garbage, is refused.
    assert (await refused(run(saving, alice.key, trash.list_trash, cursor="nope"))).startswith(
        "invalid_input"
    )
    assert (await refused(run(saving, alice.key, trash.list_trash, limit=0))).startswith(
        "invalid_input"
    )


async def test_a_trashed_preview_is_served_but_never_its_original(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        saved = await _save_and_delete(client, 1, "Lighthouse")
    async with saving.database.unit_of_work() as uow:
        stored = await uow.objects.get(OWNER, saved["objectId"])
        assert stored.status == "deleting"
        assert stored.preview_storage_key is not None
        assert await uow.objects.for_storage_key(stored.preview_storage_key) is not None
        assert await uow.objects.for_storage_key(stored.storage_key) is None


async def test_purging_now_deletes_bytes_no_other_image_needs(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        await _call(client, "image_asset_save", {"imageBase64": b64(picture(9))})
        files, used = stored_files(saving), await _used(saving)
        saved = await _save_and_delete(client, 1, "Lighthouse")
        assert len(stored_files(saving)) == len(files) + 2
    async with saving.database.unit_of_work() as uow:
        stored = await uow.objects.get(OWNER, saved["objectId"])
    size = stored.bytes + (stored.preview_bytes or 0)
    assert await _used(saving) == used + size  # counted until the purge

    purged = await run_outside(saving, alice.key, trash.purge_asset, asset_id=saved["assetId"])
    assert purged.bytes_deleted and purged.bytes_kept is None
    assert purged.freed_bytes == size
    assert stored_files(saving) == files
    assert await _used(saving) == used
    assert await _object_status(saving, saved["objectId"]) == "deleted"
    assert [e["target"] for e in await _operations(saving, "asset_purge")] == [saved["assetId"]]
    assert [(e["actor"], e["target"]) for e in await _operations(saving, "asset_object_purge")] == [
        (OWNER, saved["objectId"])
    ]
    # Gone from the trash, not restorable, and not purged twice.
    assert (await run(saving, alice.key, trash.list_trash)).items == []
    restore = run(saving, alice.key, changes.restore_asset, asset_id=saved["assetId"])
    assert (await refused(restore)).startswith("not_found")
    again = run_outside(saving, alice.key, trash.purge_asset, asset_id=saved["assetId"])
    assert (await refused(again)).startswith("not_found")


async def test_purging_keeps_bytes_a_live_or_restorable_image_shares(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    data = b64(picture(5))
    async with client_as(alice.key) as client:
        first = await _call(client, "image_asset_save", {"imageBase64": data, "title": "One"})
        second = await _call(client, "image_asset_save", {"imageBase64": data, "title": "Two"})
        assert second["objectId"] == first["objectId"]
        files = stored_files(saving)
        await _call(client, "image_asset_delete", {"assetId": first["assetId"]})
        # The other image is live: the purge takes the first out of the trash, bytes stay.
        used = await _used(saving)
        kept = await run_outside(saving, alice.key, trash.purge_asset, asset_id=first["assetId"])
        assert not kept.bytes_deleted and kept.bytes_kept and "1 other image" in kept.bytes_kept
        assert stored_files(saving) == files and await _used(saving) == used
        assert await _object_status(saving, first["objectId"]) == "available"
        # Purged means purged, though its bytes are still there: it cannot come back.
        restore = run(saving, alice.key, changes.restore_asset, asset_id=first["assetId"])
        assert (await refused(restore)).startswith("not_found")
        assert first["assetId"] not in {
            i.asset_id for i in (await run(saving, alice.key, trash.list_trash)).items
        }

        # Both deleted: the bytes stay while the second may still be restored...
        third = await _call(client, "image_asset_save", {"imageBase64": data, "title": "Three"})
        await _call(client, "image_asset_delete", {"assetId": second["assetId"]})
        await _call(client, "image_asset_delete", {"assetId": third["assetId"]})
        kept = await run_outside(saving, alice.key, trash.purge_asset, asset_id=third["assetId"])
        assert not kept.bytes_deleted and stored_files(saving) == files
        back = await _call(client, "image_asset_restore", {"assetId": second["assetId"]})
        assert back["alreadyActive"] is False
        got = await _call(client, "image_asset_get", {"assetId": second["assetId"]})
        assert got["status"] == "processing"
        # ...and the restored image still has them.
        assert stored_files(saving) == files
        assert await _object_status(saving, first["objectId"]) == "available"
        # Once the last image that needs them is purged, they go.
        await _call(client, "image_asset_delete", {"assetId": second["assetId"]})
        gone = await run_outside(saving, alice.key, trash.purge_asset, asset_id=second["assetId"])
        assert gone.bytes_deleted and len(stored_files(saving)) == len(files) - 2


async def test_only_the_owner_or_an_admin_purges_and_others_learn_nothing(
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Callable[..., Any],
) -> None:
    grantees = {p: await make_person(f"{p}er@example.com") for p in ("read", "write", "admin")}
    for permission, person in grantees.items():
        await admin.grant(saving.database, OWNER, "Library", person.email, permission)
    safe = await make_person(OWNER, ("read", "write"))
    async with client_as(alice.key) as client:
        one = await _save_and_delete(client, 1, "One")
        live = await _call(client, "image_asset_save", {"imageBase64": b64(picture(2))})

    async def purge(key: str, asset_id: str) -> str:
        return await refused(run_outside(saving, key, trash.purge_asset, asset_id=asset_id))

    assert (await purge(bob.key, one["assetId"])) == (await purge(bob.key, MISSING))
    assert (await purge(bob.key, one["assetId"])).startswith("not_found")
    assert (await purge(grantees["read"].key, one["assetId"])).startswith("forbidden")
    assert (await purge(grantees["write"].key, one["assetId"])).startswith("forbidden")
    assert (await purge(safe.key, one["assetId"])).startswith("forbidden")  # no destructive
    assert (await purge(alice.key, live["assetId"])).startswith("not_found")  # not in the trash
    done = await run_outside(
        saving, grantees["admin"].key, trash.purge_asset, asset_id=one["assetId"]
    )
    # The bytes went, but a grantee is not told: it would say what the owner stores elsewhere.
    assert done.vault == f"{OWNER}/Library" and not done.bytes_deleted
    assert done.bytes_kept is None and done.freed_bytes == 0


async def test_a_purge_racing_a_restore_of_the_same_image_never_loses_its_bytes(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    """Whichever commits first wins; the other answers not_found, and a live image always
    keeps its bytes."""
    outcomes: list[str] = []
    async with client_as(alice.key) as client:
        for seed in range(6):
            saved = await _save_and_delete(client, 20 + seed, f"Race {seed}")
            asset_id = saved["assetId"]
            results: dict[str, str] = {}
            calls = {
                "restore": run(saving, alice.key, changes.restore_asset, asset_id=asset_id),
                "purge": run_outside(saving, alice.key, trash.purge_asset, asset_id=asset_id),
            }
            async with anyio.create_task_group() as group:
                for name in sorted(calls, reverse=seed % 2 == 1):
                    group.start_soon(_settle, calls[name], results, name)
            assert sorted(results.values()) == ["not_found", "ok"], results
            status = await _object_status(saving, saved["objectId"])
            if results["restore"] == "ok":
                got = await _call(client, "image_asset_get", {"assetId": asset_id})
                assert got["status"] == "processing" and status == "available"
            else:
                assert status == "deleted"
            outcomes.append("restored" if results["restore"] == "ok" else "purged")
    # Exactly the restored images' bytes remain (an original and a preview each).
    assert len(stored_files(saving)) == 2 * outcomes.count("restored")


async def _settle(call: Awaitable[Any], results: dict[str, str], name: str) -> None:
    """Run ``call`` and note ``ok`` or its failure code under ``name``."""
    try:
        await call
        results[name] = "ok"
    except ToolFailure as failure:
        results[name] = failure.code


async def test_a_purge_waits_for_a_restore_in_progress_and_then_finds_the_image_live(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    """The restore holds the image's row lock until it commits: the purge waits for it, then
    answers not_found, and the restored image keeps its bytes."""
    async with client_as(alice.key) as client:
        saved = await _save_and_delete(client, 1, "Lighthouse")
    files = stored_files(saving)
    results: dict[str, str] = {}
    restored, release = anyio.Event(), anyio.Event()
    holder: list[int] = []

    async def restore_and_hold() -> None:
        async with saving.database.unit_of_work() as uow:
            caller = await authenticate(uow, alice.key)
            await changes.restore_asset(uow, caller, saving, asset_id=saved["assetId"])
            holder.append(await backend_pid(session_of(uow)))
            restored.set()
            await release.wait()  # commits when released

    async with anyio.create_task_group() as group:
        group.start_soon(restore_and_hold)
        await restored.wait()
        purge = run_outside(saving, alice.key, trash.purge_asset, asset_id=saved["assetId"])
        group.start_soon(_settle, purge, results, "purge")
        await until_blocked_by(saving, holder[0])
        assert results == {}  # waiting for the restore's lock
        release.set()
    assert results == {"purge": "not_found"}
    assert stored_files(saving) == files
    assert await _object_status(saving, saved["objectId"]) == "available"


async def test_a_purge_the_store_refuses_is_finished_by_the_sweep(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    """The image is purged at once; its bytes, due now, are taken by the next sweep, and a save
    of the same bytes meanwhile stores a fresh copy instead of taking the doomed one back."""
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    async with client_as(alice.key) as client:
        saved = await _save_and_delete(client, 1, "Lighthouse")
    async with saving.database.unit_of_work() as uow:
        stored = await uow.objects.get(OWNER, saved["objectId"])
    used = await _used(saving)
    # A directory where the original's file was: the store's delete fails, as a full or
    # read-only disk would make it.
    original = store.root / stored.storage_key
    kept_bytes = original.read_bytes()
    original.unlink()
    (original / "blocker").mkdir(parents=True)

    purged = await run_outside(saving, alice.key, trash.purge_asset, asset_id=saved["assetId"])
    assert not purged.bytes_deleted and purged.freed_bytes == 0
    assert purged.bytes_kept is not None and "sweep retries" in purged.bytes_kept
    assert await _object_status(saving, saved["objectId"]) == "deleting"
    assert await _used(saving) == used
    restore = run(saving, alice.key, changes.restore_asset, asset_id=saved["assetId"])
    assert (await refused(restore)).startswith("not_found")
    async with client_as(alice.key) as client:
        again = await _call(client, "image_asset_save", {"imageBase64": b64(picture(1))})
    assert again["objectId"] != saved["objectId"]

    shutil.rmtree(original)
    original.write_bytes(kept_bytes)
    before_sweep = await _used(saving)
    assert await changes.purge_deleted_objects(saving) == 1
    assert await _object_status(saving, saved["objectId"]) == "deleted"
    assert not original.exists()
    assert await _used(saving) == before_sweep - stored.bytes - (stored.preview_bytes or 0)
    purges = await _operations(saving, "asset_object_purge")
    assert [(e["actor"], e["target"]) for e in purges] == [("system:worker", saved["objectId"])]


async def test_a_read_only_server_neither_restores_nor_purges(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        saved = await _save_and_delete(client, 1, "Lighthouse")
    frozen = replace(saving, read_only=True)
    listed = await run(frozen, alice.key, trash.list_trash)  # reading is fine
    assert [item.asset_id for item in listed.items] == [saved["assetId"]]
    for call in (
        run(frozen, alice.key, changes.restore_asset, asset_id=saved["assetId"]),
        run_outside(frozen, alice.key, trash.purge_asset, asset_id=saved["assetId"]),
    ):
        assert (await refused(call)).startswith("forbidden: this server is read-only")
    assert await _object_status(saving, saved["objectId"]) == "deleting"

"""ASSET_DELETE_GRACE_HOURS and ``image_asset_restore``: a deleted image stays recoverable for the
window (never found by search meanwhile), comes back where it was and is embedded again; after
the window its bytes are purged and a restore answers ``not_found``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_tools import MemoryServices
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64, picture, stored_files
from ..tool_calls import call as _call
from ..tool_calls import error as _error

OWNER = "alice@example.com"


async def _scalar(services: MemoryServices, sql: str, **params: Any) -> Any:
    async with services.database.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def _used(services: MemoryServices) -> int:
    sql = "SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"
    return int(await _scalar(services, sql, o=OWNER))


async def _object_of(services: MemoryServices, asset_id: str) -> str:
    return str(
        await _scalar(services, "SELECT object_id FROM mem_assets WHERE id = :a", a=asset_id)
    )


async def _found(client: Client[Any], asset_id: str) -> bool:
    hits = await _call(client, "image_asset_search", {"query": "lighthouse", "limit": 30})
    return asset_id in {hit["assetId"] for hit in hits["results"]}


async def _age_deletion(services: MemoryServices, hours: float) -> None:
    """Pretend the deletions happened ``hours`` ago (the clock cannot be moved for a test)."""
    async with services.database.engine.begin() as conn:
        await conn.execute(
            text("UPDATE mem_assets SET deleted_at = deleted_at - make_interval(secs => :s)"),
            {"s": hours * 3600},
        )
        await conn.execute(
            text(
                "UPDATE mem_asset_objects SET updated_at = updated_at - make_interval(secs => :s) "
                "WHERE status = 'deleting'"
            ),
            {"s": hours * 3600},
        )


async def test_a_deleted_image_is_restored_within_the_window_and_embedded_again(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    worker = job_worker(saving)
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Coast"}))["projectId"]
        fid = (await _call(client, "image_folder_create", {"projectId": pid, "name": "North"}))[
            "folderId"
        ]
        saved = await _call(
            client,
            "image_asset_save",
            {
                "imageBase64": b64(picture(1)),
                "title": "Lighthouse",
                "projectId": pid,
                "folderId": fid,
            },
        )
        asset = saved["assetId"]
        await worker.drain()
        assert await _found(client, asset)
        files, used = stored_files(saving), await _used(saving)

        deleted = await _call(client, "image_asset_delete", {"assetId": asset})
        assert deleted["vectorsRemoved"] == 2 and deleted["objectReleased"]
        assert not await _found(client, asset)
        assert (await _error(client, "image_asset_get", {"assetId": asset})).startswith("not_found")
        # The sweep keeps the bytes within the window; the quota keeps counting them (the
        # vectors' bytes went back at once).
        await worker.sweep()
        assert stored_files(saving) == files
        assert await _used(saving) == used - 2 * (saving.settings.asset_embed_dim * 2 + 8)

        restored = await _call(client, "image_asset_restore", {"assetId": asset})
        assert restored["alreadyActive"] is False
        assert (restored["projectId"], restored["folderId"], restored["placement"]) == (
            pid,
            fid,
            "original",
        )
        assert (restored["status"], restored["embeddingStatus"]) == ("processing", "pending")
        assert len(restored["jobIds"]) == 2
        assert await _used(saving) == used
        # Idempotent: a second restore changes nothing.
        again = await _call(client, "image_asset_restore", {"assetId": asset})
        assert again["alreadyActive"] is True
        assert sorted(again["jobIds"]) == sorted(restored["jobIds"])

        # The worker embeds it again from the stored bytes; search finds it where it was.
        assert await worker.drain() == 2
        got = await _call(client, "image_asset_get", {"assetId": asset})
        assert (got["status"], got["embeddingStatus"]) == ("ready", "ready")
        assert await _object_of(saving, asset) == saved["objectId"]
        assert await _found(client, asset)
        listed = await _call(
            client, "image_asset_list", {"vault": "Library", "projectId": pid, "folderId": fid}
        )
        assert [item["assetId"] for item in listed["items"]] == [asset]
    restores = await _scalar(
        saving,
        "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_restore' "
        "AND target_id = :a AND outcome = 'succeeded'",
        a=asset,
    )
    assert restores == 1
    assert stored_files(saving) == files


async def test_after_the_window_the_bytes_are_purged_and_restore_is_not_found(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    worker = job_worker(saving)
    grace = saving.settings.asset_delete_grace_hours
    async with client_as(alice.key) as client:
        asset = (
            await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(2)), "title": "Lighthouse"}
            )
        )["assetId"]
        await worker.drain()
        await _call(client, "image_asset_delete", {"assetId": asset})
        # Almost the whole window later: still kept, still restorable.
        await _age_deletion(saving, grace - 0.5)
        await worker.sweep()
        assert len(stored_files(saving)) == 2
        # Past the window: a restore is not_found, and the next sweep purges the bytes.
        await _age_deletion(saving, 1)
        refused = await _error(client, "image_asset_restore", {"assetId": asset})
        assert refused == "not_found: asset not found (its delete grace window has passed)"
        await worker.sweep()
        assert stored_files(saving) == []
        assert await _used(saving) == 0
        assert (await _error(client, "image_asset_restore", {"assetId": asset})).startswith(
            "not_found"
        )


async def test_a_restore_goes_to_the_project_root_or_unfiled_when_its_place_is_gone(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Trips"}))["projectId"]
        fid = (await _call(client, "image_folder_create", {"projectId": pid, "name": "2026"}))[
            "folderId"
        ]
        in_folder = (
            await _call(
                client,
                "image_asset_save",
                {"imageBase64": b64(picture(3)), "projectId": pid, "folderId": fid},
            )
        )["assetId"]
        in_project = (
            await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(4)), "projectId": pid}
            )
        )["assetId"]
        # The folder goes with its image.
        arguments = {"projectId": pid, "folderId": fid, "recursive": True}
        dry = await _call(client, "image_folder_delete", arguments)
        await _call(client, "image_folder_delete", {**arguments, "confirm": dry["confirm"]})
        await _call(client, "image_asset_delete", {"assetId": in_project})
        back = await _call(client, "image_asset_restore", {"assetId": in_folder})
        assert (back["projectId"], back["folderId"], back["placement"]) == (
            pid,
            None,
            "project_root",
        )
        # An archived project takes no images, restored ones included: Unfiled.
        await _call(client, "image_project_archive", {"projectId": pid})
        back = await _call(client, "image_asset_restore", {"assetId": in_project})
        assert (back["projectId"], back["folderId"], back["placement"]) == (
            None,
            None,
            "unfiled",
        )


async def test_the_same_bytes_saved_within_the_window_take_the_deleted_copy_back(
    saving: MemoryServices, client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    """A deleted image's bytes are still stored and counted during the window: saving them
    again shares that copy (no second copy, no second charge), a restore shares it too, and
    the purge after the window leaves it alone because it is in use."""
    worker = job_worker(saving)
    data = b64(picture(5))
    async with client_as(alice.key) as client:
        first = await _call(client, "image_asset_save", {"imageBase64": data})
        used_once = await _used(saving)
        await _call(client, "image_asset_delete", {"assetId": first["assetId"]})
        second = await _call(client, "image_asset_save", {"imageBase64": data})
        assert second["objectId"] == first["objectId"] and second["deduplicated"] is True
        assert await _used(saving) == used_once  # the bytes once, the vectors of one image
        back = await _call(client, "image_asset_restore", {"assetId": first["assetId"]})
        assert back["alreadyActive"] is False
        await _age_deletion(saving, saving.settings.asset_delete_grace_hours + 1)
        await worker.sweep()
        await worker.drain()
        for asset in (first, second):
            got = await _call(client, "image_asset_get", {"assetId": asset["assetId"]})
            assert got["status"] == "ready"
            assert await _object_of(saving, asset["assetId"]) == first["objectId"]
        assert len(stored_files(saving)) == 2  # one original and one preview, shared

"""Move, delete (with the purge of unreferenced bytes), project archive and folder deletion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db.storage import LocalAssetObjectStore
from memory_db.testing.s3_peers import S3Peer
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices, build_memory_server
from memory_tools.jobs.worker import EmbeddingWorker
from memory_tools.operations import admin
from memory_tools.workflows.changes import purge_deleted_objects

from ..locks import backend_pid, until_blocked_by
from ..pictures import b64, picture, stored_files
from ..tool_calls import call as _call
from ..tool_calls import error as _error


@pytest.fixture
def saving(saving: MemoryServices) -> MemoryServices:
    """No delete grace window: these tests are about the purge itself (the window and restores
    are tested in test_restore.py)."""
    return replace(
        saving, settings=saving.settings.model_copy(update={"asset_delete_grace_hours": 0})
    )


async def _scalar(services: MemoryServices, sql: str, **params: Any) -> Any:
    async with services.database.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def _vectors(services: MemoryServices, asset_id: str) -> list[tuple[str, str | None]]:
    async with services.database.engine.connect() as conn:
        index = (
            await conn.execute(text("SELECT index_name FROM mem_vector_index_aliases LIMIT 1"))
        ).scalar_one()
        rows = await conn.execute(
            text(f"SELECT project_id, folder_id FROM {index} WHERE asset_id = :a"), {"a": asset_id}
        )
        return [(r[0], r[1]) for r in rows]


async def _used(services: MemoryServices, owner: str) -> int:
    return int(
        await _scalar(
            services,
            "SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o",
            o=owner,
        )
    )


async def test_move_changes_placement_and_vector_metadata_but_not_the_object(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        project = await _call(client, "image_project_create", {"name": "Trips"})
        pid = project["projectId"]
        folder = await _call(client, "image_folder_create", {"projectId": pid, "name": "May"})
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(1)), "title": "Harbour"}
        )
        await EmbeddingWorker(saving).drain()
        files = stored_files(saving)
        moved = await _call(
            client,
            "image_asset_move",
            {"assetId": saved["assetId"], "projectId": pid, "folderId": folder["folderId"]},
        )
        again = await _call(
            client,
            "image_asset_move",
            {"assetId": saved["assetId"], "projectId": pid, "folderId": folder["folderId"]},
        )
        in_folder = await _call(
            client,
            "image_asset_search",
            {
                "query": "harbour",
                "vault": "Library",
                "projectId": pid,
                "folderId": folder["folderId"],
            },
        )
        got = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        back = await _call(client, "image_asset_move", {"assetId": saved["assetId"]})
    assert moved == {
        "assetId": saved["assetId"],
        "vault": "Library",
        "projectId": pid,
        "folderId": folder["folderId"],
        "objectId": saved["objectId"],
        "moved": True,
    }
    assert again["moved"] is False
    assert [r["assetId"] for r in in_folder["results"]] == [saved["assetId"]]
    assert (got["projectId"], got["folderId"]) == (pid, folder["folderId"])
    assert back["moved"] is True and (back["projectId"], back["folderId"]) == (None, None)
    # The bytes and their keys are untouched; only metadata moved (two vectors, both re-homed).
    assert stored_files(saving) == files
    assert await _vectors(saving, saved["assetId"]) == [(None, None), (None, None)]
    moves = await _scalar(
        saving, "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_move'"
    )
    assert moves == 2  # the no-op move records nothing


def _versions(peer: S3Peer, bucket: str) -> list[tuple[str, str, str]]:
    """Every version of every key in a versioned bucket: a write of any kind (a put, a copy,
    a copy onto itself) adds one."""
    listed = peer.client().list_object_versions(Bucket=bucket)
    return sorted((v["Key"], v["VersionId"], v["ETag"]) for v in listed.get("Versions", []))


async def test_a_move_on_s3_writes_no_object_and_keeps_its_keys(
    alice: Any, saving: MemoryServices, moto_peer: S3Peer
) -> None:
    store, bucket = moto_peer.new_store("mv")
    moto_peer.client().put_bucket_versioning(
        Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    services = replace(saving, store=store, default_api_key=alice.key)
    try:
        async with Client(build_memory_server(services)) as client:
            one = (await _call(client, "image_project_create", {"name": "One"}))["projectId"]
            two = (await _call(client, "image_project_create", {"name": "Two"}))["projectId"]
            folder = await _call(client, "image_folder_create", {"projectId": one, "name": "F"})
            saved = await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(8)), "title": "Quay"}
            )
            await EmbeddingWorker(services).drain()
            before = _versions(moto_peer, bucket)
            shown = await _call(
                client, "image_asset_get", {"assetId": saved["assetId"], "includePreview": True}
            )
            for target in (
                {"projectId": one, "folderId": folder["folderId"]},
                {"projectId": two},
                {},
            ):
                moved = await _call(
                    client, "image_asset_move", {"assetId": saved["assetId"], **target}
                )
                assert moved["moved"] and moved["objectId"] == saved["objectId"]
            # Back into the folder, then rename the folder and move it under another one.
            await _call(
                client,
                "image_asset_move",
                {"assetId": saved["assetId"], "projectId": one, "folderId": folder["folderId"]},
            )
            other = await _call(client, "image_folder_create", {"projectId": one, "name": "G"})
            await _call(
                client,
                "image_folder_update",
                {
                    "projectId": one,
                    "folderId": folder["folderId"],
                    "name": "Renamed",
                    "parentId": other["folderId"],
                },
            )
            after = await _call(
                client, "image_asset_get", {"assetId": saved["assetId"], "includePreview": True}
            )
    finally:
        await store.close()
    assert after["folderId"] == folder["folderId"]
    # Two keys (original and preview), one version each, before and after every move.
    assert len(before) == 2 and _versions(moto_peer, bucket) == before
    path = httpx.URL(shown["preview"]["url"]).path
    assert httpx.URL(after["preview"]["url"]).path == path
    assert all(part not in path for part in ("Quay", "Renamed", one, two, folder["folderId"]))


async def test_bad_moves_are_refused_and_change_nothing(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Any,
    saving: MemoryServices,
) -> None:
    reader = await make_person("reader@example.com", scopes=("read", "write"))
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        one = await _call(client, "image_project_create", {"name": "One"})
        two = await _call(client, "image_project_create", {"name": "Two"})
        old = await _call(client, "image_project_create", {"name": "Old"})
        await _call(client, "image_project_archive", {"projectId": old["projectId"]})
        folder = await _call(
            client, "image_folder_create", {"projectId": one["projectId"], "name": "F"}
        )
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(2))})
        asset = saved["assetId"]
        cases = {
            "folder without project": (
                {"assetId": asset, "folderId": folder["folderId"]},
                "invalid_input: folderId: give the folder's projectId as well",
            ),
            "folder of another project": (
                {"assetId": asset, "projectId": two["projectId"], "folderId": folder["folderId"]},
                "not_found: folder not found",
            ),
            "archived project": (
                {"assetId": asset, "projectId": old["projectId"]},
                "conflict: the project is archived; it takes no new images",
            ),
            "missing project": (
                {"assetId": asset, "projectId": "apr_" + "a" * 26},
                "not_found: project not found",
            ),
            "missing asset": (
                {"assetId": "ast_" + "a" * 26, "projectId": one["projectId"]},
                "not_found: asset not found",
            ),
        }
        for name, (arguments, expected) in cases.items():
            assert await _error(client, "image_asset_move", arguments) == expected, name
    async with client_as(bob.key) as client:
        theirs = await _error(
            client, "image_asset_move", {"assetId": asset, "projectId": one["projectId"]}
        )
    async with client_as(reader.key) as client:
        read_only = await _error(client, "image_asset_move", {"assetId": asset})
    assert theirs == "not_found: asset not found"
    assert read_only == "forbidden: you have read access to this vault; write access is needed"
    async with client_as(alice.key) as client:
        got = await _call(client, "image_asset_get", {"assetId": asset})
    assert (got["projectId"], got["folderId"]) == (None, None)


async def test_delete_removes_vectors_at_once_and_bytes_on_the_next_sweep(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(3)), "title": "Harbour"}
        )
        await EmbeddingWorker(saving).drain()
        assert len(await _vectors(saving, saved["assetId"])) == 2
        used_before = await _used(saving, "alice@example.com")
        assert used_before > 0 and len(stored_files(saving)) == 2
        deleted = await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
        # Vectors are gone with the delete; the bytes wait for the sweep.
        assert await _vectors(saving, saved["assetId"]) == []
        assert len(stored_files(saving)) == 2
        gone = await _error(client, "image_asset_get", {"assetId": saved["assetId"]})
        listed = await _call(client, "image_asset_list", {})
        found = await _call(client, "image_asset_search", {"imageBase64": b64(picture(3))})
        await EmbeddingWorker(saving).sweep()
        repeat = await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
    assert deleted == {
        "assetId": saved["assetId"],
        "vault": "Library",
        "status": "deleted",
        "alreadyDeleted": False,
        "jobsCancelled": 0,
        "vectorsRemoved": 2,
        "objectReleased": True,
    }
    assert gone == "not_found: asset not found"
    assert listed["items"] == [] and found["results"] == []
    assert stored_files(saving) == []
    assert await _used(saving, "alice@example.com") == 0
    status = await _scalar(
        saving, "SELECT status FROM mem_asset_objects WHERE id = :o", o=saved["objectId"]
    )
    assert status == "deleted"
    assert repeat["alreadyDeleted"] is True and repeat["vectorsRemoved"] == 0
    operations = await _scalar(
        saving,
        "SELECT array_agg(operation ORDER BY created_at) FROM mem_provenance "
        "WHERE operation IN ('asset_delete', 'asset_object_purge')",
    )
    assert operations == ["asset_delete", "asset_object_purge"]


async def test_deleting_a_pending_asset_cancels_its_jobs(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(4)), "title": "Pending"}
        )
        deleted = await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
    assert deleted["jobsCancelled"] == 2 and deleted["vectorsRemoved"] == 0
    assert await EmbeddingWorker(saving).drain() == 0
    statuses = await _scalar(
        saving,
        "SELECT array_agg(DISTINCT status) FROM mem_asset_embedding_jobs WHERE asset_id = :a",
        a=saved["assetId"],
    )
    assert statuses == ["cancelled"]
    assert await _vectors(saving, saved["assetId"]) == []


async def test_shared_bytes_stay_until_the_last_asset_using_them_is_deleted(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        first = await _call(client, "image_asset_save", {"imageBase64": b64(picture(5))})
        second = await _call(client, "image_asset_save", {"imageBase64": b64(picture(5))})
        assert second["deduplicated"] is True and first["objectId"] == second["objectId"]
        await EmbeddingWorker(saving).drain()
        one = await _call(client, "image_asset_delete", {"assetId": first["assetId"]})
        await purge_deleted_objects(saving)
        assert len(stored_files(saving)) == 2
        still = await _call(client, "image_asset_get", {"assetId": second["assetId"]})
        other = await _call(client, "image_asset_delete", {"assetId": second["assetId"]})
        assert await purge_deleted_objects(saving) == 1
    assert one["objectReleased"] is False and other["objectReleased"] is True
    assert still["status"] == "ready"
    assert stored_files(saving) == []
    assert await _used(saving, "alice@example.com") == 0


async def test_a_failed_byte_deletion_is_retried_and_never_restores_access(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    async with client_as(alice.key) as client:
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(6))})
        await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
        # Out-of-band damage: the original's path becomes a non-empty directory, which no
        # unlink can remove (not even as root).
        original = next(p for p in store.root.rglob("original.*") if p.is_file())
        original.unlink()
        original.mkdir()
        (original / "blocker").write_bytes(b"x")
        assert await purge_deleted_objects(saving) == 0
        status = await _scalar(
            saving, "SELECT status FROM mem_asset_objects WHERE id = :o", o=saved["objectId"]
        )
        assert status == "deleting"
        assert await _used(saving, "alice@example.com") > 0  # not refunded until gone
        assert await _error(client, "image_asset_get", {"assetId": saved["assetId"]}) == (
            "not_found: asset not found"
        )
        (original / "blocker").unlink()
        original.rmdir()
        assert await purge_deleted_objects(saving) == 1
    assert await _used(saving, "alice@example.com") == 0


async def test_delete_needs_the_destructive_scope_and_write_authority(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Any,
    saving: MemoryServices,
) -> None:
    writer_key = await make_person("alice@example.com", scopes=("read", "write"))
    reader = await make_person("reader@example.com")
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(7))})
    arguments = {"assetId": saved["assetId"]}
    async with client_as(writer_key.key) as client:
        no_scope = await _error(client, "image_asset_delete", arguments)
    async with client_as(reader.key) as client:
        read_only = await _error(client, "image_asset_delete", arguments)
    async with client_as(bob.key) as client:
        theirs = await _error(client, "image_asset_delete", arguments)
    assert no_scope == "forbidden: this API key lacks the 'destructive' scope"
    assert read_only == "forbidden: you have read access to this vault; write access is needed"
    assert theirs == "not_found: asset not found"
    async with client_as(alice.key) as client:
        assert (await _call(client, "image_asset_get", arguments))["assetId"] == saved["assetId"]
    denied = await _scalar(
        saving,
        "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_delete' "
        "AND outcome = 'denied'",
    )
    assert denied == 2


async def test_archive_keeps_images_and_refuses_new_ones(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        project = await _call(client, "image_project_create", {"name": "Done"})
        pid = project["projectId"]
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(8)), "projectId": pid}
        )
        archived = await _call(client, "image_project_archive", {"projectId": pid})
        again = await _call(client, "image_project_archive", {"projectId": pid})
        folder = await _error(client, "image_folder_create", {"projectId": pid, "name": "x"})
        new_image = await _error(
            client, "image_asset_save", {"imageBase64": b64(picture(9)), "projectId": pid}
        )
        kept = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        missing = await _error(client, "image_project_archive", {"projectId": "apr_" + "a" * 26})
    assert archived["status"] == again["status"] == "archived"
    assert folder.startswith("conflict: the project is archived")
    assert new_image == "conflict: the project is archived; it takes no new images"
    assert kept["projectId"] == pid
    assert missing == "not_found: project not found"
    count = await _scalar(
        saving, "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_project_archive'"
    )
    assert count == 1


async def test_folder_deletion_empty_refused_or_recursive_after_a_dry_run(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices, tmp_path: Path
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        empty = await _call(client, "image_folder_create", {"projectId": pid, "name": "Empty"})
        top = await _call(client, "image_folder_create", {"projectId": pid, "name": "Top"})
        sub = await _call(
            client,
            "image_folder_create",
            {"projectId": pid, "name": "Sub", "parentId": top["folderId"]},
        )
        kept = await _call(client, "image_asset_save", {"imageBase64": b64(picture(10))})
        inside = [
            await _call(
                client,
                "image_asset_save",
                {"imageBase64": b64(picture(seed)), "projectId": pid, "folderId": folder},
            )
            for seed, folder in ((11, top["folderId"]), (12, sub["folderId"]))
        ]
        await EmbeddingWorker(saving).drain()
        base = {"projectId": pid}
        removed_empty = await _call(
            client, "image_folder_delete", {**base, "folderId": empty["folderId"]}
        )
        refused = await _error(client, "image_folder_delete", {**base, "folderId": top["folderId"]})
        dry = await _call(
            client,
            "image_folder_delete",
            {**base, "folderId": top["folderId"], "recursive": True},
        )
        still = await _call(client, "image_asset_list", {})
        wrong = await _error(
            client,
            "image_folder_delete",
            {**base, "folderId": top["folderId"], "recursive": True, "confirm": "del_x"},
        )
        done = await _call(
            client,
            "image_folder_delete",
            {**base, "folderId": top["folderId"], "recursive": True, "confirm": dry["confirm"]},
        )
        after = await _call(client, "image_asset_list", {})
        tree = await _call(client, "image_folder_list", {"projectId": pid})
        again = await _error(client, "image_folder_delete", {**base, "folderId": top["folderId"]})
        into_deleted = await _error(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(15)), "projectId": pid, "folderId": sub["folderId"]},
        )
        reuse = await _call(client, "image_folder_create", {"projectId": pid, "name": "Top"})
    assert removed_empty["deleted"] is True and removed_empty["folders"] == 1
    assert refused == (
        "conflict: the folder holds 2 image(s) (subfolders included) and 1 subfolder(s): move "
        "them first, or delete recursively (recursive=true, after a dry run)"
    )
    total = sum(item["bytes"] for item in inside)
    assert dry["deleted"] is False and (dry["folders"], dry["assets"], dry["bytes"]) == (
        2,
        2,
        total,
    )
    assert dry["confirm"].startswith("del_") and len(still["items"]) == 3
    assert wrong.startswith("conflict: confirm does not match")
    assert done["deleted"] is True and done["confirm"] is None and done["assets"] == 2
    assert [i["assetId"] for i in after["items"]] == [kept["assetId"]]
    assert tree["folders"] == [] and again == "not_found: folder not found"
    assert into_deleted == "not_found: folder not found"
    assert reuse["name"] == "Top"
    for item in inside:
        assert await _vectors(saving, item["assetId"]) == []
    assert await purge_deleted_objects(saving) == 2
    assert len(stored_files(saving)) == 2  # the kept image's original and preview


async def test_a_dry_run_token_goes_stale_when_the_folder_changes(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        folder = await _call(client, "image_folder_create", {"projectId": pid, "name": "F"})
        arguments = {"projectId": pid, "folderId": folder["folderId"], "recursive": True}
        await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(13)), "projectId": pid, "folderId": folder["folderId"]},
        )
        dry = await _call(client, "image_folder_delete", arguments)
        await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(14)), "projectId": pid, "folderId": folder["folderId"]},
        )
        stale = await _error(
            client, "image_folder_delete", {**arguments, "confirm": dry["confirm"]}
        )
        listed = await _call(client, "image_asset_list", {})
    assert stale.startswith("conflict: confirm does not match what the folder holds now")
    assert len(listed["items"]) == 2


async def test_a_save_racing_a_folder_deletion_never_lands_in_the_deleted_folder(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    import anyio

    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        folder = await _call(client, "image_folder_create", {"projectId": pid, "name": "F"})
        files_before = stored_files(saving)
        outcome: list[str] = []

        started = anyio.Event()

        async def save() -> None:
            await started.wait()
            outcome.append(
                await _error(
                    client,
                    "image_asset_save",
                    {
                        "imageBase64": b64(picture(16)),
                        "projectId": pid,
                        "folderId": folder["folderId"],
                    },
                )
            )

        # The saving client's task starts outside the deletion's unit of work, as another
        # caller's would: a task started inside one may not open a second (NestedUnitOfWork).
        async with anyio.create_task_group() as group:
            group.start_soon(save)
            # A folder deletion in flight: its folder rows locked and marked, not yet committed.
            async with saving.database.unit_of_work() as deleting:
                scope = (await deleting.vaults.accessible("alice@example.com"))[0].scope
                await deleting.folders.lock(scope, [folder["folderId"]])
                await deleting.folders.mark_deleted(scope, [folder["folderId"]])
                holder = await backend_pid(session_of(deleting))
                started.set()
                await until_blocked_by(saving, holder)
                assert outcome == []  # the save waits for the deletion's locks
                await session_of(deleting).commit()
        listed = await _call(client, "image_asset_list", {})
    assert outcome == ["not_found: folder not found"]
    assert listed["items"] == []
    assert stored_files(saving) == files_before
    assert await _used(saving, "alice@example.com") == 0

"""``export`` and ``import`` of one vault: an open format another identity can take in.

Alice's Library (a project with nested folders, an unfiled image, one image in the trash) is
exported, imported into Bob's new vault through the save workflow, embedded there by the worker
and found by search, with the same metadata and bytes. A second import adds nothing; exporting
a vault the owner does not own is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.repositories import AssetFilter
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, NotFoundFailure, build_memory_server
from memory_tools.errors import InvalidInputFailure
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.operations.export import export_vault, import_vault
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64, picture
from ..tool_calls import call

ALICE = "alice@example.com"
BOB = "bob@example.com"
FAST = WorkerConfig(batch_size=8, lease_seconds=30, heartbeat_seconds=10, poll_seconds=0.2)
COMPARED = ("title", "description", "altText", "tags", "mimeType", "width", "height")


@pytest.fixture
def store_services(database: Database, tmp_path: Path) -> MemoryServices:
    store = LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9")
    return MemoryServices(
        database=database,
        store=store,
        settings=MemorySettings(memory_data_dir=tmp_path / "data"),
        embedder=LocalEmbedder(),
    )


async def described(client: Client[Any], vault: str) -> dict[str, dict[str, Any]]:
    """Each image of a vault by title: its metadata and where it is filed."""
    page = await call(client, "image_asset_list", {"vault": vault, "limit": 100})
    projects = {
        p["projectId"]: p["name"]
        for p in (await call(client, "image_project_list", {"vault": vault}))["projects"]
    }
    paths: dict[str, str] = {}
    for project_id in projects:
        tree = await call(client, "image_folder_list", {"vault": vault, "projectId": project_id})
        paths.update({f["folderId"]: f["path"] for f in tree["folders"]})
    found: dict[str, dict[str, Any]] = {}
    for item in page["items"]:
        full = await call(client, "image_asset_get", {"assetId": item["assetId"]})
        shown = {key: full.get(key) for key in COMPARED}
        shown["project"] = projects.get(full.get("projectId") or "")
        shown["folder"] = paths.get(full.get("folderId") or "")
        found[full["title"]] = shown
    return found


async def originals(services: MemoryServices, owner: str, vault: str) -> dict[str, str]:
    """SHA-256 of each live image's original in the store, by title."""
    async with services.database.unit_of_work() as uow:
        record = await uow.vaults.resolve(owner, vault)
        page = await uow.assets.list_visible(
            [record.scope], AssetFilter(), newest_first=False, limit=100
        )
    digests: dict[str, str] = {}
    for stored in page:
        assert stored.storage_key is not None
        data = b"".join([chunk async for chunk in services.store.get_stream(stored.storage_key)])
        digests[stored.asset.title] = hashlib.sha256(data).hexdigest()
    return digests


async def test_a_vault_exported_and_imported_by_another_owner_is_found_there(
    store_services: MemoryServices, database: Database, tmp_path: Path
) -> None:
    services = store_services
    await admin.create_identity(database, ALICE, 10**9)
    await admin.create_identity(database, BOB, 10**9)
    await admin.create_vault(database, ALICE, "Work")
    alice_key = (await admin.create_key(database, ALICE, ["read", "write", "destructive"])).secret
    bob_key = (await admin.create_key(database, BOB, ["read", "write"])).secret

    def client(key: str) -> Client[Any]:
        return Client(build_memory_server(replace(services, default_api_key=key)))

    async with client(alice_key) as alice:
        trips = (await call(alice, "image_project_create", {"name": "Trips"}))["projectId"]
        day = await call(alice, "image_folder_create", {"projectId": trips, "name": "Day 1"})
        morning = await call(alice, "image_folder_create", {
            "projectId": trips, "parentId": day["folderId"], "name": "Morning",
        })  # fmt: skip
        await call(alice, "image_asset_save", {
            "imageBase64": b64(picture(1)), "title": "lighthouse at dawn", "tags": ["coast"],
            "description": "a red lighthouse", "altText": "lighthouse", "projectId": trips,
            "folderId": morning["folderId"], "sourceRef": {"camera": "x100"},
        })  # fmt: skip
        await call(alice, "image_asset_save", {
            "imageBase64": b64(picture(2)), "title": "lighthouse at noon", "projectId": trips,
        })  # fmt: skip
        await call(alice, "image_asset_save", {"imageBase64": b64(picture(3)), "title": "cat"})
        gone = await call(alice, "image_asset_save", {"imageBase64": b64(picture(4))})
        await call(alice, "image_asset_delete", {"assetId": gone["assetId"]})
        await call(alice, "image_asset_save", {
            "imageBase64": b64(picture(5)), "title": "whiteboard", "vault": "Work",
        })  # fmt: skip
        expected = await described(alice, "Library")
    assert len(expected) == 3  # the trashed image is not part of the library

    export = tmp_path / "export"
    report = await export_vault(services, ALICE, "Library", export)
    assert (report.assets, report.projects, report.folders, report.skipped) == (3, 1, 2, [])
    lines = [json.loads(line) for line in (export / "assets.jsonl").read_text().splitlines()]
    assert sorted(entry["title"] for entry in lines) == sorted(expected)
    dawn = next(entry for entry in lines if entry["title"] == "lighthouse at dawn")
    assert dawn["folder"]["path"] == "Day 1/Morning" and dawn["project"]["name"] == "Trips"
    assert dawn["sourceRef"] == {"camera": "x100"}
    for entry in lines:
        data = (export / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"]
    vault = json.loads((export / "vault.json").read_text())
    assert {f["path"] for f in vault["folders"]} == {"Day 1", "Day 1/Morning"}
    # Private images and their metadata: only the exporting user may read any of it.
    modes = {p.relative_to(export).as_posix(): p.stat().st_mode & 0o777 for p in export.rglob("*")}
    assert export.stat().st_mode & 0o077 == 0
    assert {name: mode for name, mode in modes.items() if mode & 0o077} == {}

    first = await import_vault(services, BOB, "From Alice", export)
    assert (first.saved, first.replayed, first.projects_created, first.folders_created) == (
        3, 0, 1, 2,
    )  # fmt: skip
    again = await import_vault(services, BOB, "From Alice", export)
    assert (again.saved, again.replayed, again.projects_created, again.folders_created) == (
        0, 3, 0, 0,
    )  # fmt: skip
    assert await job_worker(services, FAST).drain() > 0

    async with client(bob_key) as bob:
        assert await described(bob, "From Alice") == expected
        found = await call(bob, "image_asset_search", {"query": "lighthouse"})
        assert sorted(hit["title"] for hit in found["results"]) == [
            "lighthouse at dawn",
            "lighthouse at noon",
        ]
    assert await originals(services, BOB, "From Alice") == await originals(
        services, ALICE, "Library"
    )
    async with database.engine.connect() as conn:
        saves = await conn.execute(
            text(
                "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_save' "
                "AND owner_identity = :owner AND outcome = 'succeeded'"
            ),
            {"owner": BOB},
        )
        assert saves.scalar_one() == 3  # the import saved as Bob, recorded once per image

    # An original whose bytes changed in the store is left out and named, never exported wrong.
    async with database.unit_of_work() as uow:
        library = await uow.vaults.resolve(ALICE, "Library")
        page = await uow.assets.list_visible(
            [library.scope], AssetFilter(), newest_first=False, limit=10
        )
    cat = next(s for s in page if s.asset.title == "cat")
    assert isinstance(services.store, LocalAssetObjectStore) and cat.storage_key is not None
    damaged = services.store.root / cat.storage_key
    data = damaged.read_bytes()
    damaged.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    partial = await export_vault(services, ALICE, "Library", tmp_path / "partial")
    assert (partial.assets, partial.skipped) == (2, [cat.asset.id])
    assert not (tmp_path / "partial" / "originals" / f"{cat.asset.id}.png").exists()


async def test_export_refuses_a_vault_the_owner_does_not_own_and_writes_nothing(
    store_services: MemoryServices, database: Database, tmp_path: Path
) -> None:
    await admin.create_identity(database, ALICE, 10**9)
    await admin.create_identity(database, BOB, 10**9)
    await admin.create_vault(database, ALICE, "Work")
    await admin.grant(database, ALICE, "Work", BOB, "admin")
    dest = tmp_path / "dest"
    for owner, vault in ((BOB, "Work"), (BOB, f"{ALICE}/Work"), ("carol@example.com", "Library")):
        with pytest.raises(NotFoundFailure):
            await export_vault(store_services, owner, vault, dest)
        assert not dest.exists()
    with pytest.raises(InvalidInputFailure, match=r"vault\.json is missing"):
        await import_vault(store_services, BOB, "Library", tmp_path)

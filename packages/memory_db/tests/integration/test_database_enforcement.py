"""Rules the database enforces itself (docs/design.md#tenancy): each forbidden write is tried."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memory_db import Database, new_id
from memory_db.repositories import VaultScope
from memory_db.repositories._errors import constraint_name
from memory_db.unit_of_work import session_of

A = "alice@example.com"
B = "bob@example.com"


async def _seed(database: Database) -> dict[str, Any]:
    """Two owners, each with a project, a folder, an object and an asset."""
    ids: dict[str, Any] = {}
    async with database.unit_of_work() as uow:
        for owner in (A, B):
            identity = await uow.identities.create(owner, 10**9)
            scope = VaultScope(owner, f"{owner}/Library")
            project = await uow.projects.create(scope, name="P", description=None, created_by=owner)
            folder = await uow.folders.create(
                scope, project_id=project.id, parent_id=None, name="F"
            )
            object_id = new_id("aob")
            await session_of(uow).execute(
                text(
                    "INSERT INTO mem_asset_objects (id, owner_identity, namespace_id, sha256, "
                    "storage_key, mime_type, extension, bytes, width, height, status) VALUES "
                    "(:id, :owner, :ns, :sha, :key, 'image/png', 'png', 10, 1, 1, 'available')"
                ),
                {
                    "id": object_id,
                    "owner": owner,
                    "ns": identity.namespace_id,
                    "sha": (owner[0] * 64)[:64].replace("a", "a").replace("b", "b"),
                    "key": f"k/{object_id}",
                },
            )
            asset_id = new_id("ast")
            await session_of(uow).execute(
                text(
                    "INSERT INTO mem_assets (id, owner_identity, vault, project_id, folder_id, "
                    "object_id, title, source_kind, created_by, updated_by) VALUES "
                    "(:id, :owner, :vault, :project, :folder, :object, 't', 'upload', :owner, "
                    ":owner)"
                ),
                {
                    "id": asset_id,
                    "owner": owner,
                    "vault": scope.physical_vault,
                    "project": project.id,
                    "folder": folder.id,
                    "object": object_id,
                },
            )
            ids[owner] = {
                "scope": scope,
                "namespace": identity.namespace_id,
                "project": project.id,
                "folder": folder.id,
                "object": object_id,
                "asset": asset_id,
            }
    return ids


async def _refused(database: Database, sql: str, params: dict[str, Any]) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught:
        async with database.unit_of_work() as uow:
            await session_of(uow).execute(text(sql), params)
    return caught.value


async def _count(database: Database, table: str) -> int:
    async with database.unit_of_work() as uow:
        return int(await session_of(uow).scalar(text(f"SELECT count(*) FROM {table}")) or 0)


async def test_folder_cannot_link_to_another_owners_project(database: Database) -> None:
    ids = await _seed(database)
    before = await _count(database, "mem_asset_folders")
    await _refused(
        database,
        "INSERT INTO mem_asset_folders (id, owner_identity, vault, project_id, name) "
        "VALUES (:id, :owner, :vault, :project, 'x')",
        {"id": new_id("afl"), "owner": A, "vault": f"{A}/Library", "project": ids[B]["project"]},
    )
    assert await _count(database, "mem_asset_folders") == before


async def test_folder_parent_must_be_in_same_project_and_owner(database: Database) -> None:
    ids = await _seed(database)
    await _refused(
        database,
        "INSERT INTO mem_asset_folders (id, owner_identity, vault, project_id, parent_id, name) "
        "VALUES (:id, :owner, :vault, :project, :parent, 'x')",
        {
            "id": new_id("afl"),
            "owner": A,
            "vault": f"{A}/Library",
            "project": ids[A]["project"],
            "parent": ids[B]["folder"],
        },
    )


@pytest.mark.parametrize("field", ["folder", "object", "project"])
async def test_asset_cannot_link_to_another_owners_rows(database: Database, field: str) -> None:
    ids = await _seed(database)
    params = {
        "id": new_id("ast"),
        "owner": A,
        "vault": f"{A}/Library",
        "project": ids[A]["project"],
        "folder": ids[A]["folder"],
        "object": ids[A]["object"],
    }
    if field == "folder":
        params["folder"] = ids[B]["folder"]
    elif field == "object":
        params["object"] = ids[B]["object"]
    else:
        params["project"] = ids[B]["project"]
        params["folder"] = None
    before = await _count(database, "mem_assets")
    await _refused(
        database,
        "INSERT INTO mem_assets (id, owner_identity, vault, project_id, folder_id, object_id, "
        "title, source_kind, created_by, updated_by) VALUES (:id, :owner, :vault, :project, "
        ":folder, :object, 't', 'upload', :owner, :owner)",
        params,
    )
    assert await _count(database, "mem_assets") == before


async def test_asset_folder_without_project_is_refused(database: Database) -> None:
    ids = await _seed(database)
    error = await _refused(
        database,
        "INSERT INTO mem_assets (id, owner_identity, vault, folder_id, object_id, title, "
        "source_kind, created_by, updated_by) VALUES (:id, :owner, :vault, :folder, :object, "
        "'t', 'upload', :owner, :owner)",
        {
            "id": new_id("ast"),
            "owner": A,
            "vault": f"{A}/Library",
            "folder": ids[B]["folder"],
            "object": ids[A]["object"],
        },
    )
    assert constraint_name(error) == "ck_mem_assets_folder_needs_project"


async def test_asset_moved_to_another_owners_folder_is_refused(database: Database) -> None:
    ids = await _seed(database)
    await _refused(
        database,
        "UPDATE mem_assets SET project_id = :project, folder_id = :folder WHERE id = :id",
        {"id": ids[A]["asset"], "project": ids[B]["project"], "folder": ids[B]["folder"]},
    )


async def test_object_cannot_use_another_owners_namespace(database: Database) -> None:
    ids = await _seed(database)
    await _refused(
        database,
        "INSERT INTO mem_asset_objects (id, owner_identity, namespace_id, sha256, storage_key, "
        "mime_type, extension, bytes, width, height) VALUES (:id, :owner, :ns, :sha, :key, "
        "'image/png', 'png', 1, 1, 1)",
        {
            "id": new_id("aob"),
            "owner": A,
            "ns": ids[B]["namespace"],
            "sha": "c" * 64,
            "key": "k/other",
        },
    )


async def test_job_cannot_point_at_another_owners_asset(database: Database) -> None:
    ids = await _seed(database)
    await _refused(
        database,
        "INSERT INTO mem_asset_embedding_jobs (id, asset_id, owner_identity, representation, "
        "model, dimensions) VALUES (:id, :asset, :owner, 'visual', 'm', 1024)",
        {"id": new_id("aej"), "asset": ids[B]["asset"], "owner": A},
    )


async def test_project_cannot_live_in_another_owners_vault(database: Database) -> None:
    await _seed(database)
    await _refused(
        database,
        "INSERT INTO mem_asset_projects (id, owner_identity, vault, name, created_by) "
        "VALUES (:id, :owner, :vault, 'x', :owner)",
        {"id": new_id("apr"), "owner": A, "vault": f"{B}/Library"},
    )


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("mem_asset_projects", "status", "gone"),
        ("mem_assets", "status", "lost"),
        ("mem_assets", "embedding_status", "maybe"),
        ("mem_assets", "source_kind", "carrier_pigeon"),
        ("mem_asset_objects", "status", "floating"),
        ("mem_asset_objects", "mime_type", "image/svg+xml"),
    ],
)
async def test_status_values_are_check_constraints(
    database: Database, table: str, column: str, value: str
) -> None:
    ids = await _seed(database)
    row_id = {
        "mem_asset_projects": ids[A]["project"],
        "mem_assets": ids[A]["asset"],
        "mem_asset_objects": ids[A]["object"],
    }[table]
    await _refused(
        database, f"UPDATE {table} SET {column} = :v WHERE id = :id", {"v": value, "id": row_id}
    )


async def test_duplicate_active_job_is_refused(database: Database) -> None:
    ids = await _seed(database)
    insert = (
        "INSERT INTO mem_asset_embedding_jobs (id, asset_id, owner_identity, representation, "
        "model, dimensions) VALUES (:id, :asset, :owner, 'visual', 'm', 1024)"
    )
    async with database.unit_of_work() as uow:
        await session_of(uow).execute(
            text(insert), {"id": new_id("aej"), "asset": ids[A]["asset"], "owner": A}
        )
    await _refused(database, insert, {"id": new_id("aej"), "asset": ids[A]["asset"], "owner": A})


async def test_same_sha256_object_is_unique_per_owner_only(database: Database) -> None:
    ids = await _seed(database)
    insert = (
        "INSERT INTO mem_asset_objects (id, owner_identity, namespace_id, sha256, storage_key, "
        "mime_type, extension, bytes, width, height, status) VALUES (:id, :owner, :ns, :sha, "
        ":key, 'image/png', 'png', 1, 1, 1, 'available')"
    )
    sha = "d" * 64
    async with database.unit_of_work() as uow:
        for owner in (A, B):  # different owners: never deduplicated across them
            object_id = new_id("aob")
            await session_of(uow).execute(
                text(insert),
                {
                    "id": object_id,
                    "owner": owner,
                    "ns": ids[owner]["namespace"],
                    "sha": sha,
                    "key": object_id,
                },
            )
    object_id = new_id("aob")
    await _refused(
        database,
        insert,
        {"id": object_id, "owner": A, "ns": ids[A]["namespace"], "sha": sha, "key": object_id},
    )


async def test_folder_depth_and_cycles_are_enforced_by_trigger(database: Database) -> None:
    ids = await _seed(database)
    scope = ids[A]["scope"]
    project = ids[A]["project"]
    chain = [ids[A]["folder"]]  # depth 1
    async with database.unit_of_work() as uow:
        for depth in range(2, 9):
            folder = await uow.folders.create(
                scope, project_id=project, parent_id=chain[-1], name=f"d{depth}"
            )
            chain.append(folder.id)
    # depth 9 directly in SQL
    error = await _refused(
        database,
        "INSERT INTO mem_asset_folders (id, owner_identity, vault, project_id, parent_id, name) "
        "VALUES (:id, :owner, :vault, :project, :parent, 'd9')",
        {
            "id": new_id("afl"),
            "owner": A,
            "vault": scope.physical_vault,
            "project": project,
            "parent": chain[-1],
        },
    )
    assert constraint_name(error) == "folder_depth"
    # a cycle: the root under its own grandchild
    error = await _refused(
        database,
        "UPDATE mem_asset_folders SET parent_id = :parent WHERE id = :id",
        {"id": chain[0], "parent": chain[2]},
    )
    assert constraint_name(error) == "folder_cycle"
    # moving a subtree so that its deepest leaf would sit at depth 9
    async with database.unit_of_work() as uow:
        side = await uow.folders.create(scope, project_id=project, parent_id=None, name="side")
    error = await _refused(
        database,
        "UPDATE mem_asset_folders SET parent_id = :parent WHERE id = :id",
        {"id": chain[0], "parent": side.id},  # subtree of height 8 under depth 1 => 9
    )
    assert constraint_name(error) == "folder_depth"
    # a folder cannot be its own parent
    await _refused(
        database,
        "UPDATE mem_asset_folders SET parent_id = id WHERE id = :id",
        {"id": chain[3]},
    )


async def test_sibling_and_project_names_unique_case_insensitively(database: Database) -> None:
    ids = await _seed(database)
    await _refused(
        database,
        "INSERT INTO mem_asset_folders (id, owner_identity, vault, project_id, name) "
        "VALUES (:id, :owner, :vault, :project, 'f')",
        {"id": new_id("afl"), "owner": A, "vault": f"{A}/Library", "project": ids[A]["project"]},
    )
    await _refused(
        database,
        "INSERT INTO mem_asset_projects (id, owner_identity, vault, name, created_by) "
        "VALUES (:id, :owner, :vault, 'p', :owner)",
        {"id": new_id("apr"), "owner": A, "vault": f"{A}/Library"},
    )
    # a deleted project frees its name; another owner may use the same name anyway
    async with database.unit_of_work() as uow:
        await session_of(uow).execute(
            text("UPDATE mem_asset_projects SET status = 'deleted' WHERE id = :id"),
            {"id": ids[A]["project"]},
        )
        await session_of(uow).execute(
            text(
                "INSERT INTO mem_asset_projects (id, owner_identity, vault, name, created_by) "
                "VALUES (:id, :owner, :vault, 'P', :owner)"
            ),
            {"id": new_id("apr"), "owner": A, "vault": f"{A}/Library"},
        )

"""Repositories: the identity plane, and projects/folders strictly inside a VaultScope."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memory_db import Conflict, Database, FolderTreeError, InvalidInput, NotFound, VaultScope
from memory_db.ids import is_valid_id
from memory_db.testing.statements import statements_sent
from memory_db.unit_of_work import session_of

A, B, C = "alice@example.com", "bob@example.com", "carol@example.com"
SA = VaultScope(A, f"{A}/Library")
SB = VaultScope(B, f"{B}/Library")


async def _identities(database: Database, *owners: str) -> None:
    async with database.unit_of_work() as uow:
        for owner in owners:
            await uow.identities.create(owner, 1000)


async def test_identity_gets_namespace_and_default_vault(database: Database) -> None:
    async with database.unit_of_work() as uow:
        record = await uow.identities.create("  Alice@Example.COM ", 5000)
        assert record.owner_identity == A and record.quota_bytes == 5000
        assert is_valid_id(record.namespace_id, "ans")
        vaults = await uow.vaults.accessible(A)
    assert [(v.handle, v.physical_vault, v.permission) for v in vaults] == [
        ("Library", f"{A}/Library", "owner")
    ]


@pytest.mark.parametrize(
    "bad", ["", "not-an-email", "a@b", "x" * 250 + "@example.com", "a b@example.com"]
)
async def test_identity_must_be_an_email(database: Database, bad: str) -> None:
    with pytest.raises(InvalidInput):
        async with database.unit_of_work() as uow:
            await uow.identities.create(bad, 1)


async def test_duplicate_identity_conflicts(database: Database) -> None:
    await _identities(database, A)
    with pytest.raises(Conflict):
        await _identities(database, "ALICE@example.com")


async def test_api_key_lifecycle(database: Database) -> None:
    await _identities(database, A)
    async with database.unit_of_work() as uow:
        record, secret = await uow.api_keys.create(A, ["read", "write", "read"], label="laptop")
    assert secret.startswith("mk_") and len(secret) > 40
    assert record.scopes == ("read", "write")
    async with database.unit_of_work() as uow:
        stored = await session_of(uow).execute(
            __import__("sqlalchemy").text("SELECT key_hash FROM mem_api_keys")
        )
        hashes = [row[0] for row in stored]
        assert secret not in hashes and len(hashes[0]) == 64
        resolved = await uow.api_keys.resolve(secret)
        assert resolved is not None and resolved.id == record.id
        assert await uow.api_keys.resolve(secret + "x") is None
        assert await uow.api_keys.resolve("not-a-key") is None
        await uow.api_keys.touch(record.id)
    async with database.unit_of_work() as uow:
        (listed,) = await uow.api_keys.list_for(A)
        assert listed.last_used_at is not None
        await uow.api_keys.revoke(record.id)
        await uow.api_keys.revoke(record.id)  # idempotent
    async with database.unit_of_work() as uow:
        assert await uow.api_keys.resolve(secret) is None


async def test_using_a_key_resolves_and_marks_it_used_in_one_statement(
    database: Database,
) -> None:
    await _identities(database, A)
    async with database.unit_of_work() as uow:
        record, secret = await uow.api_keys.create(A, ["read"])
    with statements_sent(database) as statements:
        async with database.unit_of_work() as uow:
            used = await uow.api_keys.use(secret)
    assert len(statements) == 1
    assert used is not None and used.id == record.id and used.scopes == ("read",)
    assert used.last_used_at is None  # as it was before this use
    async with database.unit_of_work() as uow:
        (listed,) = await uow.api_keys.list_for(A)
        first_use = listed.last_used_at
        assert first_use is not None
        assert await uow.api_keys.use(secret) is not None
        assert await uow.api_keys.use(secret + "x") is None
        assert await uow.api_keys.use("not-a-key") is None
    async with database.unit_of_work() as uow:
        (listed,) = await uow.api_keys.list_for(A)
        assert listed.last_used_at == first_use  # at most one write a minute
        await session_of(uow).execute(
            text("UPDATE mem_api_keys SET last_used_at = now() - interval '2 minutes'")
        )
    async with database.unit_of_work() as uow:
        assert await uow.api_keys.use(secret) is not None
    async with database.unit_of_work() as uow:
        (listed,) = await uow.api_keys.list_for(A)
        assert listed.last_used_at is not None and listed.last_used_at > first_use
        await uow.api_keys.revoke(record.id)
    async with database.unit_of_work() as uow:
        assert await uow.api_keys.use(secret) is None


@pytest.mark.parametrize("scopes", [[], ["root"], ["read", "sudo"]])
async def test_api_key_scopes_are_validated(database: Database, scopes: list[str]) -> None:
    await _identities(database, A)
    with pytest.raises(InvalidInput):
        async with database.unit_of_work() as uow:
            await uow.api_keys.create(A, scopes)


async def test_vault_sharing_and_resolution(database: Database) -> None:
    await _identities(database, A, B, C)
    async with database.unit_of_work() as uow:
        await uow.vaults.create(A, "Work")
        await uow.vaults.grant(A, "work", B, "read")
    async with database.unit_of_work() as uow:
        shared = await uow.vaults.resolve(B, f"{A}/Work")
        assert shared.permission == "read" and shared.scope == VaultScope(A, f"{A}/Work")
        own = await uow.vaults.resolve(A, "WORK")
        assert own.is_owner
        with pytest.raises(NotFound):  # not shared with carol
            await uow.vaults.resolve(C, f"{A}/Work")
        with pytest.raises(NotFound):  # shared vault is not alice's Library
            await uow.vaults.resolve(B, f"{A}/Library")
        with pytest.raises(NotFound):
            await uow.vaults.resolve(B, "Work")  # bob has no own vault called Work
        handles = [
            (v.owner_identity, v.handle, v.permission) for v in await uow.vaults.accessible(B)
        ]
        assert handles == [(B, "Library", "owner"), (A, "Work", "read")]
        await uow.vaults.grant(A, "Work", B, "write")  # upgrade in place
        assert (await uow.vaults.resolve(B, f"{A}/work")).permission == "write"


async def test_accessible_vaults_are_one_statement_own_by_name_then_shared_by_owner_and_name(
    database: Database,
) -> None:
    await _identities(database, A, B, C)
    async with database.unit_of_work() as uow:
        for owner, handle in [(B, "zoo"), (B, "Alpha"), (A, "work"), (A, "Beta"), (C, "Art")]:
            await uow.vaults.create(owner, handle)
        await uow.vaults.grant(C, "Art", B, "read")
        await uow.vaults.grant(A, "work", B, "write")
        await uow.vaults.grant(A, "Beta", B, "read")
    with statements_sent(database) as statements:
        async with database.unit_of_work() as uow:
            vaults = await uow.vaults.accessible("  Bob@Example.com ")
    assert len(statements) == 1
    # Own vaults by name whatever its case, then shared ones by owner, then name.
    assert [(v.owner_identity, v.handle, v.permission) for v in vaults] == [
        (B, "Alpha", "owner"),
        (B, "Library", "owner"),
        (B, "zoo", "owner"),
        (A, "Beta", "read"),
        (A, "work", "write"),
        (C, "Art", "read"),
    ]
    assert vaults[0].physical_vault == f"{B}/Alpha" and vaults[0].created_at.tzinfo is not None
    assert vaults[3].scope == VaultScope(A, f"{A}/Beta")
    async with database.unit_of_work() as uow:
        assert await uow.vaults.accessible("nobody@example.com") == []


@pytest.mark.parametrize("handle", ["", "a/b", " x", "x ", "\x00", "y" * 65])
async def test_vault_handles_are_validated(database: Database, handle: str) -> None:
    await _identities(database, A)
    with pytest.raises(InvalidInput):
        async with database.unit_of_work() as uow:
            await uow.vaults.create(A, handle)


async def test_vault_names_unique_per_owner(database: Database) -> None:
    await _identities(database, A)
    with pytest.raises(Conflict):
        async with database.unit_of_work() as uow:
            await uow.vaults.create(A, "library")


async def test_grant_rules(database: Database) -> None:
    await _identities(database, A, B)
    async with database.unit_of_work() as uow:
        with pytest.raises(InvalidInput):
            await uow.vaults.grant(A, "Library", B, "owner")
        with pytest.raises(InvalidInput):
            await uow.vaults.grant(A, "Library", A, "read")
        with pytest.raises(NotFound):
            await uow.vaults.grant(A, "Nope", B, "read")
        with pytest.raises(NotFound):
            await uow.vaults.grant(A, "Library", C, "read")


async def test_revoking_a_grant_ends_the_access_and_only_the_owner_can(
    database: Database,
) -> None:
    await _identities(database, A, B, C)
    async with database.unit_of_work() as uow:
        await uow.vaults.create(A, "Work")
        await uow.vaults.grant(A, "Work", B, "write")
        await uow.vaults.grant(A, "Work", C, "read")
    async with database.unit_of_work() as uow:
        with pytest.raises(NotFound):  # bob holds a grant, he does not own the vault
            await uow.vaults.revoke_grant(B, "Work", C)
        assert not await uow.vaults.revoke_grant(A, "Library", B)  # nothing granted there
        assert await uow.vaults.revoke_grant(A, "work", " Bob@Example.com ")
        assert not await uow.vaults.revoke_grant(A, "Work", B)  # already gone
    async with database.unit_of_work() as uow:
        with pytest.raises(NotFound):
            await uow.vaults.resolve(B, f"{A}/Work")
        assert [v.handle for v in await uow.vaults.accessible(B)] == ["Library"]
        assert (await uow.vaults.resolve(C, f"{A}/Work")).permission == "read"  # untouched


async def test_projects_are_invisible_outside_their_scope(database: Database) -> None:
    await _identities(database, A, B)
    async with database.unit_of_work() as uow:
        project = await uow.projects.create(SA, name="Trips", description="d", created_by=A)
    async with database.unit_of_work() as uow:
        assert (await uow.projects.get(SA, project.id)).name == "Trips"
        with pytest.raises(NotFound):
            await uow.projects.get(SB, project.id)
        with pytest.raises(NotFound):
            await uow.projects.get(VaultScope(A, f"{A}/Other"), project.id)
        with pytest.raises(NotFound):
            await uow.projects.get(SA, "apr_nonexistent")
        assert await uow.projects.list([SB]) == []
        assert [p.id for p in await uow.projects.list([SA, SB])] == [project.id]
        with pytest.raises(NotFound):
            await uow.folders.create(SB, project_id=project.id, parent_id=None, name="x")


async def test_project_names(database: Database) -> None:
    await _identities(database, A, B)
    async with database.unit_of_work() as uow:
        await uow.projects.create(SA, name=" Trips ", description=None, created_by=A)
        await uow.projects.create(SB, name="Trips", description=None, created_by=B)
    for name in ["trips", "TRIPS"]:
        with pytest.raises(Conflict):
            async with database.unit_of_work() as uow:
                await uow.projects.create(SA, name=name, description=None, created_by=A)
    for bad in ["", "   ", "x" * 121, "tab\there"]:
        with pytest.raises(InvalidInput):
            async with database.unit_of_work() as uow:
                await uow.projects.create(SA, name=bad, description=None, created_by=A)
    with pytest.raises(InvalidInput):
        async with database.unit_of_work() as uow:
            await uow.projects.create(SA, name="ok", description="d" * 2001, created_by=A)


async def test_archived_projects(database: Database) -> None:
    await _identities(database, A)
    async with database.unit_of_work() as uow:
        project = await uow.projects.create(SA, name="Old", description=None, created_by=A)
        await uow.projects.archive(SA, project.id)
        assert await uow.projects.list([SA]) == []
        assert [p.status for p in await uow.projects.list([SA], include_archived=True)] == [
            "archived"
        ]
        with pytest.raises(Conflict):
            await uow.folders.create(SA, project_id=project.id, parent_id=None, name="x")


async def test_folder_tree_rules_through_repository(database: Database) -> None:
    await _identities(database, A)
    async with database.unit_of_work() as uow:
        project = await uow.projects.create(SA, name="P", description=None, created_by=A)
        other = await uow.projects.create(SA, name="Q", description=None, created_by=A)
        chain = []
        parent = None
        for depth in range(1, 9):
            folder = await uow.folders.create(
                SA, project_id=project.id, parent_id=parent, name=f"d{depth}"
            )
            chain.append(folder)
            parent = folder.id
        with pytest.raises(FolderTreeError, match="8 deep"):
            await uow.folders.create(SA, project_id=project.id, parent_id=parent, name="d9")
        with pytest.raises(FolderTreeError, match="under itself"):
            await uow.folders.move(SA, chain[0].id, chain[4].id)
        with pytest.raises(Conflict):
            await uow.folders.create(SA, project_id=project.id, parent_id=None, name="D1")
        with pytest.raises(NotFound):  # a parent from another project
            await uow.folders.create(SA, project_id=other.id, parent_id=chain[0].id, name="x")
        # the failed writes changed nothing; the transaction is still usable
        moved = await uow.folders.move(SA, chain[7].id, None)
        assert moved.parent_id is None
        names = sorted(f.name for f in await uow.folders.list(SA, project.id))
    assert names == [f"d{i}" for i in range(1, 9)]


async def test_project_update_renames_unarchives_and_keeps_names_unique(
    database: Database,
) -> None:
    await _identities(database, A, B)
    async with database.unit_of_work() as uow:
        trips = await uow.projects.create(SA, name="Trips", description="d", created_by=A)
        await uow.projects.create(SA, name="Work", description=None, created_by=A)
        theirs = await uow.projects.create(SB, name="Journeys", description=None, created_by=B)
        await uow.projects.archive(SA, trips.id)
        renamed = await uow.projects.update(
            SA, trips.id, name=" Journeys ", description=None, status="active"
        )
        with pytest.raises(Conflict, match="'WORK' already exists"):
            await uow.projects.update(SA, trips.id, name="WORK", description=None, status="active")
        for bad in ("", "tab\there", "x" * 121):
            with pytest.raises(InvalidInput):
                await uow.projects.update(SA, trips.id, name=bad, description=None, status="active")
        with pytest.raises(InvalidInput):
            await uow.projects.update(SA, trips.id, name="Ok", description=None, status="deleted")
        with pytest.raises(NotFound):  # another owner's project is not in this scope
            await uow.projects.update(SA, theirs.id, name="X", description=None, status="active")
        with pytest.raises(NotFound):
            await uow.projects.lock(SA, theirs.id)
        after = await uow.projects.get(SA, trips.id)
    assert (renamed.name, renamed.description, renamed.status) == ("Journeys", None, "active")
    assert after == renamed


async def test_folder_update_checks_cycles_and_the_moved_subtree_height(database: Database) -> None:
    await _identities(database, A)
    async with database.unit_of_work() as uow:
        project = await uow.projects.create(SA, name="P", description=None, created_by=A)
        other = await uow.projects.create(SA, name="Q", description=None, created_by=A)
        foreign = await uow.folders.create(SA, project_id=other.id, parent_id=None, name="F")
        chain = []
        parent = None
        for depth in range(1, 7):  # /d1/.../d6
            folder = await uow.folders.create(
                SA, project_id=project.id, parent_id=parent, name=f"d{depth}"
            )
            chain.append(folder)
            parent = folder.id
        tall = await uow.folders.create(SA, project_id=project.id, parent_id=None, name="t1")
        below = await uow.folders.create(SA, project_id=project.id, parent_id=tall.id, name="t2")
        await uow.folders.create(SA, project_id=project.id, parent_id=below.id, name="t3")
        with pytest.raises(FolderTreeError, match="under itself"):
            await uow.folders.update(SA, chain[0].id, name="d1", parent_id=chain[3].id)
        with pytest.raises(FolderTreeError, match="under itself"):
            await uow.folders.update(SA, chain[0].id, name="d1", parent_id=chain[0].id)
        # t1/t2/t3 is three levels: under d6 (depth 6) its leaf would be at depth 9.
        with pytest.raises(FolderTreeError, match=r"8 deep: .* 2 level\(s\) of subfolders"):
            await uow.folders.update(SA, tall.id, name="t1", parent_id=chain[5].id)
        with pytest.raises(NotFound, match="parent folder"):
            await uow.folders.update(SA, tall.id, name="t1", parent_id=foreign.id)
        with pytest.raises(Conflict):
            await uow.folders.update(SA, below.id, name="D1", parent_id=None)
        with pytest.raises(InvalidInput):
            await uow.folders.update(SA, below.id, name="a/b", parent_id=tall.id)
        fits = await uow.folders.update(SA, tall.id, name="T", parent_id=chain[3].id)
        lineage = await uow.folders.lineage(SA, below.id)
    assert (fits.name, fits.parent_id) == ("T", chain[3].id)
    assert [f.name for f in lineage] == ["d1", "d2", "d3", "d4", "T", "t2"]


async def test_lineage_is_root_first_and_scoped(database: Database) -> None:
    await _identities(database, A, B)
    async with database.unit_of_work() as uow:
        project = await uow.projects.create(SA, name="P", description=None, created_by=A)
        top = await uow.folders.create(SA, project_id=project.id, parent_id=None, name="top")
        mid = await uow.folders.create(SA, project_id=project.id, parent_id=top.id, name="mid")
        leaf = await uow.folders.create(SA, project_id=project.id, parent_id=mid.id, name="leaf")
        assert [f.name for f in await uow.folders.lineage(SA, leaf.id)] == ["top", "mid", "leaf"]
        assert [f.name for f in await uow.folders.lineage(SA, top.id)] == ["top"]
        with pytest.raises(NotFound):
            await uow.folders.lineage(SB, leaf.id)

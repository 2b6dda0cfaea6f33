"""Project and folder workflows: authorised, validated, audited."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from memory_db import (
    FolderRecord,
    MemoryDbError,
    ProjectRecord,
    UnitOfWork,
)
from memory_tools import policy
from memory_tools.access import Caller, ResolvedVault, readable_vaults, resolve_vault
from memory_tools.errors import translate
from memory_tools.ingest.inputs import refuse_nul
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel


class ProjectView(WireModel):
    """A project."""

    project_id: str = Field(description="Opaque project id (apr_...).")
    vault: str = Field(description="The vault handle as the caller names it.")
    name: str
    description: str | None
    status: str = Field(description="active or archived.")
    created_at: datetime
    updated_at: datetime


class FolderView(WireModel):
    """A folder with its presentation path."""

    folder_id: str = Field(description="Opaque folder id (afl_...).")
    project_id: str
    parent_id: str | None = Field(description="Parent folder id; null at the project root.")
    vault: str
    name: str
    path: str = Field(description="Presentation path such as /Trips/2026 (never a storage key).")
    depth: int = Field(description="1 for a folder at the project root, at most 8.")
    created_at: datetime


class ProjectList(WireModel):
    """Projects visible to the caller."""

    projects: list[ProjectView]


class FolderTree(WireModel):
    """A project's folder tree, depth-first with siblings by name."""

    vault: str
    project_id: str
    folders: list[FolderView]


def project_view(record: ProjectRecord, vault: ResolvedVault) -> ProjectView:
    """How the caller sees a project of ``vault``."""
    return ProjectView(
        project_id=record.id,
        vault=vault.display_handle,
        name=record.name,
        description=record.description,
        status=record.status,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def folder_view(record: FolderRecord, vault: str, lineage: Sequence[FolderRecord]) -> FolderView:
    """A folder with the path its ``lineage`` (root first, the folder last) spells."""
    path = "".join(f"/{folder.name}" for folder in lineage)
    return _placed_folder(record, vault, path, len(lineage))


def _placed_folder(record: FolderRecord, vault: str, path: str, depth: int) -> FolderView:
    return FolderView(
        folder_id=record.id,
        project_id=record.project_id,
        parent_id=record.parent_id,
        vault=vault,
        name=record.name,
        path=path,
        depth=depth,
        created_at=record.created_at,
    )


def folder_tree(folders: Sequence[FolderRecord], vault: str) -> list[FolderView]:
    """Folders in depth-first order (siblings by name), each with its path and depth."""
    children: dict[str | None, list[FolderRecord]] = {}
    for folder in folders:
        children.setdefault(folder.parent_id, []).append(folder)
    for siblings in children.values():
        siblings.sort(key=lambda f: (f.name.lower(), f.id))
    ordered: list[FolderView] = []

    def walk(parent: str | None, prefix: str, depth: int) -> None:
        for folder in children.get(parent, []):
            path = f"{prefix}/{folder.name}"
            ordered.append(_placed_folder(folder, vault, path, depth))
            walk(folder.id, path, depth + 1)

    walk(None, "", 1)
    return ordered


async def create_project(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    name: str,
    description: str | None,
) -> ProjectView:
    """Create a project in a vault the caller may write."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if description is not None:
        refuse_nul(description, "description")
    resolved = await resolve_vault(uow, caller, vault, "write")
    try:
        record = await uow.projects.create(
            resolved.record.scope, name=name, description=description, created_by=caller.identity
        )
    except MemoryDbError as exc:
        raise translate(exc) from exc
    await uow.provenance.record_in_vault(
        "asset_project_create",
        resolved.record.scope,
        "project",
        record.id,
        actor_identity=caller.identity,
    )
    return project_view(record, resolved)


async def list_projects(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    include_archived: bool,
) -> ProjectList:
    """Projects of one vault, or of every vault the caller may read (each names its vault)."""
    policy.require(services.settings)
    if vault is None:
        vaults = await readable_vaults(uow, caller)
    else:
        vaults = [await resolve_vault(uow, caller, vault, "read")]
    by_vault = {(v.record.owner_identity, v.record.physical_vault): v for v in vaults}
    records = await uow.projects.list(
        [v.record.scope for v in vaults], include_archived=include_archived
    )
    return ProjectList(
        projects=[project_view(r, by_vault[(r.owner_identity, r.vault)]) for r in records]
    )


async def create_folder(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    project_id: str,
    parent_id: str | None,
    name: str,
) -> FolderView:
    """Create a folder; return it with its path."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        record = await uow.folders.create(
            scope, project_id=project_id, parent_id=parent_id, name=name
        )
        lineage = await uow.folders.lineage(scope, record.id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    await uow.provenance.record_in_vault(
        "asset_folder_create",
        scope,
        "folder",
        record.id,
        actor_identity=caller.identity,
        detail={"projectId": project_id},
    )
    return folder_view(record, resolved.display_handle, lineage)


async def list_folders(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, vault: str, project_id: str
) -> FolderTree:
    """The folder tree of a project, depth-first."""
    policy.require(services.settings)
    resolved = await resolve_vault(uow, caller, vault, "read")
    try:
        folders = await uow.folders.list(resolved.record.scope, project_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    handle = resolved.display_handle
    return FolderTree(vault=handle, project_id=project_id, folders=folder_tree(folders, handle))


async def archive_project(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, vault: str, project_id: str
) -> ProjectView:
    """Archive a project: it stays readable and searchable, but takes no new images or folders.

    Non-destructive and idempotent (docs/design.md#folder-deletion).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        before = await uow.projects.get(scope, project_id)
        record = await uow.projects.archive(scope, project_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    if before.status != "archived":
        await uow.provenance.record_in_vault(
            "asset_project_archive",
            scope,
            "project",
            project_id,
            actor_identity=caller.identity,
        )
    return project_view(record, resolved)

"""Project and folder workflows: authorised, validated, audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

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


@dataclass(frozen=True, slots=True)
class ProjectView:
    """A project as a caller sees it, with the handle they use for its vault."""

    project_id: str
    vault: str
    name: str
    description: str | None
    status: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class FolderView:
    """A folder with its presentation path (never used as a storage key)."""

    folder_id: str
    project_id: str
    parent_id: str | None
    name: str
    path: str
    depth: int
    created_at: datetime


def _project_view(record: ProjectRecord, vault: ResolvedVault) -> ProjectView:
    return ProjectView(
        project_id=record.id,
        vault=vault.display_handle,
        name=record.name,
        description=record.description,
        status=record.status,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def folder_tree(folders: Sequence[FolderRecord]) -> list[FolderView]:
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
            ordered.append(
                FolderView(
                    folder.id,
                    folder.project_id,
                    folder.parent_id,
                    folder.name,
                    path,
                    depth,
                    folder.created_at,
                )
            )
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
    if description is not None:
        refuse_nul(description, "description")
    resolved = await resolve_vault(uow, caller, vault, "write")
    try:
        record = await uow.projects.create(
            resolved.record.scope, name=name, description=description, created_by=caller.identity
        )
    except MemoryDbError as exc:
        raise translate(exc) from exc
    await uow.provenance.record(
        "asset_project_create",
        actor_identity=caller.identity,
        owner_identity=resolved.record.owner_identity,
        vault=resolved.record.physical_vault,
        target_kind="project",
        target_id=record.id,
    )
    return _project_view(record, resolved)


async def list_projects(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    include_archived: bool,
) -> list[ProjectView]:
    """Projects of one vault, or of every vault the caller may read."""
    policy.require(services.settings)
    if vault is None:
        vaults = await readable_vaults(uow, caller)
    else:
        vaults = [await resolve_vault(uow, caller, vault, "read")]
    by_vault = {(v.record.owner_identity, v.record.physical_vault): v for v in vaults}
    records = await uow.projects.list(
        [v.record.scope for v in vaults], include_archived=include_archived
    )
    return [_project_view(r, by_vault[(r.owner_identity, r.vault)]) for r in records]


async def create_folder(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    project_id: str,
    parent_id: str | None,
    name: str,
) -> tuple[FolderView, str]:
    """Create a folder; return it (with its path) and the vault handle."""
    policy.require(services.settings)
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        record = await uow.folders.create(
            scope, project_id=project_id, parent_id=parent_id, name=name
        )
        lineage = await uow.folders.lineage(scope, record.id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    await uow.provenance.record(
        "asset_folder_create",
        actor_identity=caller.identity,
        owner_identity=scope.owner_identity,
        vault=scope.physical_vault,
        target_kind="folder",
        target_id=record.id,
        detail={"projectId": project_id},
    )
    view = FolderView(
        folder_id=record.id,
        project_id=record.project_id,
        parent_id=record.parent_id,
        name=record.name,
        path="".join(f"/{folder.name}" for folder in lineage),
        depth=len(lineage),
        created_at=record.created_at,
    )
    return view, resolved.display_handle


async def list_folders(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, vault: str, project_id: str
) -> tuple[list[FolderView], str]:
    """The folder tree of a project, depth-first."""
    policy.require(services.settings)
    resolved = await resolve_vault(uow, caller, vault, "read")
    try:
        folders = await uow.folders.list(resolved.record.scope, project_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    return folder_tree(folders), resolved.display_handle


async def archive_project(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, vault: str, project_id: str
) -> ProjectView:
    """Archive a project: it stays readable and searchable, but takes no new images or folders.

    Non-destructive and idempotent (docs/design.md#folder-deletion).
    """
    policy.require(services.settings)
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        before = await uow.projects.get(scope, project_id)
        record = await uow.projects.archive(scope, project_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    if before.status != "archived":
        await uow.provenance.record(
            "asset_project_archive",
            actor_identity=caller.identity,
            owner_identity=scope.owner_identity,
            vault=scope.physical_vault,
            target_kind="project",
            target_id=project_id,
        )
    return _project_view(record, resolved)

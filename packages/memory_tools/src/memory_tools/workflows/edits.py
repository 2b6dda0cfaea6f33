"""Editing what was saved: an image's words, a project, a folder (docs/design.md#editing).

Each edit is idempotent: a field left out (or null) stays as it is, and an edit that changes
nothing writes nothing (no provenance, no job). An empty string clears a description or alt
text and an empty list clears the tags; titles, names and folders cannot be emptied.

Editing an image's words re-embeds only what depends on them. The visual vector is made from
the pixels and stays. The fused vector is made from the caller's title, alt text and
description (:func:`memory_tools.ingest.plan.fused_text`): when that text changes, every job of
the fused representation is superseded (a running one loses its lease, so its worker writes
nothing), the vector of the old text is deleted, and a new job is queued for the new text.
Both run under the asset's row lock, which a worker's completion also takes first, so an old
vector is either written before the edit (and deleted by it) or never written at all.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from memory_db import MemoryDbError, NotFound, UnitOfWork, VaultScope
from memory_tools import policy
from memory_tools.access import Caller, resolve_vault
from memory_tools.errors import (
    ConflictFailure,
    FeatureDisabled,
    InvalidInputFailure,
    NotFoundFailure,
    translate,
)
from memory_tools.ingest import inputs
from memory_tools.ingest.plan import NO_FUSED_TEXT, fused_text
from memory_tools.ingest.reservations import over_quota
from memory_tools.ingest.save import vector_bytes
from memory_tools.services import MemoryServices
from memory_tools.text import refuse_nul
from memory_tools.workflows.assets import AssetView, get_asset
from memory_tools.workflows.changes import lock_live_asset
from memory_tools.workflows.projects import FolderView, ProjectView, folder_view, project_view

FUSED = "fused"
MAX_PROJECT_DESCRIPTION = 2000


class AssetEdit(AssetView):
    """The asset after the edit, as ``image_asset_get`` shows it, and what the edit changed."""

    changed: list[str] = Field(
        description="The fields this call changed (title, description, altText, tags); empty "
        "when the asset already read so."
    )


class ProjectEdit(ProjectView):
    """The project after the edit, and what the edit changed."""

    changed: list[str] = Field(
        description="The fields this call changed (name, description, archived); empty when "
        "the project already read so."
    )


class FolderEdit(FolderView):
    """The folder after the edit (its new path and depth), and what the edit changed."""

    changed: list[str] = Field(
        description="The fields this call changed (name, parentId); empty when the folder "
        "already was so."
    )


async def update_asset(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    title: str | None,
    description: str | None,
    alt_text: str | None,
    tags: list[str] | None,
    add_tags: list[str] | None = None,
    remove_tags: list[str] | None = None,
) -> AssetEdit:
    """Set an image's title, description, alt text and tags (write access to its vault).

    Validated like a save. ``tags`` replaces every tag; ``add_tags``/``remove_tags`` change
    only those, in one statement, so two callers adding a tag each both see theirs land
    (:mod:`memory_db.repositories.asset_tags`); giving both kinds is ``invalid_input``. The
    full-text document follows at once; the fused vector is embedded again when its text
    changed (see the module's docstring).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    new_title = None
    if title is not None:
        new_title = inputs.clean_text(title, "title", inputs.MAX_TITLE)
        if new_title is None:
            raise InvalidInputFailure("title: cannot be empty; every image has a title")
    # Validate everything before reading anything: bad input changes nothing.
    # clean_text: None for a blank value, which clears the field when it was given.
    given_description = inputs.clean_text(description, "description", inputs.MAX_DESCRIPTION)
    given_alt = inputs.clean_text(alt_text, "altText", inputs.MAX_ALT_TEXT)
    new_tags = None if tags is None else inputs.canonical_tags(tags)
    delta = tag_delta(tags, add_tags, remove_tags)
    scope, asset = await lock_live_asset(uow, caller, asset_id)
    owner = scope.owner_identity
    if delta is not None:
        new_tags = await _change_tags(uow, caller, scope, asset_id, *delta)
    title_source = str(asset.metadata.get("titleSource", "derived"))
    after: dict[str, Any] = {
        "title": asset.title if new_title is None else new_title,
        "titleSource": title_source if new_title is None else "caller",
        "description": asset.description if description is None else given_description,
        "altText": asset.alt_text if alt_text is None else given_alt,
        "tags": list(asset.tags) if new_tags is None else new_tags,
    }
    before: dict[str, Any] = {
        "title": asset.title,
        "titleSource": title_source,
        "description": asset.description,
        "altText": asset.alt_text,
        "tags": list(asset.tags),
    }
    changed = [
        name for name in ("title", "description", "altText", "tags") if before[name] != after[name]
    ]
    if before["titleSource"] != after["titleSource"] and "title" not in changed:
        changed.insert(0, "title")  # the same words, now the caller's: they join the fused text
    if changed:
        old_text = _text(asset.source_ref, before, asset.ocr_text, asset.generated_text)
        new_text = _text(asset.source_ref, after, asset.ocr_text, asset.generated_text)
        requeue = old_text != new_text
        metadata = dict(asset.metadata)
        metadata["titleSource"] = after["titleSource"]
        if requeue:
            metadata["embedding"] = {
                **dict(metadata.get("embedding") or {}),
                FUSED: "queued" if new_text else NO_FUSED_TEXT,
            }
            await reembed_fused(uow, services, scope, asset_id, new_text, caller.identity)
        await uow.assets.edit(
            scope,
            asset_id,
            title=after["title"],
            description=after["description"],
            alt_text=after["altText"],
            tags=after["tags"],
            metadata=metadata,
            actor=caller.identity,
        )
        if requeue:
            await uow.assets.reconcile_embedding(owner, asset_id)
        await uow.provenance.record_in_vault(
            "asset_update",
            scope,
            "asset",
            asset_id,
            actor_identity=caller.identity,
            # Which fields, never their words (provenance holds no caller text).
            detail={"changed": changed, "fusedRequeued": requeue},
        )
    view = await get_asset(uow, caller, services, asset_id=asset_id, include_preview=False)
    return AssetEdit(**dict(view), changed=changed)


def tag_delta(
    tags: list[str] | None, add_tags: list[str] | None, remove_tags: list[str] | None
) -> tuple[list[str], list[str]] | None:
    """The canonical tags to add and to remove; ``None`` when neither was given.

    ``tags`` replaces the whole list, so it cannot be combined with a change to it.
    """
    if add_tags is None and remove_tags is None:
        return None
    if tags is not None:
        raise InvalidInputFailure(
            "tags: give tags (replaces every tag) or addTags/removeTags, not both"
        )
    return (
        inputs.canonical_tags(add_tags, "addTags"),
        inputs.canonical_tags(remove_tags, "removeTags"),
    )


async def _change_tags(
    uow: UnitOfWork,
    caller: Caller,
    scope: VaultScope,
    asset_id: str,
    add: list[str],
    remove: list[str],
) -> list[str]:
    """Apply the delta in SQL; the tags the asset now has (refused if over the limit)."""
    change = await uow.assets.change_tags(
        scope, asset_id, add=add, remove=remove, max_tags=inputs.MAX_TAGS, actor=caller.identity
    )
    if change is None:
        raise NotFoundFailure("asset not found")
    if len(change.after) > inputs.MAX_TAGS:
        raise InvalidInputFailure(
            f"addTags: the image would have {len(change.after)} tags; at most {inputs.MAX_TAGS}"
        )
    return change.after


def _text(
    source_ref: dict[str, Any],
    words: dict[str, Any],
    ocr_text: str | None,
    generated: str | None,
) -> str | None:
    return fused_text(
        title=words["title"],
        title_source=words["titleSource"],
        alt_text=words["altText"],
        description=words["description"],
        source_ref=source_ref,
        ocr_text=ocr_text,
        generated=generated,
    )


async def reembed_fused(
    uow: UnitOfWork,
    services: MemoryServices,
    scope: VaultScope,
    asset_id: str,
    text: str | None,
    actor: str,
) -> None:
    """Supersede the fused jobs and vector of the old text; queue a job for ``text``, if any.

    The first fused vector an asset ever gets is charged to the quota like a save's; a
    cleared one is not given back until the image is deleted (a delete refunds every
    representation the asset ever queued).
    """
    owner = scope.owner_identity
    embedder = services.embedder
    if text is not None and embedder is None:
        raise FeatureDisabled("no embedder is configured on this server to embed the new text")
    history = {
        job.representation
        for job in await uow.jobs.for_asset(owner, asset_id)
        if job.representation is not None  # other kinds of job hold no vector
    }
    await uow.jobs.supersede(owner, asset_id, FUSED)
    try:
        # Held FOR SHARE like the worker's: an index rebuild's switch waits for this edit.
        index = await uow.vector_indexes.open_alias(services.vector_alias)
    except NotFound:
        pass  # no vector was ever written
    else:
        await index.delete_representation(scope, asset_id, FUSED)
    if text is None or embedder is None:
        return
    if FUSED not in history:
        charge = vector_bytes(services, 1)
        usage = await uow.quota.usage(owner, lock=True)
        if usage.used_bytes + usage.reserved_bytes + charge > usage.quota_bytes:
            raise over_quota(
                f"a fused vector for the new text needs {charge} bytes: {usage.used_bytes} "
                f"used + {usage.reserved_bytes} reserved + {charge} > {usage.quota_bytes} quota",
                owner=owner,
                caller=actor,
            )
        await uow.quota.add_used(owner, charge)
    await uow.jobs.create(
        owner,
        asset_id,
        representation=FUSED,
        model=embedder.model,
        dimensions=embedder.dimensions,
    )
    await uow.jobs.notify()


async def update_project(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    project_id: str,
    name: str | None,
    description: str | None,
    archived: bool | None,
) -> ProjectEdit:
    """Rename a project, change its description, archive or unarchive it (write access)."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if name is not None:
        refuse_nul(name, "name")
    new_description = inputs.clean_text(description, "description", MAX_PROJECT_DESCRIPTION)
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        current = await uow.projects.lock(scope, project_id)
        after: dict[str, Any] = {
            "name": current.name if name is None else name.strip(),
            "description": current.description if description is None else new_description,
            "archived": current.status == "archived" if archived is None else archived,
        }
        before: dict[str, Any] = {
            "name": current.name,
            "description": current.description,
            "archived": current.status == "archived",
        }
        changed = [key for key in ("name", "description", "archived") if before[key] != after[key]]
        record = current
        if changed:
            record = await uow.projects.update(
                scope,
                project_id,
                name=after["name"],
                description=after["description"],
                status="archived" if after["archived"] else "active",
            )
    except MemoryDbError as exc:
        raise translate(exc) from exc
    if changed:
        await uow.provenance.record_in_vault(
            "asset_project_update",
            scope,
            "project",
            project_id,
            actor_identity=caller.identity,
            detail={"changed": changed, "archived": after["archived"]},
        )
    return ProjectEdit(**dict(project_view(record, resolved)), changed=changed)


async def update_folder(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    project_id: str,
    folder_id: str,
    name: str | None,
    parent_id: str | None,
    to_root: bool,
) -> FolderEdit:
    """Rename a folder, or move it under another folder of its project or to the root."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if to_root and parent_id is not None:
        raise InvalidInputFailure("toRoot: give either parentId or toRoot=true, not both")
    for value, field in ((name, "name"), (parent_id, "parentId")):
        if value is not None:
            refuse_nul(value, field)
    if parent_id is not None and parent_id == folder_id:
        raise InvalidInputFailure("parentId: a folder cannot be moved under itself")
    resolved = await resolve_vault(uow, caller, vault, "write")
    scope = resolved.record.scope
    try:
        current = await uow.folders.get(scope, folder_id)
        if current.project_id != project_id:
            raise NotFoundFailure("folder not found")
        if (await uow.projects.get(scope, project_id)).status != "active":
            raise ConflictFailure(
                "the project is archived; its folders cannot change "
                "(unarchive it with image_project_update archived=false)"
            )
        new_parent = None if to_root else (current.parent_id if parent_id is None else parent_id)
        new_name = current.name if name is None else name.strip()
        changed = []
        if new_name != current.name:
            changed.append("name")
        if new_parent != current.parent_id:
            changed.append("parentId")
        record = current
        if changed:
            record = await uow.folders.update(scope, folder_id, name=new_name, parent_id=new_parent)
        lineage = await uow.folders.lineage(scope, folder_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    if changed:
        await uow.provenance.record_in_vault(
            "asset_folder_update",
            scope,
            "folder",
            folder_id,
            actor_identity=caller.identity,
            detail={
                "projectId": project_id,
                "changed": changed,
                "from": {"parentId": current.parent_id},
                "to": {"parentId": new_parent},
            },
        )
    view = folder_view(record, resolved.display_handle, lineage)
    return FolderEdit(**dict(view), changed=changed)

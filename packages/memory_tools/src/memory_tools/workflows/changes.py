"""Changing and removing assets: move, delete, restore, purge, folder deletion.

A move changes metadata only (the object key and bytes stay). A delete runs in one
transaction — ``deleting``, jobs cancelled, vectors deleted, ``deleted`` with provenance, the
object marked ``deleting`` when no active asset still uses it. Search never finds it again.

For ``ASSET_DELETE_GRACE_HOURS`` the bytes stay, still counted against the owner's quota, and
:func:`restore_asset` can bring the image back (the worker embeds it again from the stored
preview). Once the window has passed, the worker's sweep deletes the bytes
(:func:`purge_deleted_objects`) and gives them back to the quota; a restore then answers
``not_found``. A failed byte deletion leaves the object ``deleting`` for the next sweep; access
never returns. See docs/design.md#deleting.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Literal

from pydantic import Field

from memory_db import MemoryDbError, NotFound, UnitOfWork, get_logger
from memory_db.repositories import AssetRecord, ObjectRecord, VaultScope
from memory_db.vectors import VectorIndex
from memory_tools import metrics, policy
from memory_tools.access import Caller, ResolvedVault, readable_vaults, resolve_vault
from memory_tools.errors import (
    ConflictFailure,
    FeatureDisabled,
    InvalidInputFailure,
    NotFoundFailure,
    translate,
)
from memory_tools.ingest.plan import asset_fused_text
from memory_tools.ingest.reservations import over_quota
from memory_tools.ingest.save import check_placement, vector_bytes
from memory_tools.progress import Progress, every, no_progress
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel
from memory_tools.workflows.assets import descendants

log = get_logger(__name__)

# Purged objects per sweep (each is two store deletes).
PURGE_BATCH = 100
# A restore is a short transaction that passed its window check before the window closed; the
# purge waits this much longer than the window, so it never deletes bytes such a restore is
# taking back into use.
PURGE_MARGIN = timedelta(minutes=5)


class MoveResult(WireModel):
    """Where the asset is now; its object (the stored bytes) never changes on a move."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    object_id: str
    moved: bool = Field(description="False when the asset was already there.")


class DeleteResult(WireModel):
    """The outcome of a delete; repeating it reports alreadyDeleted and changes nothing."""

    asset_id: str
    vault: str
    status: str
    already_deleted: bool
    jobs_cancelled: int
    vectors_removed: int
    object_released: bool = Field(
        description="No other asset uses these bytes: they are purged once the delete grace "
        "window (ASSET_DELETE_GRACE_HOURS) has passed; until then image_asset_restore brings "
        "the image back."
    )


class RestoreResult(WireModel):
    """A restored image; restoring one that is not deleted reports alreadyActive."""

    asset_id: str
    vault: str
    status: str
    embedding_status: str
    already_active: bool
    project_id: str | None
    folder_id: str | None
    placement: str = Field(
        description="'original' (where it was), 'project_root' (its folder is gone) or "
        "'unfiled' (its project is gone or archived)."
    )
    job_ids: list[str]


class FolderDeletion(WireModel):
    """A folder deletion, or its dry run (deleted false, with a confirm token)."""

    folder_id: str
    project_id: str
    vault: str
    deleted: bool
    folders: int = Field(description="The folder and its subfolders.")
    assets: int = Field(description="Images in them.")
    bytes: int = Field(description="Original bytes of the distinct images they use.")
    confirm: str | None = Field(
        description="Pass back as confirm (with recursive=true) to delete exactly this."
    )


async def locate_asset(
    uow: UnitOfWork, caller: Caller, asset_id: str, need: Literal["write", "destructive"]
) -> tuple[ResolvedVault, AssetRecord]:
    """The asset (deleted ones too) in a vault the caller can read, checked for ``need``.

    Another owner's ids answer ``not_found`` exactly like ids that never existed; an asset the
    caller may read but not change is ``forbidden``. Only a change is asked for: a read
    resolves its vaults with ``readable_vaults`` itself.
    """
    vaults = await readable_vaults(uow, caller)
    record = await uow.assets.locate([v.record.scope for v in vaults], asset_id)
    if record is None:
        raise NotFoundFailure("asset not found")
    vault = next(
        v
        for v in vaults
        if (v.record.owner_identity, v.record.physical_vault)
        == (record.owner_identity, record.vault)
    )
    resolved = await resolve_vault(uow, caller, vault.display_handle, need)
    return resolved, record


async def lock_live_asset(
    uow: UnitOfWork, caller: Caller, asset_id: str
) -> tuple[VaultScope, AssetRecord]:
    """The asset, locked for a change, in a vault the caller may write; and its vault's scope.

    A deleted asset answers ``not_found`` like a missing one: it must be restored before it
    can be changed.
    """
    resolved, record = await locate_asset(uow, caller, asset_id, "write")
    if record.status in ("deleting", "deleted"):
        raise NotFoundFailure("asset not found")
    scope = resolved.record.scope
    asset = await uow.assets.lock(scope, asset_id)
    if asset is None:
        raise NotFoundFailure("asset not found")
    return scope, asset


async def _index(uow: UnitOfWork, services: MemoryServices) -> VectorIndex | None:
    """The aliased vector index; ``None`` before the first vector was ever written.

    Held like the worker's (a switch waits for this change), with the indexes being rebuilt
    beside it, so a move or delete reaches them too.
    """
    try:
        return await uow.vector_indexes.open_alias(services.vector_alias)
    except NotFound:
        return None


async def move_asset(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    project_id: str | None,
    folder_id: str | None,
) -> MoveResult:
    """Place an asset in another project or folder of its vault (no bytes are copied)."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if folder_id is not None and project_id is None:
        raise InvalidInputFailure("folderId: give the folder's projectId as well")
    resolved, record = await locate_asset(uow, caller, asset_id, "write")
    if record.status in ("deleting", "deleted"):
        raise NotFoundFailure("asset not found")
    scope = resolved.record.scope
    try:
        await check_placement(uow, scope, project_id, folder_id, key_share=True)
    except MemoryDbError as exc:
        raise translate(exc) from None
    locked = await uow.assets.lock(scope, asset_id)
    if locked is None:
        raise NotFoundFailure("asset not found")
    moved = (locked.project_id, locked.folder_id) != (project_id, folder_id)
    if moved:
        await uow.assets.place(
            scope, asset_id, project_id=project_id, folder_id=folder_id, actor=caller.identity
        )
        index = await _index(uow, services)
        if index is not None:
            await index.move_asset(scope, asset_id, project_id, folder_id)
        await uow.provenance.record_in_vault(
            "asset_move",
            scope,
            "asset",
            asset_id,
            actor_identity=caller.identity,
            detail={
                "from": {"projectId": locked.project_id, "folderId": locked.folder_id},
                "to": {"projectId": project_id, "folderId": folder_id},
            },
        )
    return MoveResult(
        asset_id=asset_id,
        vault=resolved.display_handle,
        project_id=project_id,
        folder_id=folder_id,
        object_id=locked.object_id,
        moved=moved,
    )


async def _remove(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    index: VectorIndex | None,
    scope: VaultScope,
    asset_id: str,
) -> tuple[int, int, bool] | None:
    """The delete transaction for one asset; ``None`` if it is already deleted."""
    asset = await uow.assets.lock(scope, asset_id, include_deleted=True)
    if asset is None or asset.status == "deleted":
        return None
    owner = scope.owner_identity
    await uow.assets.set_status(scope, asset_id, "deleting", caller.identity)
    cancelled = await uow.jobs.cancel_for_asset(owner, asset_id)
    removed = 0 if index is None else await index.delete_asset(scope, asset_id)
    await uow.assets.set_status(scope, asset_id, "deleted", caller.identity)
    # The save charged vector bytes for every representation it queued; give them back.
    representations = {
        job.representation
        for job in await uow.jobs.for_asset(owner, asset_id)
        if job.representation is not None  # other kinds of job hold no vector
    }
    refund = vector_bytes(services, len(representations))
    if refund:
        await uow.quota.add_used(owner, -refund)
    await uow.provenance.record_in_vault(
        "asset_delete",
        scope,
        "asset",
        asset_id,
        actor_identity=caller.identity,
        detail={"jobsCancelled": cancelled, "vectorsRemoved": removed},
    )
    # Lock the object first: a concurrent save reusing it either commits before (and is
    # counted below) or finds it no longer available and retries with fresh bytes.
    await uow.objects.lock(owner, asset.object_id)
    released = False
    if await uow.assets.active_references(owner, asset.object_id) == 0:
        released = await uow.objects.mark_deleting(owner, asset.object_id)
    deleted = metrics.ASSETS_DELETED.labels(
        metrics.bounded(asset.source_kind, metrics.SOURCE_KINDS)
    )
    uow.after_commit(deleted.inc)  # a delete rolled back was never made
    return cancelled, removed, released


async def delete_asset(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> DeleteResult:
    """Delete an asset (needs the ``destructive`` scope and write authority on its vault)."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    resolved, _ = await locate_asset(uow, caller, asset_id, "destructive")
    scope = resolved.record.scope
    outcome = await _remove(uow, caller, services, await _index(uow, services), scope, asset_id)
    if outcome is None:
        return DeleteResult(
            asset_id=asset_id,
            vault=resolved.display_handle,
            status="deleted",
            already_deleted=True,
            jobs_cancelled=0,
            vectors_removed=0,
            object_released=False,
        )
    cancelled, removed, released = outcome
    log.info(
        "asset_deleted",
        asset_id=asset_id,
        jobs_cancelled=cancelled,
        vectors=removed,
        released=released,
    )
    return DeleteResult(
        asset_id=asset_id,
        vault=resolved.display_handle,
        status="deleted",
        already_deleted=False,
        jobs_cancelled=cancelled,
        vectors_removed=removed,
        object_released=released,
    )


def delete_grace(services: MemoryServices) -> timedelta:
    """How long a deleted image stays restorable (``ASSET_DELETE_GRACE_HOURS``)."""
    return timedelta(hours=services.settings.asset_delete_grace_hours)


async def restore_asset(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> RestoreResult:
    """Bring a deleted image back within the delete grace window.

    Needs the ``destructive`` scope and write authority on its vault, like a delete. The image
    returns to its project and folder; to the project's root if its folder is gone, and to
    Unfiled if its project is gone or archived. Its embeddings are queued again. Restoring an
    image that is not deleted changes nothing; once the window has passed (or for ids the
    caller cannot see) the answer is ``not_found``. A read-only server refuses it (the web
    app's Trash reaches it there too).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    embedder = services.embedder
    if embedder is None:
        raise FeatureDisabled("no embedder is configured on this server")
    resolved, _ = await locate_asset(uow, caller, asset_id, "destructive")
    scope = resolved.record.scope
    owner = scope.owner_identity
    asset = await uow.assets.lock(scope, asset_id, include_deleted=True)
    if asset is None or asset.status == "deleting":
        raise NotFoundFailure("asset not found")
    if asset.status != "deleted":
        jobs = await uow.jobs.for_asset(owner, asset_id)
        pending = [job.id for job in jobs if job.status in ("queued", "running", "retry")]
        return _restored(asset, resolved.display_handle, "original", pending, already_active=True)
    if not await uow.assets.deleted_within(scope, asset_id, delete_grace(services)):
        raise NotFoundFailure("asset not found (its delete grace window has passed)")
    # Lock order as in a delete (asset, namespace, object), so the two never deadlock.
    usage = await uow.quota.usage(owner, lock=True)
    object_id = await _take_back_bytes(uow, owner, asset.object_id)
    project_id, folder_id, placement = await _restored_placement(uow, scope, asset)
    text = asset_fused_text(asset)
    representations = ["visual", "fused"] if text else ["visual"]
    # The delete gave the vector bytes back; the restore charges them again. The object's
    # bytes were never given back (they count until the purge).
    vectors = vector_bytes(services, len(representations))
    if usage.used_bytes + usage.reserved_bytes + vectors > usage.quota_bytes:
        raise over_quota(
            f"restoring needs {vectors} bytes for its vectors: {usage.used_bytes} used + "
            f"{usage.reserved_bytes} reserved + {vectors} > {usage.quota_bytes} quota",
            owner=owner,
            caller=caller.identity,
        )
    await uow.quota.add_used(owner, vectors)
    restored = await uow.assets.restore(
        scope,
        asset_id,
        object_id=object_id,
        project_id=project_id,
        folder_id=folder_id,
        actor=caller.identity,
    )
    jobs = [
        await uow.jobs.create(
            owner,
            asset_id,
            representation=representation,
            model=embedder.model,
            dimensions=embedder.dimensions,
        )
        for representation in representations
    ]
    await uow.provenance.record_in_vault(
        "asset_restore",
        scope,
        "asset",
        asset_id,
        actor_identity=caller.identity,
        detail={
            "placement": placement,
            "projectId": project_id,
            "folderId": folder_id,
            "objectId": object_id,
            "representations": representations,
        },
    )
    await uow.jobs.notify()
    log.info("asset_restored", placement=placement, representations=len(representations))
    return _restored(
        restored, resolved.display_handle, placement, [job.id for job in jobs], already_active=False
    )


def _restored(
    asset: AssetRecord, vault: str, placement: str, job_ids: list[str], *, already_active: bool
) -> RestoreResult:
    """The answer of a restore: the image as it is now (restored, or found already active)."""
    return RestoreResult(
        asset_id=asset.id,
        vault=vault,
        status=asset.status,
        embedding_status=asset.embedding_status,
        already_active=already_active,
        project_id=asset.project_id,
        folder_id=asset.folder_id,
        placement=placement,
        job_ids=job_ids,
    )


async def _take_back_bytes(uow: UnitOfWork, owner: str, object_id: str) -> str:
    """The object a restored asset uses: its own, taken back into use if it was ``deleting``.

    When the owner saved the same bytes again meanwhile, that newer object holds them (one
    available object per owner and SHA-256): the asset shares it, and its old object is purged
    after the window. ``not_found`` when the bytes are already gone.
    """
    stored = await uow.objects.lock(owner, object_id)
    if stored.status == "deleted":
        raise NotFoundFailure("asset not found (its delete grace window has passed)")
    if stored.status != "deleting":
        return stored.id  # another asset kept it in use
    newer = await uow.objects.find_reusable(owner, stored.sha256)
    if newer is not None:
        return newer.id
    await uow.objects.take_back(owner, stored.id)
    return stored.id


async def _restored_placement(
    uow: UnitOfWork, scope: VaultScope, asset: AssetRecord
) -> tuple[str | None, str | None, str]:
    """Where a restored asset goes: where it was, else its project's root, else Unfiled.

    The project and folder are held ``FOR KEY SHARE`` like a save's placement, so a concurrent
    archive or folder deletion waits for this restore or is seen by it.
    """
    if asset.project_id is None:
        return None, None, "original"
    try:
        await check_placement(uow, scope, asset.project_id, None, key_share=True)
    except MemoryDbError:
        return None, None, "unfiled"  # the project is deleted or archived
    if asset.folder_id is None:
        return asset.project_id, None, "original"
    try:
        await check_placement(uow, scope, asset.project_id, asset.folder_id, key_share=True)
    except MemoryDbError:
        return asset.project_id, None, "project_root"
    return asset.project_id, asset.folder_id, "original"


async def purge_deleted_objects(services: MemoryServices, *, limit: int = PURGE_BATCH) -> int:
    """Delete the bytes of objects marked ``deleting``, then mark them ``deleted``.

    Only objects whose delete grace window has passed (``ASSET_DELETE_GRACE_HOURS``, plus
    :data:`PURGE_MARGIN` when there is a window): until then a restore may take them back.
    The store deletes run outside any transaction; an object whose bytes could not be deleted
    stays ``deleting`` and is retried on the next sweep. Returns how many objects were purged.
    """
    async with services.database.unit_of_work() as uow:
        pending = await uow.objects.deleting(limit=limit, older_than=purge_wait(services))
    gone = [stored for stored in pending if await delete_stored_bytes(services, stored)]
    purged = 0
    if gone:
        async with services.database.unit_of_work() as uow:
            for stored in gone:
                purged += await record_purged(uow, stored, "system:worker")
    return purged


async def delete_stored_bytes(services: MemoryServices, stored: ObjectRecord) -> bool:
    """Delete an object's original and preview from the store; ``False`` if that failed.

    Outside any transaction. A failure is logged; the object stays ``deleting`` and the next
    sweep tries again.
    """
    try:
        await services.store.delete(stored.storage_key)
        if stored.preview_storage_key is not None:
            await services.store.delete(stored.preview_storage_key)
    except MemoryDbError as exc:
        log.warning(
            "asset_object_purge_failed",
            object_id=stored.id,
            error=type(exc).__name__,
            exc_info=True,
        )
        return False
    return True


async def record_purged(uow: UnitOfWork, stored: ObjectRecord, actor: str) -> bool:
    """Record that an object's bytes are gone; ``False`` if another purge got there first.

    The object becomes ``deleted``, its bytes go back to its owner's quota, and
    ``asset_object_purge`` is recorded with ``actor``.
    """
    done = await uow.objects.mark_deleted(stored.owner_identity, stored.id)
    if done is None:
        return False
    freed = done.bytes + (done.preview_bytes or 0)
    await uow.quota.add_used(done.owner_identity, -freed)
    metrics.PURGED_BYTES.inc(freed)
    await uow.provenance.record(
        "asset_object_purge",
        actor_identity=actor,
        owner_identity=done.owner_identity,
        target_kind="object",
        target_id=done.id,
        detail={"bytes": freed},
    )
    return True


def purge_wait(services: MemoryServices) -> timedelta:
    """How long after its last delete the sweep waits before it purges an object's bytes."""
    grace = delete_grace(services)
    return grace + PURGE_MARGIN if grace else grace


def _confirmation(folder_ids: list[str], asset_ids: list[str]) -> str:
    """A token naming exactly what a recursive deletion would remove."""
    digest = hashlib.sha256()
    for value in [*sorted(folder_ids), "|", *sorted(asset_ids)]:
        digest.update(value.encode() + b"\0")
    return "del_" + digest.hexdigest()[:24]


async def delete_folder(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    project_id: str,
    folder_id: str,
    recursive: bool,
    confirm: str | None,
    progress: Progress = no_progress,
) -> FolderDeletion:
    """Delete an empty folder, or a folder with its contents after a dry run.

    Without ``recursive`` the folder must hold no images and no subfolders. With it, a call
    without ``confirm`` is a dry run that changes nothing and returns the counts and a
    ``confirm`` token; calling again with that token deletes the folder, its subfolders and
    their images, provided nothing changed in between (docs/design.md#folder-deletion).
    ``progress`` hears how many of the images are deleted, as they are.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    resolved = await resolve_vault(uow, caller, vault, "destructive")
    scope = resolved.record.scope
    try:
        # The project row first, as folder creation and moves take it: none of them can put a
        # live folder under one this deletion removes (they run before it, or find it gone).
        await uow.projects.lock(scope, project_id)
        folder = await uow.folders.get(scope, folder_id, fresh=True)
        if folder.project_id != project_id:
            raise NotFoundFailure("folder not found")
        folders = await uow.folders.list(scope, project_id)
    except MemoryDbError as exc:
        raise translate(exc) from None
    subtree = list(descendants(folder_id, [(f.id, f.parent_id) for f in folders]))
    # Saves and moves into these folders lock them FOR KEY SHARE: they finish first (and are
    # counted below) or wait and then find the folder gone.
    await uow.folders.lock(scope, subtree)
    contents = await uow.assets.in_folders(scope, project_id, subtree)
    objects: dict[str, int] = {row.asset.object_id: row.bytes for row in contents}
    token = _confirmation(subtree, [row.asset.id for row in contents])

    def summary(deleted: bool) -> FolderDeletion:
        return FolderDeletion(
            folder_id=folder_id,
            project_id=project_id,
            vault=resolved.display_handle,
            deleted=deleted,
            folders=len(subtree),
            assets=len(contents),
            bytes=sum(objects.values()),
            confirm=None if deleted else token,
        )

    if not recursive and (contents or len(subtree) > 1):
        raise ConflictFailure(
            f"the folder holds {len(contents)} image(s) (subfolders included) and "
            f"{len(subtree) - 1} subfolder(s): "
            "move them first, or delete recursively (recursive=true, after a dry run)"
        )
    if recursive and confirm is None:
        return summary(False)
    if recursive and confirm != token:
        raise ConflictFailure(
            "confirm does not match what the folder holds now (it changed since the dry run, "
            "or the token is wrong): run the dry run again"
        )
    index = await _index(uow, services)
    total, step = len(contents), every(len(contents))
    await progress(0, total, f"deleting {total} image(s) in {len(subtree)} folder(s)")
    for done, row in enumerate(contents, start=1):
        await _remove(uow, caller, services, index, scope, row.asset.id)
        if done % step == 0 or done == total:
            await progress(done, total, f"deleting images: {done} of {total} done")
    await uow.folders.mark_deleted(scope, subtree)
    await uow.provenance.record_in_vault(
        "asset_folder_delete",
        scope,
        "folder",
        folder_id,
        actor_identity=caller.identity,
        detail={"projectId": project_id, "folders": len(subtree), "assets": len(contents)},
    )
    return summary(True)

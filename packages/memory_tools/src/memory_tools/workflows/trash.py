"""The trash: deleted images that may still be restored, and purging one now.

Who sees what: the trash of a vault is shown to those who could restore from it, the owner and
grantees with ``write`` or ``admin`` permission (restoring needs write authority, like a
delete); a ``read`` grantee sees nothing of it. Listing needs the ``read`` scope; restoring
(:func:`memory_tools.workflows.changes.restore_asset`) and purging need ``destructive``.

Purging now (:func:`purge_asset`) takes a deleted image out of the trash for good, before its
delete grace window (``ASSET_DELETE_GRACE_HOURS``) ends. Only the vault's owner or an ``admin``
grantee may: a writer may delete and restore, but not take away the owner's window to undo.
Bytes are shared between images of one owner (one object per SHA-256), so the object's bytes
are deleted only when no other image needs them: none that is live, and none that is deleted
but may still be restored. Otherwise the image alone is purged and the bytes stay (counted
against the quota) until the last image that uses them goes. See docs/design.md#deleting.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from memory_db import UnitOfWork, get_logger
from memory_db.repositories import ObjectRecord, TrashedAsset
from memory_tools import policy
from memory_tools.access import Caller, readable_vaults
from memory_tools.errors import Forbidden, InvalidInputFailure, NotFoundFailure
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel
from memory_tools.workflows.assets import (
    PreviewLink,
    decode_cursor,
    encode_cursor,
    signed_preview,
    vault_handles,
)
from memory_tools.workflows.changes import (
    delete_grace,
    delete_stored_bytes,
    locate_asset,
    purge_wait,
    record_purged,
)

log = get_logger(__name__)

MAX_TRASH_LIMIT = 100
# Vault permissions that see the trash: those that may restore from it.
_TRASH_PERMISSIONS = frozenset({"owner", "admin", "write"})
# Vault permissions that may purge an image before its window ends.
_PURGE_PERMISSIONS = frozenset({"owner", "admin"})
# The order a trash cursor belongs to (cursors of other lists are refused).
_ORDER = "deleted"


class TrashItem(WireModel):
    """A deleted image that may still be restored."""

    asset_id: str
    vault: str
    title: str
    mime_type: str
    width: int
    height: int
    bytes: int
    deleted_at: datetime
    purge_at: datetime = Field(
        description="When the delete grace window ends: restorable until then."
    )
    preview: PreviewLink | None = Field(
        description="A short-lived link to its preview; null when its bytes are unavailable."
    )
    can_purge: bool = Field(
        description="The caller may purge it now: the vault's owner or an admin grantee, "
        "with the destructive scope."
    )


class TrashPage(WireModel):
    """One page of the trash, most recently deleted first."""

    items: list[TrashItem]
    next_cursor: str | None = Field(description="Pass as cursor for the next page.")
    grace_hours: float = Field(description="ASSET_DELETE_GRACE_HOURS of this server.")
    can_restore: bool = Field(description="The key carries the destructive scope.")


class PurgeResult(WireModel):
    """An image purged from the trash; its bytes are deleted unless another image needs them."""

    asset_id: str
    vault: str
    object_id: str
    bytes_deleted: bool = Field(
        description="The bytes were deleted now (always false in a vault shared with you)."
    )
    bytes_kept: str | None = Field(
        description="Why the bytes stay: another image uses them, or the store refused the "
        "deletion now (the worker's sweep retries); null when they were deleted, and in a "
        "vault shared with you (the owner's other vaults are not yours to learn about)."
    )
    freed_bytes: int = Field(description="Bytes given back to the quota now.")


async def _preview(services: MemoryServices, trashed: TrashedAsset) -> PreviewLink | None:
    """A signed link to a trashed image's preview (its object is ``deleting`` or still used)."""
    return await signed_preview(services, trashed.stored, trashed=True)


async def trashed_preview(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> PreviewLink | None:
    """A fresh link to the preview of one image in the caller's trash; ``None`` when it is not.

    Exactly the images :func:`list_trash` shows the caller (so never another owner's).
    """
    policy.require(services.settings)
    vaults = [
        v for v in await readable_vaults(uow, caller) if v.record.permission in _TRASH_PERMISSIONS
    ]
    rows = await uow.assets.trash(
        [v.record.scope for v in vaults],
        window=delete_grace(services),
        limit=1,
        asset_id=asset_id,
    )
    return await _preview(services, rows[0]) if rows else None


async def list_trash(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    limit: int = 24,
    cursor: str | None = None,
) -> TrashPage:
    """One page of the deleted images the caller could restore, most recently deleted first."""
    policy.require(services.settings)
    if not 1 <= limit <= MAX_TRASH_LIMIT:
        raise InvalidInputFailure(f"limit: between 1 and {MAX_TRASH_LIMIT}")
    after = decode_cursor(cursor, _ORDER) if cursor else None
    vaults = [
        v for v in await readable_vaults(uow, caller) if v.record.permission in _TRASH_PERMISSIONS
    ]
    grace = delete_grace(services)
    rows = await uow.assets.trash(
        [v.record.scope for v in vaults], window=grace, limit=limit + 1, after=after
    )
    handles = vault_handles(vaults)
    purgeable = {
        (v.record.owner_identity, v.record.physical_vault)
        for v in vaults
        if v.record.permission in _PURGE_PERMISSIONS and caller.has_scope("destructive")
    }
    page = rows[:limit]
    items = [
        TrashItem(
            asset_id=row.stored.asset.id,
            vault=handles[(row.stored.asset.owner_identity, row.stored.asset.vault)],
            title=row.stored.asset.title,
            mime_type=row.stored.mime_type,
            width=row.stored.width,
            height=row.stored.height,
            bytes=row.stored.bytes,
            deleted_at=row.deleted_at,
            purge_at=row.deleted_at + grace,
            preview=await _preview(services, row),
            can_purge=(row.stored.asset.owner_identity, row.stored.asset.vault) in purgeable,
        )
        for row in page
    ]
    next_cursor = None
    if len(rows) > limit and page:
        next_cursor = encode_cursor(page[-1].deleted_at, page[-1].stored.asset.id, _ORDER)
    return TrashPage(
        items=items,
        next_cursor=next_cursor,
        grace_hours=services.settings.asset_delete_grace_hours,
        can_restore=caller.has_scope("destructive"),
    )


async def _take_out_of_trash(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, asset_id: str
) -> tuple[PurgeResult, ObjectRecord | None, bool]:
    """The purge's transaction: the image leaves the trash for good.

    Its object, if no other image needs it, is made due for deletion and returned, so its
    bytes are deleted after the commit; and whether the caller owns the vault.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    resolved, _ = await locate_asset(uow, caller, asset_id, "destructive")
    if resolved.record.permission not in _PURGE_PERMISSIONS:
        raise Forbidden(
            f"you have {resolved.record.permission} access to this vault; only its owner or "
            "an admin grantee may purge an image before its delete grace window ends"
        )
    scope = resolved.record.scope
    owner = scope.owner_identity
    # Lock order as in a delete and a restore (asset, then object): a restore of this image
    # waits for this purge and then finds it gone, or restores it first and this finds it live.
    asset = await uow.assets.lock(scope, asset_id, include_deleted=True)
    grace = delete_grace(services)
    if (
        asset is None
        or asset.status != "deleted"
        or not await uow.assets.deleted_within(scope, asset_id, grace)
    ):
        raise NotFoundFailure("asset not found in the trash")
    await uow.assets.mark_purged(scope, asset_id, caller.identity)
    stored = await uow.objects.lock(owner, asset.object_id)
    # Another image keeps the bytes if it is live, or deleted and still restorable (within
    # the sweep's wait, so a restore that passed its own window check is counted too).
    others = await uow.assets.keeping_references(
        owner, stored.id, restorable_within=purge_wait(services), excluding=asset_id
    )
    kept: str | None = None
    due: ObjectRecord | None = None
    if others:
        kept = f"{others} other image(s) use the same bytes"
    elif stored.status == "deleting":
        await uow.objects.purge_due(owner, stored.id, older_than=purge_wait(services))
        due = stored
    elif stored.status != "deleted":
        kept = "the bytes are in use"
    await uow.provenance.record_in_vault(
        "asset_purge",
        scope,
        "asset",
        asset_id,
        actor_identity=caller.identity,
        detail={"objectId": stored.id, "bytesKept": due is None, "otherImages": others},
    )
    result = PurgeResult(
        asset_id=asset_id,
        vault=resolved.display_handle,
        object_id=stored.id,
        bytes_deleted=False,
        bytes_kept=kept,
        freed_bytes=0,
    )
    return result, due, resolved.record.permission == "owner"


def _as_seen_by_grantee(result: PurgeResult) -> PurgeResult:
    """What a grantee is told: the image is gone, nothing of where else its bytes are used.

    Bytes are shared across all of the owner's vaults, so "they stay, another image uses them"
    (or "they are gone") would tell a grantee what the owner stores where they cannot look.
    """
    return result.model_copy(update={"bytes_deleted": False, "bytes_kept": None, "freed_bytes": 0})


async def purge_asset(caller: Caller, services: MemoryServices, *, asset_id: str) -> PurgeResult:
    """Purge a deleted image now: it cannot be restored, and its bytes go if no one needs them.

    Three steps, like the worker's sweep, so no bytes are deleted that a committed state still
    needs: a transaction takes the image out of the trash and, when no other image needs its
    bytes, makes its object due for the purge (no save or restore can take it back after
    that); the bytes are deleted from the store outside any transaction; a second transaction
    marks the object ``deleted``, gives its bytes back to the quota and records
    ``asset_object_purge``. If the store refuses, the sweep finishes the job later.
    Another owner's images, and images not in the trash, answer ``not_found``.
    """
    async with services.database.unit_of_work() as uow:
        result, due, owns = await _take_out_of_trash(uow, caller, services, asset_id)

    def shown(answer: PurgeResult) -> PurgeResult:
        return answer if owns else _as_seen_by_grantee(answer)

    if due is None:
        log.info("asset_purged", bytes_deleted=False)
        return shown(result)
    if not await delete_stored_bytes(services, due):
        return shown(
            result.model_copy(
                update={"bytes_kept": "the store refused the deletion; the worker's sweep retries"}
            )
        )
    async with services.database.unit_of_work() as uow:
        recorded = await record_purged(uow, due, caller.identity)
    log.info("asset_purged", bytes_deleted=True)
    # A sweep that ran between the two transactions recorded the purge (and the refund).
    freed = due.bytes + (due.preview_bytes or 0) if recorded else 0
    return shown(
        result.model_copy(update={"bytes_deleted": True, "bytes_kept": None, "freed_bytes": freed})
    )

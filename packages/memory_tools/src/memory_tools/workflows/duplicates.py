"""Near-duplicates (docs/design.md#near-duplicates): what an agent or a person can do with them.

Pairs are found from stored visual vectors when the embedding job writes an asset's vector (or
by a ``duplicates`` job that ``memory-server enrich --what duplicates`` and
``image_asset_enrich`` queue), and kept in ``mem_asset_near_duplicates``. Here they are read
and decided:

- :func:`near_duplicates_of`: an asset's open near-duplicates (``image_asset_get``/``save``).
- :func:`list_clusters`: a vault's clusters (connected components of its open pairs among
  live assets), newest first, paged with a cursor. Read access to the vault.
  :func:`list_clusters_with_images` adds each image's stored object (the duplicates page).
- :func:`dismiss_cluster`: "not duplicates": every pair among the given assets is dismissed
  and never shown again, also when found again. Write access.
- :func:`answer_save`: a save's answer with the pairs known within the call (``waitSeconds``).
- :func:`keep_one`: keep one, trash the others through the delete workflow, each authorised
  alone (the ``destructive`` scope), answered item by item.

Finding pairs and reading an asset's are :mod:`memory_tools.workflows.near_duplicates`
(re-exported here), where ``ASSET_NEAR_DUPLICATE_DISTANCE`` is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import Field

from memory_db import UnitOfWork, is_valid_id
from memory_db.repositories import OpenPair, PairedAsset, PairedImage
from memory_db.repositories.identities import DEFAULT_VAULT
from memory_tools import policy
from memory_tools.access import Caller, resolve_vault
from memory_tools.errors import InvalidInputFailure
from memory_tools.ingest.save import SaveResult
from memory_tools.services import MemoryServices
from memory_tools.text import refuse_nul
from memory_tools.wire import WireModel
from memory_tools.workflows.assets import (
    decode_cursor,
    encode_cursor,
    get_asset_row,
    get_asset_waiting,
)
from memory_tools.workflows.bulk import run_each
from memory_tools.workflows.calls import Credential
from memory_tools.workflows.changes import delete_asset
from memory_tools.workflows.near_duplicates import (
    NEAR_DUPLICATES_SHOWN,
    PAIRS_PER_ASSET,
    find_pairs,
    near_duplicate_distance,
    near_duplicates_of,
)

# The most open pairs a cluster listing reads. A vault's open pairs are read newest first (a
# partial index holds them), so at 100,000 images with one in ten a near-duplicate (about
# 10,000 pairs) a page reads them all in one statement; beyond this bound the oldest pairs wait
# until newer clusters are decided, and the page says ``truncated``.
MAX_OPEN_PAIRS = 10_000
MAX_CLUSTERS_PER_PAGE = 50
# The most assets one decision names (as the bulk ``assetIds`` elsewhere).
MAX_DECIDED = 100


class ClusterMember(WireModel):
    """An asset of a cluster."""

    asset_id: str
    title: str
    created_at: datetime


class Cluster(WireModel):
    """Assets linked by open near-duplicate pairs, newest first; ``distance``: the closest pair."""

    assets: list[ClusterMember]
    distance: float


class ClusterPage(WireModel):
    """A page of a vault's clusters; ``nextCursor`` continues it."""

    vault: str
    clusters: list[Cluster]
    next_cursor: str | None = None
    truncated: bool = Field(default=False, description="Built from the newest 10,000 pairs.")
    dismissed: int | None = Field(default=None, description="Pairs dismissed by this call.")


class DismissResult(WireModel):
    """A cluster marked "not duplicates": how many of its pairs were dismissed by this call."""

    vault: str
    asset_ids: list[str]
    dismissed: int


class TrashOutcome(WireModel):
    """One asset of a "keep one": trashed, or refused with a stable code and a reason."""

    asset_id: str
    trashed: bool
    code: str | None = None
    message: str | None = None


class KeepOneResult(WireModel):
    """A cluster decided by keeping one asset: the others, item by item."""

    kept: str
    items: list[TrashOutcome]


def clusters_of(pairs: Sequence[OpenPair]) -> list[Cluster]:
    """The connected components of ``pairs``, newest first (by their newest asset).

    Each cluster's assets are newest first; its distance is its closest pair's.
    """
    parent: dict[str, str] = {}

    def root(asset_id: str) -> str:
        parent.setdefault(asset_id, asset_id)
        while parent[asset_id] != asset_id:
            parent[asset_id] = parent[parent[asset_id]]
            asset_id = parent[asset_id]
        return asset_id

    assets: dict[str, PairedAsset] = {}
    for pair in pairs:
        assets[pair.a.asset_id] = pair.a
        assets[pair.b.asset_id] = pair.b
        parent[root(pair.a.asset_id)] = root(pair.b.asset_id)
    members: dict[str, list[PairedAsset]] = {}
    for asset_id, asset in assets.items():
        members.setdefault(root(asset_id), []).append(asset)
    closest: dict[str, float] = {}
    for pair in pairs:
        key = root(pair.a.asset_id)
        closest[key] = min(closest.get(key, pair.distance), pair.distance)
    clusters = [
        Cluster(
            assets=[
                ClusterMember(asset_id=a.asset_id, title=a.title, created_at=a.created_at)
                for a in sorted(group, key=_newest_first)
            ],
            distance=closest[key],
        )
        for key, group in members.items()
    ]
    clusters.sort(key=lambda c: _newest_first(c.assets[0]))
    return clusters


def _newest_first(asset: PairedAsset | ClusterMember) -> tuple[float, str]:
    return (-asset.created_at.timestamp(), _descending(asset.asset_id))


def _descending(text: str) -> str:
    # Ids are ASCII: the complement of each character sorts them backwards.
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def _position(member: ClusterMember) -> tuple[datetime, str]:
    return member.created_at, member.asset_id


# The listing's cursor (memory_tools.workflows.assets), under an order of its own: a page of
# images is no position among clusters.
CURSOR_ORDER = "clusters"


async def list_clusters(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> ClusterPage:
    """The clusters of a vault the caller may read (their own ``Library`` when none is named).

    Newest first by each cluster's newest asset; ``cursor`` (a page's ``nextCursor``) goes on
    after the last cluster it answered. Built from at most :data:`MAX_OPEN_PAIRS` open pairs,
    newest first (``truncated`` when there were more).
    """
    listed = await _clusters_page(
        uow, caller, services, vault=vault, limit=limit, cursor=cursor, with_images=False
    )
    return listed.page


@dataclass(frozen=True)
class ClustersWithImages:
    """A page of :func:`list_clusters` and, by asset id, each listed image's stored object."""

    page: ClusterPage
    images: dict[str, PairedImage]


async def list_clusters_with_images(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> ClustersWithImages:
    """:func:`list_clusters` with each image's size, bytes and preview (the duplicates page).

    Read in the same statement as the pairs, from the same vault resolution: the page needs no
    second read of the images it lists.
    """
    return await _clusters_page(
        uow, caller, services, vault=vault, limit=limit, cursor=cursor, with_images=True
    )


async def _clusters_page(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    limit: int,
    cursor: str | None,
    with_images: bool,
) -> ClustersWithImages:
    policy.require(services.settings)
    if not 1 <= limit <= MAX_CLUSTERS_PER_PAGE:
        raise InvalidInputFailure(f"limit: between 1 and {MAX_CLUSTERS_PER_PAGE}")
    after = decode_cursor(cursor, CURSOR_ORDER) if cursor is not None else None
    resolved = await resolve_vault(uow, caller, vault or DEFAULT_VAULT, "read")
    pairs = await uow.near_duplicates.open_pairs(
        resolved.record.scope,
        alias=services.vector_alias,
        cap=MAX_OPEN_PAIRS + 1,
        with_images=with_images,
    )
    truncated = len(pairs) > MAX_OPEN_PAIRS
    clusters = clusters_of(pairs[:MAX_OPEN_PAIRS])
    if after is not None:
        clusters = [c for c in clusters if _position(c.assets[0]) < after]
    page = clusters[:limit]
    more = len(clusters) > limit
    images = {
        asset.asset_id: asset.image
        for pair in pairs[:MAX_OPEN_PAIRS]
        for asset in (pair.a, pair.b)
        if asset.image is not None
    }
    return ClustersWithImages(
        page=ClusterPage(
            vault=resolved.display_handle,
            clusters=page,
            next_cursor=encode_cursor(*_position(page[-1].assets[0]), CURSOR_ORDER)
            if more
            else None,
            truncated=truncated,
        ),
        images=images,
    )


def check_asset_ids(asset_ids: Sequence[str], *, least: int, field: str = "assetIds") -> list[str]:
    """Distinct asset ids, in their order, checked (``invalid_input`` naming ``field``)."""
    if not least <= len(asset_ids) <= MAX_DECIDED:
        raise InvalidInputFailure(f"{field}: between {least} and {MAX_DECIDED} asset ids")
    ids: list[str] = []
    for asset_id in asset_ids:
        refuse_nul(asset_id, field)
        if not is_valid_id(asset_id, "ast"):
            raise InvalidInputFailure(f"{field}: {asset_id[:40]!r} is not an asset id")
        if asset_id not in ids:
            ids.append(asset_id)
    if len(ids) < least:
        raise InvalidInputFailure(f"{field}: at least {least} different asset ids")
    return ids


async def dismiss_cluster(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_ids: Sequence[str],
    vault: str | None = None,
    field: str = "assetIds",
) -> DismissResult:
    """Mark the assets "not duplicates" of each other in a vault the caller may write.

    Every pair between two of them is dismissed (by whom and when is kept) and never shown
    again, also when a later job or ``enrich`` finds it again. Ids of other vaults or owners
    match no pair of this vault and change nothing.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    ids = check_asset_ids(asset_ids, least=2, field=field)
    resolved = await resolve_vault(uow, caller, vault or DEFAULT_VAULT, "write")
    scope = resolved.record.scope
    dismissed = await uow.near_duplicates.dismiss(scope, ids, actor=caller.identity)
    await uow.provenance.record_in_vault(
        "asset_duplicates_dismiss",
        scope,
        "vault",
        scope.physical_vault,
        actor_identity=caller.identity,
        detail={"assets": len(ids), "dismissed": dismissed},
    )
    return DismissResult(vault=resolved.display_handle, asset_ids=ids, dismissed=dismissed)


async def review_clusters(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None = None,
    dismiss: Sequence[str] | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> ClusterPage:
    """``image_asset_duplicates``: dismiss a cluster if asked, then list the vault's clusters.

    One transaction: the page answered already leaves out what was dismissed.
    """
    dismissed: int | None = None
    if dismiss is not None:
        # Refusals name the tool's own field, not the workflow's.
        result = await dismiss_cluster(
            uow, caller, services, asset_ids=dismiss, vault=vault, field="dismiss"
        )
        dismissed = result.dismissed
    page = await list_clusters(uow, caller, services, vault=vault, limit=limit, cursor=cursor)
    return page.model_copy(update={"dismissed": dismissed})


async def keep_one(
    services: MemoryServices, credential: Credential, *, keep: str, trash: Sequence[str]
) -> KeepOneResult:
    """Keep ``keep`` and move each of ``trash`` to the trash, item by item.

    Run as a bulk delete (:func:`memory_tools.workflows.bulk.run_each`): each asset in its own
    transaction with the credential checked again, so a key paused or revoked (or a session
    ended) mid-way is refused from the next item on; each authorised alone by the delete
    workflow (the ``destructive`` scope and write authority on its vault). A refused one is
    named with its code and reason and never stops the rest. ``keep`` is never trashed.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    kept = check_asset_ids([keep], least=1)[0]
    others = [a for a in check_asset_ids(trash, least=1) if a != kept]
    # The kept image must be one the caller may read: "kept" is never said of another owner's
    # image (it answers not_found like an id that does not exist), and nothing is trashed then.
    async with services.database.single_statements() as uow:
        caller = await credential.check(uow)
        await get_asset_row(uow, caller, services, asset_id=kept)
    if not others:
        return KeepOneResult(kept=kept, items=[])
    answer = await run_each(services, credential, delete_asset, others, answer_budget=None)
    return KeepOneResult(
        kept=kept,
        items=[
            TrashOutcome(
                asset_id=item.asset_id,
                trashed=item.ok,
                code=item.error.code if item.error else None,
                message=item.error.message if item.error else None,
            )
            for item in answer.items
        ],
    )


# Embedding states whose visual vector is written: an asset's pairs are known then.
EMBEDDED = ("ready", "partial")


async def answer_save(
    caller: Caller, services: MemoryServices, saved: SaveResult, *, wait_seconds: float = 0
) -> SaveResult:
    """A save's answer with its ``nearDuplicates`` when they are known within the call.

    They are found when the worker writes the image's visual vector. ``wait_seconds`` (0-30)
    waits for that as ``image_asset_get``'s ``waitSeconds`` does (no polling; the asset's
    state notice wakes it), then answers the states and the pairs read after it; without
    waiting, an image not embedded yet answers ``nearDuplicates`` null (they come with the
    embedding: ``image_asset_get`` shows them). A save that found the image stored already
    (``deduplicated``, ``replayed``) and embedded answers them at once.
    """
    if wait_seconds == 0 and saved.embedding_status not in EMBEDDED:
        return saved
    view = await get_asset_waiting(
        caller, services, asset_id=saved.asset_id, include_preview=False, wait_seconds=wait_seconds
    )
    return saved.model_copy(
        update={
            "status": view.status,
            "embedding_status": view.embedding_status,
            "near_duplicates": view.near_duplicates,
        }
    )


__all__ = [
    "MAX_OPEN_PAIRS",
    "NEAR_DUPLICATES_SHOWN",
    "PAIRS_PER_ASSET",
    "Cluster",
    "ClusterMember",
    "ClusterPage",
    "ClustersWithImages",
    "DismissResult",
    "KeepOneResult",
    "TrashOutcome",
    "answer_save",
    "check_asset_ids",
    "clusters_of",
    "dismiss_cluster",
    "find_pairs",
    "keep_one",
    "list_clusters",
    "list_clusters_with_images",
    "near_duplicate_distance",
    "near_duplicates_of",
    "review_clusters",
]

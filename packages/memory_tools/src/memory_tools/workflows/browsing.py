"""What the web app's library and asset pages show, read as the caller in one transaction.

Web-only views (small dataclasses, never tool answers) built on the workflows the tools call:
``vaults.list_vaults``, ``projects.list_projects`` / ``list_folders``, ``assets.list_assets``,
``assets.get_asset`` and ``duplicates.list_clusters``. They add what a page needs beside a
tool's answer: a fresh preview link per listed asset, a way back to the previous page of a
forward-only cursor, the stored checksum, the caller's permission, the places an asset can be
moved to, and the size and preview of each image of a near-duplicate group. Authorisation is
the workflows' own: another owner's asset is ``not_found`` here exactly as in the tools.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from memory_db import MemoryDbError, UnitOfWork
from memory_db.repositories import AssetFilter, FolderRecord, VaultScope
from memory_db.repositories.identities import DEFAULT_VAULT
from memory_tools import policy
from memory_tools.access import Caller, readable_vaults, resolve_vault
from memory_tools.errors import InvalidInputFailure, NotFoundFailure, Unavailable, translate
from memory_tools.services import MemoryServices
from memory_tools.workflows.assets import (
    AssetSummary,
    AssetView,
    DownloadLink,
    ListRequest,
    PreviewLink,
    decode_cursor,
    encode_cursor,
    get_asset,
    list_asset_rows,
    list_position,
    opposite_order,
    signed_preview,
)
from memory_tools.workflows.duplicates import check_asset_ids, list_clusters_with_images
from memory_tools.workflows.projects import (
    FolderView,
    ProjectView,
    folder_tree,
    list_folders,
    list_projects,
)
from memory_tools.workflows.trash import trashed_preview
from memory_tools.workflows.vaults import VaultView, list_vaults

# What the library offers (``takenReversed`` is only its way back through ``taken``).
ORDERS = ("newest", "oldest", "taken")
_opposite = opposite_order


@dataclass(frozen=True)
class AssetCard:
    """One asset of a grid: its summary and a fresh preview link (``None``: no preview yet)."""

    summary: AssetSummary
    preview: PreviewLink | None


@dataclass(frozen=True)
class AssetGrid:
    """A page of assets for the library grid.

    ``next_cursor`` goes on in the request's order (``list_assets``' own cursor);
    ``previous_cursor`` is a cursor of the opposite order that :func:`asset_grid` reads
    backwards (``backward=True``) to show the page before this one.
    """

    cards: list[AssetCard]
    next_cursor: str | None
    previous_cursor: str | None


async def asset_grid(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    request: ListRequest,
    *,
    backward: bool = False,
) -> AssetGrid:
    """A page of ``list_assets`` with a preview link per asset and a previous-page cursor.

    ``list_assets`` pages forward only. Going back reads the listing in the opposite order
    from the first item of the page shown (``backward`` with the ``previous_cursor`` given),
    then shows those items in the request's order: the same items the earlier page held,
    unless images were added or removed meanwhile. When that reaches the beginning, the first
    page is shown as it is (always a full page).
    """
    policy.require(services.settings)
    if request.order not in ORDERS:
        raise InvalidInputFailure("order: newest, oldest or taken")
    if backward:
        if request.cursor is None:
            raise InvalidInputFailure("cursor: going back needs the cursor of a page")
        reverse = replace(request, order=_opposite(request.order))
        view, rows = await list_asset_rows(uow, caller, services, reverse)
        if view.next_cursor is None:  # nothing before these: show the first page itself
            return await asset_grid(uow, caller, services, replace(request, cursor=None))
        items, rows = list(reversed(view.items)), list(reversed(rows))
        last = rows[-1].asset
        return AssetGrid(
            cards=[
                AssetCard(item, await signed_preview(services, row))
                for item, row in zip(items, rows, strict=True)
            ],
            next_cursor=encode_cursor(list_position(last, request.order), last.id, request.order),
            previous_cursor=view.next_cursor,
        )
    view, rows = await list_asset_rows(uow, caller, services, request)
    previous = None
    if request.cursor is not None and rows:
        first = rows[0].asset
        previous = encode_cursor(
            list_position(first, request.order), first.id, _opposite(request.order)
        )
    elif request.cursor is not None:
        # Past the end (images removed meanwhile): back from the cursor's own position.
        created, asset_id = decode_cursor(request.cursor, request.order)
        previous = encode_cursor(created, asset_id, _opposite(request.order))
    return AssetGrid(
        cards=[
            AssetCard(item, await signed_preview(services, row))
            for item, row in zip(view.items, rows, strict=True)
        ],
        next_cursor=view.next_cursor,
        previous_cursor=previous,
    )


@dataclass(frozen=True)
class DuplicateCard:
    """One image of a near-duplicate group as the duplicates page shows it."""

    asset_id: str
    title: str
    width: int
    height: int
    bytes: int
    created_at: datetime
    preview: PreviewLink | None


@dataclass(frozen=True)
class DuplicateGroup:
    """A cluster of ``list_clusters`` (newest first), its closest pair's distance."""

    cards: list[DuplicateCard]
    distance: float


@dataclass(frozen=True)
class DuplicateGroups:
    """A page of a vault's near-duplicate groups; ``next_cursor`` continues it."""

    vault: str
    groups: list[DuplicateGroup]
    next_cursor: str | None
    truncated: bool


async def duplicate_groups(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    limit: int,
    cursor: str | None,
) -> DuplicateGroups:
    """A page of ``list_clusters`` with each image's size, bytes and a fresh preview link.

    One vault resolution and one read: the images come in the statement that reads the pairs
    (``duplicates.list_clusters_with_images``), so every image of a group is live with its
    object as read.
    """
    listed = await list_clusters_with_images(
        uow, caller, services, vault=vault, limit=limit, cursor=cursor
    )
    page = listed.page
    groups: list[DuplicateGroup] = []
    for cluster in page.clusters:
        cards = [
            DuplicateCard(
                asset_id=member.asset_id,
                title=member.title,
                width=image.width,
                height=image.height,
                bytes=image.bytes,
                created_at=member.created_at,
                preview=await signed_preview(services, image),
            )
            for member in cluster.assets
            for image in (listed.images[member.asset_id],)
        ]
        groups.append(DuplicateGroup(cards=cards, distance=cluster.distance))
    return DuplicateGroups(
        vault=page.vault, groups=groups, next_cursor=page.next_cursor, truncated=page.truncated
    )


async def asset_titles(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    asset_ids: list[str],
) -> dict[str, str]:
    """The titles of the live images among ``asset_ids`` in a vault the caller may read.

    For a page that names images it is about to change (the duplicates page's results): an id
    of another vault or owner, or of a deleted image, has no title here.
    """
    policy.require(services.settings)
    ids = tuple(check_asset_ids(asset_ids, least=1))
    resolved = await resolve_vault(uow, caller, vault or DEFAULT_VAULT, "read")
    rows = await uow.assets.find_visible(
        [resolved.record.scope], AssetFilter(asset_ids=ids), limit=len(ids)
    )
    return {row.asset.id: row.asset.title for row in rows}


@dataclass(frozen=True)
class LibraryTree:
    """The vaults the caller may read, the projects of each, and one project's folders."""

    vaults: list[VaultView]
    projects: dict[str, list[ProjectView]]  # by vault handle, every readable vault present
    folders: list[FolderView]  # of the selected project, depth-first; empty without one


async def library_tree(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str | None,
    project_id: str | None,
) -> LibraryTree:
    """The tree beside the grid: the readable vaults, their projects, one project's folders.

    Every vault with its active projects, and the folders of ``project_id`` (in ``vault``)
    when one is selected.
    """
    vaults = await list_vaults(uow, caller, services)
    projects = await list_projects(uow, caller, services, vault=None, include_archived=False)
    by_vault: dict[str, list[ProjectView]] = {v.vault: [] for v in vaults.vaults}
    for project in projects.projects:
        by_vault.setdefault(project.vault, []).append(project)
    folders: list[FolderView] = []
    if vault is not None and project_id is not None:
        tree = await list_folders(uow, caller, services, vault=vault, project_id=project_id)
        folders = tree.folders
    return LibraryTree(vaults=vaults.vaults, projects=by_vault, folders=folders)


@dataclass(frozen=True)
class Placement:
    """A place an asset can be moved to: a project's root or one of its folders."""

    project_id: str
    folder_id: str | None
    label: str  # "Project" or "Project/Trips/2026"


@dataclass(frozen=True)
class ProjectPlace:
    """The project (and folder) an asset is in, as its page names it."""

    project_id: str
    folder_id: str | None
    name: str  # the project's name
    folder_path: str | None  # "/Trips/2026", or None at the project's root
    archived: bool


@dataclass(frozen=True)
class AssetDetail:
    """Everything the asset page shows.

    The asset as ``image_asset_get`` shows it (with a fresh preview link), its stored SHA-256,
    the caller's permission on its vault and the places in that vault it can be moved to.
    """

    asset: AssetView
    sha256: str
    permission: str  # owner, admin, write or read
    placements: list[Placement]
    # The key may write and the server is not read-only (a vault permission alone is not enough).
    changeable: bool = True
    # Its project and folder; None when it is in no project (Unfiled).
    place: ProjectPlace | None = None

    @property
    def writable(self) -> bool:
        """Whether the caller may edit, move or delete the asset: vault permission and key."""
        return self.changeable and self.permission in ("owner", "admin", "write")


async def asset_detail(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> AssetDetail:
    """An asset the caller may read, for its page; ``not_found`` otherwise (as ``get_asset``)."""
    asset = await get_asset(uow, caller, services, asset_id=asset_id, include_preview=True)
    vaults = await readable_vaults(uow, caller)
    vault = next(v for v in vaults if v.display_handle == asset.vault)
    stored = await uow.assets.get_visible([vault.record.scope], asset_id)
    if stored is None:  # get_asset just read it in this transaction
        raise NotFoundFailure("asset not found")
    try:
        stored_object = await uow.objects.get(vault.record.owner_identity, stored.asset.object_id)
    except MemoryDbError as exc:
        raise translate(exc) from exc
    place: ProjectPlace | None = None
    # Archived projects too: an image keeps its place when its project is archived, and its
    # page names it; only active ones are offered as places to move to.
    projects = await list_projects(uow, caller, services, vault=asset.vault, include_archived=True)
    by_project = await _folders_by_project(uow, vault.record.scope)
    for project in projects.projects:
        if project.project_id != asset.project_id:
            continue
        tree = folder_tree(by_project.get(project.project_id, []), asset.vault)
        folder = next((f for f in tree if f.folder_id == asset.folder_id), None)
        place = ProjectPlace(
            project_id=project.project_id,
            folder_id=folder.folder_id if folder else None,
            name=project.name,
            folder_path=folder.path if folder else None,
            archived=project.status != "active",
        )
    return AssetDetail(
        asset=asset,
        sha256=stored_object.sha256,
        permission=vault.record.permission,
        placements=_placements(projects.projects, by_project, asset.vault),
        changeable=caller.has_scope("write") and not services.read_only,
        place=place,
    )


async def _folders_by_project(uow: UnitOfWork, scope: VaultScope) -> dict[str, list[FolderRecord]]:
    """Every folder of a vault at once, by project.

    A vault may have many projects (anyone who may write to it can add them), and a page must
    not cost a round of queries for each.
    """
    by_project: dict[str, list[FolderRecord]] = {}
    for folder in await uow.folders.list_vault(scope):
        by_project.setdefault(folder.project_id, []).append(folder)
    return by_project


def _placements(
    projects: list[ProjectView], by_project: dict[str, list[FolderRecord]], vault: str
) -> list[Placement]:
    """The places of ``vault`` an asset can be moved to: each active project and its folders."""
    placements: list[Placement] = []
    for project in projects:
        if project.vault != vault or project.status != "active":
            continue
        tree = folder_tree(by_project.get(project.project_id, []), vault)
        placements.append(Placement(project.project_id, None, project.name))
        placements.extend(
            Placement(project.project_id, f.folder_id, f"{project.name}{f.path}") for f in tree
        )
    return placements


@dataclass(frozen=True)
class VaultPlaces:
    """The places of one vault the caller may move images to (the library's Move picker)."""

    vault: str
    placements: list[Placement]


async def move_destinations(
    uow: UnitOfWork, caller: Caller, services: MemoryServices
) -> list[VaultPlaces]:
    """Each vault the caller may write to, with its active projects and their folders.

    An empty list when the key may not write or the server is read-only: the library then
    offers no Move. Whether a given image may go to a given place is still decided per image
    by ``changes.move_asset`` (another vault's place is refused there).
    """
    if not caller.has_scope("write") or services.read_only:
        return []
    projects = await list_projects(uow, caller, services, vault=None, include_archived=False)
    destinations: list[VaultPlaces] = []
    for vault in await readable_vaults(uow, caller):
        if vault.record.permission not in ("owner", "admin", "write"):
            continue
        by_project = await _folders_by_project(uow, vault.record.scope)
        places = _placements(projects.projects, by_project, vault.display_handle)
        destinations.append(VaultPlaces(vault.display_handle, places))
    return destinations


async def original_link(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> DownloadLink:
    """A fresh download link to an asset's original bytes.

    As ``image_asset_get`` with ``includeOriginal``; ``not_found`` when there are no bytes.
    """
    asset = await get_asset(
        uow, caller, services, asset_id=asset_id, include_preview=False, include_original=True
    )
    if asset.original is None:
        raise NotFoundFailure("the original bytes of this image are not available")
    return asset.original


async def preview_link(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> PreviewLink:
    """A fresh signed link to the preview of an image the caller may see, live or in its trash.

    The web pages point every ``<img>`` at a route that calls this when the image comes into
    view, so a page left open longer than ``ASSET_SIGNED_GET_TTL_SECONDS`` still loads its
    thumbnails. ``not_found`` for another owner's image, an unknown id, or no preview yet;
    ``unavailable`` when this server's links cannot be opened.
    """
    policy.require(services.settings)
    vaults = await readable_vaults(uow, caller)
    stored = await uow.assets.get_visible([v.record.scope for v in vaults], asset_id)
    if stored is not None:
        link = await signed_preview(services, stored)
    else:
        link = await trashed_preview(uow, caller, services, asset_id=asset_id)
    if link is None:
        raise NotFoundFailure("no preview of this image")
    if link.url is None:
        raise Unavailable(link.unavailable or "no preview link can be given now")
    return link

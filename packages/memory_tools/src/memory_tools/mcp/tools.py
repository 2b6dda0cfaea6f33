"""The memory tools: each is one method of ``MemoryTools`` declared with ``@tools.tool``.

Every call: presented key (HTTP bearer, else the stdio server's ``MEMORY_API_KEY``) → the one
call runner every adapter uses (:mod:`memory_tools.workflows.calls`): one unit of work that
authenticates, authorises and acts. The workflows check the feature switches
themselves (:mod:`memory_tools.policy`), so every adapter gets the same answer. A failure rolls
the transaction back and reaches the caller as ``ToolError("<code>: <message>")``.

Adding a tool: write one method here with ``@tools.tool(...)`` (title, hints, audited
operation) that returns its workflow's result model (a :class:`memory_tools.wire.WireModel`);
``build_memory_tools`` registers it on every server. docs/tools.md documents it for users.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from fastmcp.server.dependencies import get_access_token, get_context
from fastmcp.tools import Tool
from fastmcp.tools.tool_transform import ArgTransform
from pydantic import Field, WithJsonSchema

from memory_db import MemorySettings, UnitOfWork, get_logger
from memory_tools.access import Caller
from memory_tools.errors import ToolFailure
from memory_tools.ingest import inputs
from memory_tools.ingest.save import AssetSaver, SaveRequest, SaveResult
from memory_tools.jobs import ocr_jobs as enrich
from memory_tools.jobs.ocr_jobs import Enrichment
from memory_tools.mcp.registry import Advertised, Refused, Spread, ToolRegistry, ToolSpec
from memory_tools.progress import Progress, no_progress
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel
from memory_tools.workflows import assets, bulk, changes, duplicates, edits, projects, vaults
from memory_tools.workflows.assets import AssetListView, AssetView
from memory_tools.workflows.bulk import BulkAnswer, Denials, ItemAction
from memory_tools.workflows.calls import ApiKey, AsCaller, InTransaction, invoke, invoke_as_caller
from memory_tools.workflows.changes import DeleteResult, FolderDeletion, MoveResult, RestoreResult
from memory_tools.workflows.duplicates import ClusterPage
from memory_tools.workflows.edits import AssetEdit, FolderEdit, ProjectEdit
from memory_tools.workflows.filters import FilterParameters
from memory_tools.workflows.projects import FolderTree, FolderView, ProjectList, ProjectView
from memory_tools.workflows.search import AssetSearcher, SearchRequest, SearchView
from memory_tools.workflows.vaults import VaultList

log = get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R", bound=WireModel)
P = ParamSpec("P")

VaultParam = Annotated[
    str,
    Field(
        min_length=1,
        max_length=400,
        description="'Library', another of yours, or 'owner@example.com/Name'.",
    ),
]
ProjectIdParam = Annotated[str, Field(min_length=1, max_length=64, description="apr_...")]
NameParam = Annotated[str, Field(min_length=1, max_length=120)]
AssetIdParam = Annotated[str, Field(min_length=1, max_length=64, description="ast_...")]
# The subject of a tool that acts on one image or on several (memory_tools.workflows.bulk).
OneAssetParam = Annotated[str | None, Field(min_length=1, max_length=64, description="ast_...")]
# How many ids, how long each, and that none repeats are the workflow's to refuse
# (bulk.checked_ids, a clear invalid_input on every route): the bytes of minItems and of a
# maxLength per item, paid by every session, say nothing a caller needs up front.
AssetIdsParam = Annotated[
    list[str] | None,
    Field(max_length=bulk.MAX_IDS, description="Or several."),
]
TagsParam = Annotated[list[Annotated[str, Field(max_length=64)]] | None, Field(max_length=32)]
FolderIdParam = Annotated[str, Field(min_length=1, max_length=64, description="afl_...")]
ThumbnailsParam = Annotated[
    bool, Field(description="Also send 256 px JPEG thumbnails as image content.")
]
# Where listing and search look and their exact filters: one model, each field a parameter.
FiltersParam = Annotated[FilterParameters, Spread()]


def advertised_base64(max_bytes: int) -> Any:
    """The type a client is shown for a base64 image of at most ``max_bytes`` decoded bytes.

    Only what is advertised: the workflow decodes and refuses a longer image on every route
    (``inputs.decode_base64``), with a message that names ASSET_MAX_BYTES and the upload route.
    """
    within = {"type": "string", "maxLength": inputs.base64_length_limit(max_bytes)}
    return Annotated[str | None, WithJsonSchema({"anyOf": [within, {"type": "null"}]})]


def client_progress() -> Progress:
    """Progress notifications to the client of the running call (MCP ``notifications/progress``).

    fastmcp sends them only when the client's request carried a progress token; otherwise, and
    outside a call, reports go nowhere. A report that cannot be sent (the client went away) is
    dropped: progress never fails the work.
    """
    try:
        context = get_context()
    except RuntimeError:
        return no_progress

    async def report(done: float, total: float | None, message: str) -> None:
        try:
            await context.report_progress(progress=done, total=total, message=message)
        except Exception:
            log.debug("progress_not_sent", exc_info=True)

    return report


def presented_key(services: MemoryServices) -> ApiKey:
    """The key this MCP request presented: its HTTP bearer, else the stdio server's key."""
    token = get_access_token()
    return ApiKey(token.token if token is not None else services.default_api_key)


@contextmanager
def _refused_as(key: ApiKey) -> Generator[None]:
    """A ``ToolFailure`` raised as ``Refused``, naming the caller once the key was checked."""
    try:
        yield
    except ToolFailure as failure:
        raise Refused(failure, key.caller) from None


async def run_authorised(
    services: MemoryServices,
    action: InTransaction[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``action(uow, caller, services, ...)`` as this call's key, in one transaction.

    :func:`memory_tools.workflows.calls.invoke` with the key the call presented (the HTTP
    bearer, else the stdio server's ``MEMORY_API_KEY``): admitted first, authenticated in the
    transaction, thumbnails made after the commit. A failure is raised as ``Refused``; the
    tool's entry (:mod:`memory_tools.mcp.registry`) answers it and audits a denial under the
    tool's operation.
    """
    key = presented_key(services)
    with _refused_as(key):
        return await invoke(services, key, action, *args, **kwargs)


async def run_as_caller(
    services: MemoryServices,
    action: AsCaller[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``action(caller, ...)`` as this call's key, outside any transaction.

    :func:`memory_tools.workflows.calls.invoke_as_caller`, for work that must not hold a
    transaction open across network calls (``action`` opens its own); refused like
    :func:`run_authorised`.
    """
    key = presented_key(services)
    with _refused_as(key):
        return await invoke_as_caller(services, key, action, *args, **kwargs)


tools = ToolRegistry()


def _save_base64(settings: MemorySettings) -> ArgTransform:
    max_bytes = settings.asset_max_bytes
    return ArgTransform(
        type=advertised_base64(max_bytes),
        description=f"The image as base64; at most {max_bytes} bytes decoded (larger: "
        "POST /uploads).",
    )


def _search_base64(settings: MemorySettings) -> ArgTransform:
    max_bytes = settings.asset_max_bytes
    return ArgTransform(
        type=advertised_base64(max_bytes),
        description=f"Images like this one (base64, not stored; at most {max_bytes} bytes "
        "decoded).",
    )


# The base64 bound shown is ASSET_MAX_BYTES of the server the tools are bound to.
SaveBase64Param = Annotated[str | None, Advertised(_save_base64)]
SearchBase64Param = Annotated[str | None, Advertised(_search_base64)]


def build_memory_tools(
    services: MemoryServices, offers: Callable[[ToolSpec], bool] | None = None
) -> list[Tool]:
    """The memory tools bound to ``services``; register the same objects on every server.

    ``offers``: only those a server's tool selection admits (``--toolsets``, ``--read-only``).
    """
    return tools.bind(MemoryTools(services), offers)


class MemoryTools:
    """The memory tools of one server: each ``@tools.tool`` method is a tool."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services
        self.saver = AssetSaver(services)
        self.searcher = AssetSearcher(services)

    async def authorised(
        self,
        action: InTransaction[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``run_authorised`` with this server's services: ``action(uow, caller, services, …)``."""
        return await run_authorised(self.services, action, *args, **kwargs)

    async def as_caller(
        self,
        action: AsCaller[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``run_as_caller`` with this server's services: ``action(caller, ...)``."""
        return await run_as_caller(self.services, action, *args, **kwargs)

    async def one_or_each(
        self,
        tool: str,
        action: ItemAction[R],
        asset_id: str | None,
        asset_ids: list[str] | None,
        **arguments: Any,
    ) -> R | BulkAnswer[R]:
        """``action`` for ``assetId`` as a single call, or for each of ``assetIds``.

        Exactly one of them (``invalid_input`` otherwise). Each id of ``assetIds`` is run,
        authorised and recorded alone (:func:`memory_tools.workflows.bulk.run_each`), with MCP
        progress per item; a forbidden item is audited as ``tool``'s refused call is.
        """
        subject = bulk.one_or_many(asset_id, asset_ids)
        if isinstance(subject, str):
            one = subject

            async def single(uow: UnitOfWork, caller: Caller, services: MemoryServices) -> R:
                return await action(uow, caller, services, asset_id=one, **arguments)

            return await self.authorised(single)
        spec = tools.spec(tool)
        denials = None if spec.audited is None else Denials(spec.audited, spec.name)
        key = presented_key(self.services)
        with _refused_as(key):
            return await bulk.run_each(
                self.services,
                key,
                action,
                subject,
                progress=client_progress(),
                denials=denials,
                **arguments,
            )

    @tools.tool(
        "Create image project",
        read_only=False,
        idempotent=False,
        audited="asset_project_create",
    )
    async def image_project_create(
        self,
        name: NameParam,
        vault: VaultParam = "Library",
        description: Annotated[str | None, Field(max_length=2000)] = None,
    ) -> ProjectView:
        """Create a project in a vault you may write. Project names are unique per vault."""
        return await self.authorised(
            projects.create_project, vault=vault, name=name, description=description
        )

    @tools.tool("List image projects", read_only=True, idempotent=True)
    async def image_project_list(
        self,
        vault: Annotated[
            str | None,
            Field(max_length=400, description="Omit for every vault you may read."),
        ] = None,
        includeArchived: bool = False,
    ) -> ProjectList:
        """List projects in one vault, or in every vault you may read (each names its vault)."""
        return await self.authorised(
            projects.list_projects, vault=vault, include_archived=includeArchived
        )

    @tools.tool("List vaults", read_only=True, idempotent=True)
    async def image_vault_list(self) -> VaultList:
        """Your readable vaults: handle, permission; your own also show quota and bytes used."""
        return await self.authorised(vaults.list_vaults)

    @tools.tool(
        "Create image folder",
        read_only=False,
        idempotent=False,
        audited="asset_folder_create",
    )
    async def image_folder_create(
        self,
        projectId: ProjectIdParam,
        name: NameParam,
        vault: VaultParam = "Library",
        parentId: Annotated[
            str | None,
            Field(max_length=64, description="afl_...; omit for the project root."),
        ] = None,
    ) -> FolderView:
        """Create a folder in a project (at most 8 levels deep; names unique among siblings)."""
        return await self.authorised(
            projects.create_folder, vault=vault, project_id=projectId, parent_id=parentId, name=name
        )

    @tools.tool("List image folders", read_only=True, idempotent=True)
    async def image_folder_list(
        self,
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
    ) -> FolderTree:
        """List a project's folder tree, depth-first, with each folder's path and depth."""
        return await self.authorised(projects.list_folders, vault=vault, project_id=projectId)

    @tools.tool(
        "Save image",
        read_only=False,
        idempotent=False,
        open_world=True,
        audited="asset_save",
    )
    async def image_asset_save(
        self,
        vault: VaultParam = "Library",
        sourceUrl: Annotated[
            str | None,
            Field(max_length=4096, description="A public https URL of a JPEG, PNG, WebP or GIF."),
        ] = None,
        artifactId: Annotated[
            str | None,
            Field(
                max_length=64,
                description="art_... from scrape_image_download or scrape_page_screenshot.",
            ),
        ] = None,
        imageBase64: SaveBase64Param = None,
        projectId: Annotated[
            str | None, Field(max_length=64, description="apr_...; omit for Unfiled.")
        ] = None,
        folderId: Annotated[
            str | None, Field(max_length=64, description="afl_... in projectId.")
        ] = (None),
        title: Annotated[str | None, Field(max_length=240)] = None,
        description: Annotated[str | None, Field(max_length=4000)] = None,
        altText: Annotated[str | None, Field(max_length=2000)] = None,
        tags: Annotated[list[str] | None, Field(max_length=32)] = None,
        sourceRef: Annotated[
            dict[str, str | int | float | bool | None] | None,
            Field(description="Where it came from, e.g. {'pageUrl': ...}."),
        ] = None,
        idempotencyKey: Annotated[
            str | None,
            Field(max_length=200, description="The same key returns the same asset."),
        ] = None,
        fileName: Annotated[
            str | None,
            Field(
                max_length=inputs.MAX_FILE_NAME_INPUT,
                description="Kept with the image; the default title.",
            ),
        ] = None,
        waitSeconds: Annotated[
            float, Field(ge=0, le=30, description="Wait for nearDuplicates.")
        ] = 0,
    ) -> SaveResult:
        """Save an image from exactly one source: sourceUrl, artifactId or imageBase64.

        Until embedded, embeddingStatus is 'pending' and nearDuplicates null (waitSeconds waits).
        """
        request = SaveRequest(
            vault=vault,
            source_url=sourceUrl,
            artifact_id=artifactId,
            image_base64=imageBase64,
            title=title,
            description=description,
            alt_text=altText,
            tags=list(tags or []),
            source_ref=dict(sourceRef or {}),
            project_id=projectId,
            folder_id=folderId,
            idempotency_key=idempotencyKey,
            file_name=fileName,
        )

        progress = client_progress()

        async def save_and_answer(caller: Caller) -> SaveResult:
            # One call, one key check and one admission turn (given up while it waits).
            saved = await self.saver.save(caller, request, progress)
            return await duplicates.answer_save(
                caller, self.services, saved, wait_seconds=waitSeconds
            )

        return await self.as_caller(save_and_answer)

    @tools.tool("Get image", read_only=True, idempotent=True)
    async def image_asset_get(
        self,
        assetId: AssetIdParam,
        includePreview: Annotated[bool, Field(description="Add a short-lived preview link.")] = (
            False
        ),
        includeOriginal: Annotated[
            bool, Field(description="Add a short-lived download link to the original.")
        ] = False,
        includeThumbnails: Annotated[
            bool, Field(description="Also send a 256 px JPEG thumbnail as image content.")
        ] = False,
        waitSeconds: Annotated[
            float, Field(ge=0, le=30, description="Wait this long for waitFor to settle.")
        ] = 0,
        waitFor: Annotated[
            list[Literal["embedding", "ocr"]] | None,
            Field(min_length=1, max_length=2, description="Omit for ['embedding']."),
        ] = None,
    ) -> AssetView:
        """One image you may read: metadata, embedding state, OCR text; optional links.

        waitSeconds waits for the embedding or OCR to settle instead of polling.
        """
        return await self.as_caller(
            assets.get_asset_waiting,
            self.services,
            asset_id=assetId,
            include_preview=includePreview,
            include_original=includeOriginal,
            include_thumbnails=includeThumbnails,
            wait_seconds=waitSeconds,
            wait_for=assets.DEFAULT_WAIT_FOR if waitFor is None else tuple(waitFor),
        )

    @tools.tool("List images", read_only=True, idempotent=True)
    async def image_asset_list(
        self,
        filters: FiltersParam = FilterParameters(),  # noqa: B008 - frozen, shown spread
        order: Literal["newest", "oldest", "taken"] = "newest",
        limit: Annotated[int, Field(ge=1, le=100)] = 25,
        cursor: Annotated[str | None, Field(max_length=400)] = None,
        includeThumbnails: ThumbnailsParam = False,
    ) -> AssetListView:
        """List images by created time, or capture time (order 'taken'); page with nextCursor."""
        request = assets.ListRequest(
            **filters.request_fields(),
            order=order,
            limit=limit,
            cursor=cursor,
            include_thumbnails=includeThumbnails,
        )

        return await self.authorised(assets.list_assets, request)

    @tools.tool(
        "Search images",
        read_only=True,
        idempotent=True,
        open_world=True,
        audited="asset_search",
    )
    async def image_asset_search(
        self,
        query: Annotated[
            str | None, Field(max_length=2000, description="In words, e.g. 'red bicycle'.")
        ] = None,
        assetId: Annotated[
            str | None, Field(max_length=64, description="Images like this stored one.")
        ] = None,
        imageBase64: SearchBase64Param = None,
        sourceUrl: Annotated[
            str | None,
            Field(max_length=4096, description="Images like the one at this https URL."),
        ] = None,
        filters: FiltersParam = FilterParameters(),  # noqa: B008 - frozen, shown spread
        limit: Annotated[int, Field(ge=1, le=30)] = 10,
        minScore: Annotated[
            float | None,
            Field(ge=-1, le=1, description="Drop results whose similarity is below this."),
        ] = None,
        includePreview: Annotated[bool, Field(description="Add short-lived preview links.")] = (
            False
        ),
        includeThumbnails: ThumbnailsParam = False,
    ) -> SearchView:
        """Find images by words (query), a similar image, or both, with exact filters.

        Best evidence-backed matches first; noGoodMatch is true when none matches well.
        """
        request = SearchRequest(
            query=query,
            asset_id=assetId,
            image_base64=imageBase64,
            source_url=sourceUrl,
            **filters.request_fields(),
            limit=limit,
            min_score=minScore,
            include_preview=includePreview,
            include_thumbnails=includeThumbnails,
        )

        return await self.as_caller(self.searcher.search, request)

    @tools.tool("Move image", read_only=False, idempotent=True, audited="asset_move")
    async def image_asset_move(
        self,
        assetId: OneAssetParam = None,
        assetIds: AssetIdsParam = None,
        projectId: Annotated[
            str | None, Field(max_length=64, description="null for Unfiled.")
        ] = None,
        folderId: Annotated[
            str | None, Field(max_length=64, description="In projectId; null for its root.")
        ] = None,
    ) -> MoveResult | BulkAnswer[MoveResult]:
        """Move an image to another project or folder of its vault (its bytes stay put)."""
        return await self.one_or_each(
            "image_asset_move",
            changes.move_asset,
            assetId,
            assetIds,
            project_id=projectId,
            folder_id=folderId,
        )

    @tools.tool(
        "Delete image",
        read_only=False,
        idempotent=True,
        destructive=True,
        audited="asset_delete",
    )
    async def image_asset_delete(
        self, assetId: OneAssetParam = None, assetIds: AssetIdsParam = None
    ) -> DeleteResult | BulkAnswer[DeleteResult]:
        """Delete an image (needs the 'destructive' scope); image_asset_restore undoes it."""
        return await self.one_or_each("image_asset_delete", changes.delete_asset, assetId, assetIds)

    @tools.tool(
        "Near-duplicates", read_only=False, idempotent=True, audited="asset_duplicates_dismiss"
    )
    async def image_asset_duplicates(
        self,
        vault: VaultParam = "Library",
        dismiss: Annotated[
            list[str] | None,
            Field(
                min_length=2, max_length=100, description="A cluster's assetIds: not duplicates."
            ),
        ] = None,
        cursor: Annotated[str | None, Field(max_length=400)] = None,
    ) -> ClusterPage:
        """A vault's near-duplicate clusters, newest first. Trash copies: image_asset_delete."""
        return await self.authorised(
            duplicates.review_clusters, vault=vault, dismiss=dismiss, cursor=cursor
        )

    @tools.tool("Restore deleted image", read_only=False, idempotent=True, audited="asset_restore")
    async def image_asset_restore(
        self, assetId: OneAssetParam = None, assetIds: AssetIdsParam = None
    ) -> RestoreResult | BulkAnswer[RestoreResult]:
        """Bring back an image deleted within the grace window (needs the 'destructive' scope)."""
        return await self.one_or_each(
            "image_asset_restore", changes.restore_asset, assetId, assetIds
        )

    @tools.tool(
        "Archive image project",
        read_only=False,
        idempotent=True,
        audited="asset_project_archive",
    )
    async def image_project_archive(
        self,
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
    ) -> ProjectView:
        """Archive a project: its images stay findable, but it takes no new images or folders."""
        return await self.authorised(projects.archive_project, vault=vault, project_id=projectId)

    @tools.tool(
        "Delete image folder",
        read_only=False,
        idempotent=True,
        destructive=True,
        audited="asset_folder_delete",
    )
    async def image_folder_delete(
        self,
        projectId: ProjectIdParam,
        folderId: FolderIdParam,
        vault: VaultParam = "Library",
        recursive: Annotated[
            bool, Field(description="Also its subfolders and images (dry run first).")
        ] = False,
        confirm: Annotated[
            str | None, Field(max_length=64, description="The dry run's confirm token.")
        ] = None,
    ) -> FolderDeletion:
        """Delete a folder; a non-empty one needs recursive (a dry run, then its confirm token)."""
        return await self.authorised(
            changes.delete_folder,
            vault=vault,
            project_id=projectId,
            folder_id=folderId,
            recursive=recursive,
            confirm=confirm,
            progress=client_progress(),
        )

    @tools.tool("Edit image", read_only=False, idempotent=True, audited="asset_update")
    async def image_asset_update(
        self,
        assetId: OneAssetParam = None,
        assetIds: AssetIdsParam = None,
        title: Annotated[str | None, Field(max_length=240)] = None,
        description: Annotated[str | None, Field(max_length=4000, description="'' clears.")] = (
            None
        ),
        altText: Annotated[str | None, Field(max_length=2000, description="'' clears.")] = None,
        tags: Annotated[TagsParam, Field(description="Replaces every tag; [] clears.")] = None,
        # No description: the name and the schema say it all (docs/tools.md, "What tools/list
        # costs"), and every session pays for the words.
        addTags: TagsParam = None,
        removeTags: TagsParam = None,
    ) -> AssetEdit | BulkAnswer[AssetEdit]:
        """Edit an image's title, description, alt text or tags; fields left out stay."""
        return await self.one_or_each(
            "image_asset_update",
            edits.update_asset,
            assetId,
            assetIds,
            title=title,
            description=description,
            alt_text=altText,
            tags=tags,
            add_tags=addTags,
            remove_tags=removeTags,
        )

    @tools.tool("Enrich image", read_only=False, idempotent=True, audited="asset_enrich")
    async def image_asset_enrich(
        self,
        assetId: OneAssetParam = None,
        assetIds: AssetIdsParam = None,
        what: Annotated[
            list[Literal["ocr", "describe", "capture", "duplicates"]] | None,
            Field(max_length=5, description="Omit for all this server has on."),
        ] = None,
    ) -> Enrichment | BulkAnswer[Enrichment]:
        """Queue an image's enrichments ('what') again; image_asset_get shows the results."""
        return await self.one_or_each(
            "image_asset_enrich", enrich.enrich_asset, assetId, assetIds, what=what
        )

    @tools.tool(
        "Edit image project", read_only=False, idempotent=True, audited="asset_project_update"
    )
    async def image_project_update(
        self,
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
        name: Annotated[
            str | None,
            Field(min_length=1, max_length=120),
        ] = None,
        description: Annotated[str | None, Field(max_length=2000, description="'' clears.")] = (
            None
        ),
        archived: bool | None = None,
    ) -> ProjectEdit:
        """Rename a project, change its description, or (un)archive it; fields left out stay."""
        return await self.authorised(
            edits.update_project,
            vault=vault,
            project_id=projectId,
            name=name,
            description=description,
            archived=archived,
        )

    @tools.tool(
        "Edit image folder", read_only=False, idempotent=True, audited="asset_folder_update"
    )
    async def image_folder_update(
        self,
        projectId: ProjectIdParam,
        folderId: FolderIdParam,
        vault: VaultParam = "Library",
        name: Annotated[str | None, Field(min_length=1, max_length=120)] = None,
        parentId: Annotated[
            str | None, Field(max_length=64, description="Move under this folder.")
        ] = None,
        toRoot: Annotated[bool, Field(description="Move to the project's root.")] = False,
    ) -> FolderEdit:
        """Rename a folder, or move it with its contents within its project."""
        return await self.authorised(
            edits.update_folder,
            vault=vault,
            project_id=projectId,
            folder_id=folderId,
            name=name,
            parent_id=parentId,
            to_root=toRoot,
        )

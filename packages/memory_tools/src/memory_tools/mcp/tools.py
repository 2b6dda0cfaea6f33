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

from memory_db import MemorySettings, get_logger
from memory_tools.errors import ToolFailure
from memory_tools.ingest import inputs
from memory_tools.ingest.save import AssetSaver, SaveRequest, SaveResult
from memory_tools.jobs import ocr_jobs as enrich
from memory_tools.jobs.ocr_jobs import Enrichment
from memory_tools.mcp.registry import Advertised, Refused, Spread, ToolRegistry, ToolSpec
from memory_tools.progress import Progress, no_progress
from memory_tools.services import MemoryServices
from memory_tools.workflows import assets, changes, edits, projects, vaults
from memory_tools.workflows.assets import AssetListView, AssetView
from memory_tools.workflows.calls import ApiKey, AsCaller, InTransaction, invoke, invoke_as_caller
from memory_tools.workflows.changes import DeleteResult, FolderDeletion, MoveResult, RestoreResult
from memory_tools.workflows.edits import AssetEdit, FolderEdit, ProjectEdit
from memory_tools.workflows.filters import FilterParameters
from memory_tools.workflows.projects import FolderTree, FolderView, ProjectList, ProjectView
from memory_tools.workflows.search import AssetSearcher, SearchRequest, SearchView
from memory_tools.workflows.vaults import VaultList

log = get_logger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

VaultParam = Annotated[
    str,
    Field(
        min_length=1,
        max_length=400,
        description="Vault handle: 'Library', another of your vaults, or 'owner@example.com/Name' "
        "for a vault shared with you.",
    ),
]
ProjectIdParam = Annotated[
    str, Field(min_length=1, max_length=64, description="Project id (apr_...).")
]
NameParam = Annotated[str, Field(min_length=1, max_length=120, description="1-120 characters.")]
AssetIdParam = Annotated[str, Field(min_length=1, max_length=64, description="ast_...")]
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


def _presented_key(services: MemoryServices) -> ApiKey:
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
    key = _presented_key(services)
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
    key = _presented_key(services)
    with _refused_as(key):
        return await invoke_as_caller(services, key, action, *args, **kwargs)


tools = ToolRegistry()


def _save_base64(settings: MemorySettings) -> ArgTransform:
    max_bytes = settings.asset_max_bytes
    return ArgTransform(
        type=advertised_base64(max_bytes),
        description="The image bytes as base64, for clients without an upload route; "
        f"at most ASSET_MAX_BYTES ({max_bytes} bytes) once decoded. Larger files: the "
        "direct-upload route POST /uploads.",
    )


def _search_base64(settings: MemorySettings) -> ArgTransform:
    max_bytes = settings.asset_max_bytes
    return ArgTransform(
        type=advertised_base64(max_bytes),
        description="Find images like this one (base64; not stored; at most "
        f"ASSET_MAX_BYTES, {max_bytes} bytes, once decoded).",
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
            Field(
                max_length=400, description="A vault handle; omit to list every vault you may read."
            ),
        ] = None,
        includeArchived: bool = False,
    ) -> ProjectList:
        """List projects in one vault, or in every vault you may read (each names its vault)."""
        return await self.authorised(
            projects.list_projects, vault=vault, include_archived=includeArchived
        )

    @tools.tool("List vaults", read_only=True, idempotent=True)
    async def image_vault_list(self) -> VaultList:
        """List the vaults you can read: each with its handle and your permission on it.

        Use the handle as the vault parameter of the other tools. Your own vaults also show
        your quota and the used and reserved bytes counted against it (one quota for all your
        vaults); vaults shared with you show no quota.
        """
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
            Field(max_length=64, description="Parent folder id; omit for the project root."),
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
                description="An artifact id (art_...) from scrape_image_download or "
                "scrape_page_screenshot: yours, before it expires.",
            ),
        ] = None,
        imageBase64: SaveBase64Param = None,
        projectId: Annotated[
            str | None, Field(max_length=64, description="Project id (apr_...); omit for Unfiled.")
        ] = None,
        folderId: Annotated[
            str | None, Field(max_length=64, description="Folder id (afl_...) in projectId.")
        ] = None,
        title: Annotated[str | None, Field(max_length=240)] = None,
        description: Annotated[str | None, Field(max_length=4000)] = None,
        altText: Annotated[str | None, Field(max_length=2000)] = None,
        tags: Annotated[list[str] | None, Field(max_length=32)] = None,
        sourceRef: Annotated[
            dict[str, str | int | float | bool | None] | None,
            Field(
                description="Where the image came from, e.g. {'pageUrl': ..., 'pageTitle': ...}."
            ),
        ] = None,
        idempotencyKey: Annotated[
            str | None,
            Field(
                max_length=200,
                description="Repeating a save with the same key returns the same asset.",
            ),
        ] = None,
        fileName: Annotated[
            str | None,
            Field(
                max_length=inputs.MAX_FILE_NAME_INPUT,
                description="The image's file name (a path is cut to its base name): kept "
                "with the image, and without its extension the title when none is given.",
            ),
        ] = None,
    ) -> SaveResult:
        """Save an image from exactly one source (sourceUrl, artifactId or imageBase64).

        The original is kept unchanged and privately; a sanitised preview is made; the answer
        comes at once with embeddingStatus 'pending' while a worker embeds the image. Sends
        progress notifications (fetching, checking, storing) when the request asks for them.
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

        return await self.as_caller(self.saver.save, request, client_progress())

    @tools.tool("Get image", read_only=True, idempotent=True)
    async def image_asset_get(
        self,
        assetId: Annotated[str, Field(min_length=1, max_length=64, description="ast_...")],
        includePreview: Annotated[
            bool, Field(description="Add a fresh short-lived link to the WebP preview.")
        ] = False,
        includeOriginal: Annotated[
            bool,
            Field(
                description="Add a fresh short-lived link that downloads the original bytes "
                "(as an attachment, with the original MIME type)."
            ),
        ] = False,
        includeThumbnails: Annotated[
            bool,
            Field(
                description="Also send a small JPEG thumbnail (256 px) of the image as MCP "
                "image content, after a text line naming its assetId; the structured answer "
                "is unchanged."
            ),
        ] = False,
        waitSeconds: Annotated[
            float,
            Field(
                ge=0,
                le=30,
                description="Wait up to this many seconds (0-30) for what waitFor names to "
                "settle; a state still waiting in the answer means the time ran out.",
            ),
        ] = 0,
        waitFor: Annotated[
            list[Literal["embedding", "ocr"]] | None,
            Field(
                min_length=1,
                max_length=2,
                description="What waitSeconds waits for: 'embedding' (embeddingStatus leaves "
                "pending/running) and/or 'ocr' (textInImage.status is done, failed or "
                "cancelled; done always comes with its text). Omit for ['embedding'].",
            ),
        ] = None,
    ) -> AssetView:
        """One asset you may read, with its embedding state and the text read in it.

        Metadata, the state of each representation, the failure reason if any, the text OCR
        read (textInImage), and optionally a fresh preview link and a download link to the
        original (call again once they have expired). With waitSeconds, the answer comes as
        soon as what waitFor names is settled (the embedding: ready, partial or failed; OCR:
        done, failed or cancelled), instead of polling.
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
        includeThumbnails: Annotated[
            bool,
            Field(
                description="Also send a small JPEG thumbnail (256 px) of each result as MCP "
                "image content, each after a text line naming its assetId (at most 30 "
                "thumbnails and 512 KiB per answer); the structured answer is unchanged."
            ),
        ] = False,
    ) -> AssetListView:
        """List assets by created time with exact filters.

        Newest first unless order is 'oldest' ('taken': by EXIF capture time, undated last);
        page with nextCursor. Metadata only, plus
        small thumbnails with includeThumbnails; never the stored bytes.
        """
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
            str | None,
            Field(max_length=2000, description="What to find, in words (e.g. 'red bicycle')."),
        ] = None,
        assetId: Annotated[
            str | None, Field(max_length=64, description="Find images like this stored one.")
        ] = None,
        imageBase64: SearchBase64Param = None,
        sourceUrl: Annotated[
            str | None,
            Field(
                max_length=4096,
                description="Find images like the one at this public https URL (not stored).",
            ),
        ] = None,
        filters: FiltersParam = FilterParameters(),  # noqa: B008 - frozen, shown spread
        limit: Annotated[int, Field(ge=1, le=30)] = 10,
        minScore: Annotated[
            float | None,
            Field(
                ge=-1,
                le=1,
                description="Drop results whose similarity (the cosine, not the score) is "
                "below this.",
            ),
        ] = None,
        includePreview: Annotated[
            bool, Field(description="Add a fresh short-lived preview link to each result.")
        ] = False,
        includeThumbnails: Annotated[
            bool,
            Field(
                description="Also send a small JPEG thumbnail (256 px) of each result as MCP "
                "image content, each after a text line naming its assetId (at most 30 "
                "thumbnails and 512 KiB per answer); the structured answer is unchanged."
            ),
        ] = False,
    ) -> SearchView:
        """Find stored images by text, by a similar image, or both, with exact filters.

        Give a query, at most one image (assetId, imageBase64 or sourceUrl), or a query and an
        image together. Results are the best matches first, each with a score from 0 to 1
        that orders them (word matches included), its cosine similarity, and the lists that
        found it; only images whose embedding is ready are found. A query image is never
        stored. Only results with evidence are returned, so there may be fewer than limit or
        none; noGoodMatch is true when none is a good match (bestScore and goodMatchScore are
        similarities).
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
        assetId: AssetIdParam,
        projectId: Annotated[
            str | None, Field(max_length=64, description="Target project; null for Unfiled.")
        ] = None,
        folderId: Annotated[
            str | None,
            Field(max_length=64, description="Target folder in projectId; null for its root."),
        ] = None,
    ) -> MoveResult:
        """Move an image to another project or folder of its vault.

        Metadata only: the stored bytes and their key stay as they are. Moving to where the
        image already is changes nothing.
        """
        return await self.authorised(
            changes.move_asset, asset_id=assetId, project_id=projectId, folder_id=folderId
        )

    @tools.tool(
        "Delete image",
        read_only=False,
        idempotent=True,
        destructive=True,
        audited="asset_delete",
    )
    async def image_asset_delete(self, assetId: AssetIdParam) -> DeleteResult:
        """Delete an image: its vectors at once, its bytes shortly after if nothing else uses them.

        Needs an API key with the 'destructive' scope and write access to the vault. Deleting
        an image that is already deleted succeeds and changes nothing.
        """
        return await self.authorised(changes.delete_asset, asset_id=assetId)

    @tools.tool("Restore deleted image", read_only=False, idempotent=True, audited="asset_restore")
    async def image_asset_restore(self, assetId: AssetIdParam) -> RestoreResult:
        """Bring back an image deleted within the delete grace window (ASSET_DELETE_GRACE_HOURS).

        It returns to its project and folder (the project's root if the folder is gone,
        Unfiled if the project is gone or archived) and is embedded again from its stored
        bytes. Needs the 'destructive' scope, like a delete. Restoring an image that is not
        deleted changes nothing; after the window the answer is not_found.
        """
        return await self.authorised(changes.restore_asset, asset_id=assetId)

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
        """Archive a project: its images stay findable, but it takes no new images or folders.

        Nothing is deleted; archiving an archived project changes nothing.
        """
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
        folderId: Annotated[str, Field(min_length=1, max_length=64, description="afl_...")],
        vault: VaultParam = "Library",
        recursive: Annotated[
            bool,
            Field(description="Also delete its subfolders and images (dry run first)."),
        ] = False,
        confirm: Annotated[
            str | None,
            Field(
                max_length=64,
                description="The confirm token of a dry run; without it, recursive is a dry run.",
            ),
        ] = None,
    ) -> FolderDeletion:
        """Delete a folder.

        An empty folder is deleted at once. A folder with images or subfolders needs
        recursive=true: the first call is a dry run that counts folders, images and bytes and
        returns a confirm token; calling again with that token deletes exactly that, sending
        progress notifications as the images go when the request asks for them.
        """
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
        assetId: AssetIdParam,
        title: Annotated[
            str | None,
            Field(max_length=240, description="A new title; omit or null to keep it."),
        ] = None,
        description: Annotated[
            str | None,
            Field(max_length=4000, description="Omit or null to keep; '' clears it."),
        ] = None,
        altText: Annotated[
            str | None,
            Field(max_length=2000, description="Omit or null to keep; '' clears it."),
        ] = None,
        tags: Annotated[
            list[Annotated[str, Field(max_length=64)]] | None,
            Field(
                max_length=32, description="Replaces every tag; omit or null to keep; [] clears."
            ),
        ] = None,
    ) -> AssetEdit:
        """Edit an image's title, description, alt text or tags (validated like a save).

        Fields left out stay as they are. Full-text search finds the new words at once. When
        the words of the fused representation change, only it is embedded again
        (embeddingStatus 'pending' until then); the visual one stays. Editing to what the image
        already says changes nothing. Needs write access to the image's vault.
        """
        return await self.authorised(
            edits.update_asset,
            asset_id=assetId,
            title=title,
            description=description,
            alt_text=altText,
            tags=tags,
        )

    @tools.tool("Enrich image", read_only=False, idempotent=True, audited="asset_enrich")
    async def image_asset_enrich(
        self,
        assetId: AssetIdParam,
        what: Annotated[
            list[Literal["ocr", "describe", "capture"]] | None,
            Field(
                max_length=4,
                description="Which enrichments to run again: 'ocr' (read the text in the "
                "image), 'describe' (a generated description from a vision model), 'capture' "
                "(EXIF time and camera). Omit for all that this server has switched on.",
            ),
        ] = None,
    ) -> Enrichment:
        """Run an image's enrichments again, as background jobs: OCR, and a description.

        OCR reads the text in the image; describe asks the server's vision model for a
        generated description. Queues the work and answers at once; image_asset_get shows
        textInImage and generatedContext once the jobs are done (searchable from then on). An
        enrichment already queued or running is not queued twice (alreadyQueued). Needs write
        access to the image's vault; feature_disabled when the server has it switched off.
        """
        return await self.authorised(enrich.enrich_asset, asset_id=assetId, what=what)

    @tools.tool(
        "Edit image project", read_only=False, idempotent=True, audited="asset_project_update"
    )
    async def image_project_update(
        self,
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
        name: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=120,
                description="A new name, unique in the vault; omit to keep.",
            ),
        ] = None,
        description: Annotated[
            str | None,
            Field(max_length=2000, description="Omit or null to keep; '' clears it."),
        ] = None,
        archived: Annotated[
            bool | None,
            Field(description="false unarchives, true archives; omit to keep."),
        ] = None,
    ) -> ProjectEdit:
        """Rename a project, change its description, or archive or unarchive it.

        Fields left out stay as they are; an edit to what the project already is changes
        nothing. Needs write access to the vault.
        """
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
        folderId: Annotated[str, Field(min_length=1, max_length=64, description="afl_...")],
        vault: VaultParam = "Library",
        name: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=120,
                description="A new name, unique among its siblings; omit to keep.",
            ),
        ] = None,
        parentId: Annotated[
            str | None,
            Field(
                max_length=64,
                description="Move under this folder of the same project; omit to stay.",
            ),
        ] = None,
        toRoot: Annotated[
            bool, Field(description="Move to the project's root (not with parentId).")
        ] = False,
    ) -> FolderEdit:
        """Rename a folder, or move it (with its subfolders and images) in its project.

        At most 8 levels deep, counting the moved folder's subfolders; a folder cannot go
        under itself or one of its subfolders. Paths follow at once. Needs write access.
        """
        return await self.authorised(
            edits.update_folder,
            vault=vault,
            project_id=projectId,
            folder_id=folderId,
            name=name,
            parent_id=parentId,
            to_root=toRoot,
        )

"""The memory tools as fastmcp ``Tool`` objects, built once and registered on any server.

Every call: presented key (HTTP bearer, else the stdio server's ``MEMORY_API_KEY``) → one unit
of work that authenticates, authorises and acts. The workflows check the feature switches
themselves (:mod:`memory_tools.policy`), so every adapter gets the same answer. A failure rolls
the transaction back and reaches the caller as ``ToolError("<code>: <message>")``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import fields, is_dataclass
from typing import Annotated, Any, Literal, TypeVar, cast

from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_access_token
from fastmcp.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import AfterValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from memory_db import UnitOfWork, get_logger
from memory_db.repositories import AssetFilter
from memory_tools import assets, changes, projects
from memory_tools.access import Caller, authenticate
from memory_tools.errors import ToolFailure, map_failures
from memory_tools.ingest import inputs
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.mcp.schemas import (
    AssetListOut,
    AssetOut,
    AssetSummaryOut,
    CreatedAfterParam,
    CreatedBeforeParam,
    DeleteOut,
    FolderDeletionOut,
    FolderOut,
    FolderTreeOut,
    MoveOut,
    ProjectListOut,
    ProjectOut,
    RestoreOut,
    SaveOut,
    SearchOut,
)
from memory_tools.projects import FolderView, ProjectView
from memory_tools.search import AssetSearcher, SearchRequest
from memory_tools.services import MemoryServices

T = TypeVar("T")
log = get_logger(__name__)

# Tools whose successes and denials are written to the provenance ledger (docs/design.md#ledgers).
AUDITED_OPERATIONS = {
    "image_project_create": "asset_project_create",
    "image_folder_create": "asset_folder_create",
    "image_asset_save": "asset_save",
    "image_asset_search": "asset_search",
    "image_asset_move": "asset_move",
    "image_asset_delete": "asset_delete",
    "image_asset_restore": "asset_restore",
    "image_project_archive": "asset_project_archive",
    "image_folder_delete": "asset_folder_delete",
}

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
Base64Param = Annotated[str | None, Field(description="The image bytes as base64.")]
NameParam = Annotated[str, Field(min_length=1, max_length=120, description="1-120 characters.")]
AssetIdParam = Annotated[str, Field(min_length=1, max_length=64, description="ast_...")]
OptionalVault = Annotated[
    str | None,
    Field(max_length=400, description="A vault handle; omit for every vault you may read."),
]
OptionalId = Annotated[str | None, Field(max_length=64)]
TagsParam = Annotated[
    list[Annotated[str, Field(max_length=64)]] | None,
    Field(max_length=32, description="Every tag must be present."),
]
SourceKindsParam = Annotated[
    list[str] | None,
    Field(max_length=6, description="upload, scrape, screenshot, instagram, external_url, import."),
]
SourceHostParam = Annotated[
    str | None, Field(max_length=253, description="Host the image came from, e.g. example.com.")
]
MimeTypesParam = Annotated[
    list[str] | None,
    Field(max_length=4, description="image/jpeg, image/png, image/webp, image/gif."),
]
UntaggedParam = Annotated[bool, Field(description="Only assets without tags.")]


def base64_param(max_bytes: int, *, searching: bool) -> Any:
    """A base64 string of at most ``ASSET_MAX_BYTES`` decoded bytes.

    The schema announces the bound as ``maxLength``; a longer string is refused with a message
    that names ASSET_MAX_BYTES and the upload route, not pydantic's bare "String should have at
    most N characters".
    """
    max_length = inputs.base64_length_limit(max_bytes)

    def within_limit(value: str) -> str:
        if len(value) > max_length:
            reason = inputs.too_large_for_base64(max_bytes, searching=searching)
            raise PydanticCustomError("base64_too_large", "{reason}", {"reason": reason})
        return value

    return Annotated[
        str,
        AfterValidator(within_limit),
        WithJsonSchema({"type": "string", "maxLength": max_length}),
    ]


def _tool(
    fn: Callable[..., Awaitable[Any]],
    title: str,
    *,
    read_only: bool,
    idempotent: bool,
    destructive: bool = False,
    open_world: bool = False,
) -> Tool:
    """A Tool with all four MCP hints stated explicitly (the spec's defaults are unsafe)."""
    return Tool.from_function(
        fn,
        title=title,
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            # Only tools that may reach the open web (saving by URL) say so.
            open_world_hint=open_world,
        ),
    )


def _presented_key(services: MemoryServices) -> str | None:
    token = get_access_token()
    if token is not None:
        return token.token
    return services.default_api_key


async def _refuse(
    services: MemoryServices, tool: str, caller: Caller | None, failure: ToolFailure
) -> ToolError:
    log.info("tool_refused", tool=tool, code=failure.code)
    operation = AUDITED_OPERATIONS.get(tool)
    if failure.code == "forbidden" and caller is not None and operation is not None:
        # The refused transaction rolled back; the denial is recorded on its own.
        async with services.database.unit_of_work() as uow:
            await uow.provenance.record(
                operation,
                actor_identity=caller.identity,
                outcome="denied",
                detail={"tool": tool, "code": failure.code},
            )
    # The framework logs every tool error at the error's level: a refusal the caller can act
    # on is not a server error (``tool_refused`` above records it); only ``internal`` is.
    level = logging.ERROR if failure.code == "internal" else logging.DEBUG
    return ToolError(str(failure), log_level=level)


async def run_authorised(
    services: MemoryServices,
    tool: str,
    action: Callable[[UnitOfWork, Caller], Awaitable[T]],
) -> T:
    """Authenticate the caller and run ``action`` in one transaction; map failures to errors.

    The call is admitted first (``MemoryServices.call_admission``): past the limit it waits its
    turn, and past the admission wait it fails as ``busy`` without having done anything.
    """
    caller: Caller | None = None
    try:
        with map_failures():
            async with services.call_admission.admit(), services.database.unit_of_work() as uow:
                caller = await authenticate(uow, _presented_key(services))
                return await action(uow, caller)
    except ToolFailure as failure:
        raise await _refuse(services, tool, caller, failure) from None


async def run_as_caller(
    services: MemoryServices,
    tool: str,
    action: Callable[[Caller], Awaitable[T]],
) -> T:
    """Authenticate in one statement, then run ``action`` outside any transaction.

    For work that must not hold a transaction open across network calls; ``action`` opens its
    own. Admitted like ``run_authorised``, for the whole call. The key check is one statement,
    so it needs no transaction around it.
    """
    caller: Caller | None = None
    try:
        with map_failures():
            async with services.call_admission.admit():
                async with services.database.single_statements() as uow:
                    caller = await authenticate(uow, _presented_key(services))
                return await action(caller)
    except ToolFailure as failure:
        raise await _refuse(services, tool, caller, failure) from None


def plain_fields(view: Any) -> dict[str, Any]:
    """A workflow's answer (a dataclass) as the dict its output model validates.

    Like ``dataclasses.asdict`` (nested dataclasses, lists, tuples and dicts become plain
    ones), without deep-copying every value: asdict took 16 ms of a 600-folder tree's answer,
    this 1.7 ms (docs/performance.md).
    """
    return {field.name: _plain(getattr(view, field.name)) for field in fields(view)}


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return plain_fields(value)
    items: list[Any]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple, as asdict does
        items = [_plain(item) for item in cast("tuple[Any, ...]", value)]
        return type(value)(*items)
    if isinstance(value, list | tuple):
        items = [_plain(item) for item in cast("list[Any] | tuple[Any, ...]", value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in cast("dict[Any, Any]", value).items()}
    return value


def _project_out(view: ProjectView) -> ProjectOut:
    return ProjectOut.model_validate(plain_fields(view))


def _folder_out(view: FolderView, vault: str) -> FolderOut:
    return FolderOut.model_validate({**plain_fields(view), "vault": vault})


def build_memory_tools(services: MemoryServices) -> list[Tool]:
    """The memory tools bound to ``services``; register the same objects on every server."""

    async def image_project_create(
        name: NameParam,
        vault: VaultParam = "Library",
        description: Annotated[str | None, Field(max_length=2000)] = None,
    ) -> ProjectOut:
        """Create a project in a vault you may write. Project names are unique per vault."""

        async def action(uow: UnitOfWork, caller: Caller) -> ProjectOut:
            view = await projects.create_project(
                uow, caller, services, vault=vault, name=name, description=description
            )
            return _project_out(view)

        return await run_authorised(services, "image_project_create", action)

    async def image_project_list(
        vault: Annotated[
            str | None,
            Field(
                max_length=400, description="A vault handle; omit to list every vault you may read."
            ),
        ] = None,
        includeArchived: bool = False,
    ) -> ProjectListOut:
        """List projects in one vault, or in every vault you may read (each names its vault)."""

        async def action(uow: UnitOfWork, caller: Caller) -> ProjectListOut:
            views = await projects.list_projects(
                uow, caller, services, vault=vault, include_archived=includeArchived
            )
            return ProjectListOut(projects=[_project_out(v) for v in views])

        return await run_authorised(services, "image_project_list", action)

    async def image_folder_create(
        projectId: ProjectIdParam,
        name: NameParam,
        vault: VaultParam = "Library",
        parentId: Annotated[
            str | None,
            Field(max_length=64, description="Parent folder id; omit for the project root."),
        ] = None,
    ) -> FolderOut:
        """Create a folder in a project (at most 8 levels deep; names unique among siblings)."""

        async def action(uow: UnitOfWork, caller: Caller) -> FolderOut:
            view, handle = await projects.create_folder(
                uow,
                caller,
                services,
                vault=vault,
                project_id=projectId,
                parent_id=parentId,
                name=name,
            )
            return _folder_out(view, handle)

        return await run_authorised(services, "image_folder_create", action)

    async def image_folder_list(
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
    ) -> FolderTreeOut:
        """List a project's folder tree, depth-first, with each folder's path and depth."""

        async def action(uow: UnitOfWork, caller: Caller) -> FolderTreeOut:
            views, handle = await projects.list_folders(
                uow, caller, services, vault=vault, project_id=projectId
            )
            return FolderTreeOut(
                vault=handle, project_id=projectId, folders=[_folder_out(v, handle) for v in views]
            )

        return await run_authorised(services, "image_folder_list", action)

    saver = AssetSaver(services)
    max_bytes = services.settings.asset_max_bytes

    async def image_asset_save(
        vault: VaultParam = "Library",
        sourceUrl: Annotated[
            str | None,
            Field(max_length=4096, description="A public https URL of a JPEG, PNG, WebP or GIF."),
        ] = None,
        artifactId: Annotated[
            str | None, Field(max_length=64, description="An MCP Scraper artifact id.")
        ] = None,
        imageBase64: Base64Param = None,
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
    ) -> SaveOut:
        """Save an image from exactly one source (sourceUrl, artifactId or imageBase64).

        The original is kept unchanged and privately; a sanitised preview is made; the answer
        comes at once with embeddingStatus 'pending' while a worker embeds the image.
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
        )

        async def action(caller: Caller) -> SaveOut:
            return SaveOut.model_validate(plain_fields(await saver.save(caller, request)))

        return await run_as_caller(services, "image_asset_save", action)

    # The base64 bound depends on ASSET_MAX_BYTES; string annotations cannot see this closure.
    image_asset_save.__annotations__["imageBase64"] = Annotated[
        base64_param(max_bytes, searching=False) | None,
        Field(
            description="The image bytes as base64, for clients without an upload route; "
            f"at most ASSET_MAX_BYTES ({max_bytes} bytes) once decoded. Larger files: the "
            "direct-upload route POST /uploads.",
        ),
    ]

    async def image_asset_get(
        assetId: Annotated[str, Field(min_length=1, max_length=64, description="ast_...")],
        includePreview: Annotated[
            bool, Field(description="Add a fresh short-lived link to the WebP preview.")
        ] = False,
    ) -> AssetOut:
        """One asset you may read, with its embedding state.

        Metadata, the state of each representation, the failure reason if any, and optionally
        a fresh preview link (call again once it has expired).
        """

        async def action(uow: UnitOfWork, caller: Caller) -> AssetOut:
            view = await assets.get_asset(
                uow, caller, services, asset_id=assetId, include_preview=includePreview
            )
            return AssetOut.model_validate(plain_fields(view))

        return await run_authorised(services, "image_asset_get", action)

    async def image_asset_list(
        vault: OptionalVault = None,
        projectId: OptionalId = None,
        folderId: OptionalId = None,
        includeSubfolders: bool = False,
        tags: TagsParam = None,
        untagged: UntaggedParam = False,
        sourceKinds: SourceKindsParam = None,
        sourceHost: SourceHostParam = None,
        mimeTypes: MimeTypesParam = None,
        createdAfter: CreatedAfterParam = None,
        createdBefore: CreatedBeforeParam = None,
        order: Literal["newest", "oldest"] = "newest",
        limit: Annotated[int, Field(ge=1, le=100)] = 25,
        cursor: Annotated[str | None, Field(max_length=400)] = None,
    ) -> AssetListOut:
        """List assets by created time with exact filters.

        Newest first unless order is 'oldest'; page with nextCursor. Metadata only, never
        image bytes.
        """
        request = assets.ListRequest(
            vault=vault,
            project_id=projectId,
            folder_id=folderId,
            include_subfolders=includeSubfolders,
            filters=AssetFilter(
                tags=tuple(tags or ()),
                untagged=untagged,
                source_kinds=tuple(sourceKinds or ()),
                source_host=sourceHost,
                mime_types=tuple(mimeTypes or ()),
                created_after=createdAfter,
                created_before=createdBefore,
            ),
            order=order,
            limit=limit,
            cursor=cursor,
        )

        async def action(uow: UnitOfWork, caller: Caller) -> AssetListOut:
            page = await assets.list_assets(uow, caller, services, request)
            fields = set(AssetSummaryOut.model_fields)
            items = [
                AssetSummaryOut.model_validate(
                    {key: value for key, value in plain_fields(item).items() if key in fields}
                )
                for item in page.items
            ]
            return AssetListOut(items=items, next_cursor=page.next_cursor)

        return await run_authorised(services, "image_asset_list", action)

    searcher = AssetSearcher(services)

    async def image_asset_search(
        query: Annotated[
            str | None,
            Field(max_length=2000, description="What to find, in words (e.g. 'red bicycle')."),
        ] = None,
        assetId: Annotated[
            str | None, Field(max_length=64, description="Find images like this stored one.")
        ] = None,
        imageBase64: Base64Param = None,
        sourceUrl: Annotated[
            str | None,
            Field(
                max_length=4096,
                description="Find images like the one at this public https URL (not stored).",
            ),
        ] = None,
        vault: OptionalVault = None,
        projectId: OptionalId = None,
        folderId: OptionalId = None,
        includeSubfolders: bool = False,
        tags: TagsParam = None,
        untagged: UntaggedParam = False,
        sourceKinds: SourceKindsParam = None,
        sourceHost: SourceHostParam = None,
        mimeTypes: MimeTypesParam = None,
        createdAfter: CreatedAfterParam = None,
        createdBefore: CreatedBeforeParam = None,
        limit: Annotated[int, Field(ge=1, le=30)] = 10,
        minScore: Annotated[
            float | None,
            Field(ge=-1, le=1, description="Drop results whose score is below this."),
        ] = None,
        includePreview: Annotated[
            bool, Field(description="Add a fresh short-lived preview link to each result.")
        ] = False,
    ) -> SearchOut:
        """Find stored images by text, by a similar image, or both, with exact filters.

        Give a query, at most one image (assetId, imageBase64 or sourceUrl), or a query and an
        image together. Results are the best matches first, each with its cosine score; only
        images whose embedding is ready are found. A query image is never stored. Only results
        with evidence are returned, so there may be fewer than limit or none; noGoodMatch is
        true when none is a good match (see bestScore and goodMatchScore).
        """
        request = SearchRequest(
            query=query,
            asset_id=assetId,
            image_base64=imageBase64,
            source_url=sourceUrl,
            vault=vault,
            project_id=projectId,
            folder_id=folderId,
            include_subfolders=includeSubfolders,
            filters=AssetFilter(
                tags=tuple(tags or ()),
                untagged=untagged,
                source_kinds=tuple(sourceKinds or ()),
                source_host=sourceHost,
                mime_types=tuple(mimeTypes or ()),
                created_after=createdAfter,
                created_before=createdBefore,
            ),
            limit=limit,
            min_score=minScore,
            include_preview=includePreview,
        )

        async def action(caller: Caller) -> SearchOut:
            return SearchOut.model_validate(plain_fields(await searcher.search(caller, request)))

        return await run_as_caller(services, "image_asset_search", action)

    image_asset_search.__annotations__["imageBase64"] = Annotated[
        base64_param(max_bytes, searching=True) | None,
        Field(
            description="Find images like this one (base64; not stored; at most "
            f"ASSET_MAX_BYTES, {max_bytes} bytes, once decoded).",
        ),
    ]

    async def image_asset_move(
        assetId: AssetIdParam,
        projectId: Annotated[
            str | None, Field(max_length=64, description="Target project; null for Unfiled.")
        ] = None,
        folderId: Annotated[
            str | None,
            Field(max_length=64, description="Target folder in projectId; null for its root."),
        ] = None,
    ) -> MoveOut:
        """Move an image to another project or folder of its vault.

        Metadata only: the stored bytes and their key stay as they are. Moving to where the
        image already is changes nothing.
        """

        async def action(uow: UnitOfWork, caller: Caller) -> MoveOut:
            result = await changes.move_asset(
                uow, caller, services, asset_id=assetId, project_id=projectId, folder_id=folderId
            )
            return MoveOut.model_validate(plain_fields(result))

        return await run_authorised(services, "image_asset_move", action)

    async def image_asset_delete(assetId: AssetIdParam) -> DeleteOut:
        """Delete an image: its vectors at once, its bytes shortly after if nothing else uses them.

        Needs an API key with the 'destructive' scope and write access to the vault. Deleting
        an image that is already deleted succeeds and changes nothing.
        """

        async def action(uow: UnitOfWork, caller: Caller) -> DeleteOut:
            result = await changes.delete_asset(uow, caller, services, asset_id=assetId)
            return DeleteOut.model_validate(plain_fields(result))

        return await run_authorised(services, "image_asset_delete", action)

    async def image_asset_restore(assetId: AssetIdParam) -> RestoreOut:
        """Bring back an image deleted within the delete grace window (ASSET_DELETE_GRACE_HOURS).

        It returns to its project and folder (the project's root if the folder is gone,
        Unfiled if the project is gone or archived) and is embedded again from its stored
        bytes. Needs the 'destructive' scope, like a delete. Restoring an image that is not
        deleted changes nothing; after the window the answer is not_found.
        """

        async def action(uow: UnitOfWork, caller: Caller) -> RestoreOut:
            result = await changes.restore_asset(uow, caller, services, asset_id=assetId)
            return RestoreOut.model_validate(plain_fields(result))

        return await run_authorised(services, "image_asset_restore", action)

    async def image_project_archive(
        projectId: ProjectIdParam,
        vault: VaultParam = "Library",
    ) -> ProjectOut:
        """Archive a project: its images stay findable, but it takes no new images or folders.

        Nothing is deleted; archiving an archived project changes nothing.
        """

        async def action(uow: UnitOfWork, caller: Caller) -> ProjectOut:
            view = await projects.archive_project(
                uow, caller, services, vault=vault, project_id=projectId
            )
            return _project_out(view)

        return await run_authorised(services, "image_project_archive", action)

    async def image_folder_delete(
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
    ) -> FolderDeletionOut:
        """Delete a folder.

        An empty folder is deleted at once. A folder with images or subfolders needs
        recursive=true: the first call is a dry run that counts folders, images and bytes and
        returns a confirm token; calling again with that token deletes exactly that.
        """

        async def action(uow: UnitOfWork, caller: Caller) -> FolderDeletionOut:
            result = await changes.delete_folder(
                uow,
                caller,
                services,
                vault=vault,
                project_id=projectId,
                folder_id=folderId,
                recursive=recursive,
                confirm=confirm,
            )
            return FolderDeletionOut.model_validate(plain_fields(result))

        return await run_authorised(services, "image_folder_delete", action)

    return [
        _tool(
            image_asset_search, "Search images", read_only=True, idempotent=True, open_world=True
        ),
        _tool(image_asset_move, "Move image", read_only=False, idempotent=True),
        _tool(
            image_asset_delete, "Delete image", read_only=False, idempotent=True, destructive=True
        ),
        _tool(image_asset_restore, "Restore deleted image", read_only=False, idempotent=True),
        _tool(image_project_archive, "Archive image project", read_only=False, idempotent=True),
        _tool(
            image_folder_delete,
            "Delete image folder",
            read_only=False,
            idempotent=True,
            destructive=True,
        ),
        _tool(image_asset_get, "Get image", read_only=True, idempotent=True),
        _tool(image_asset_list, "List images", read_only=True, idempotent=True),
        _tool(image_asset_save, "Save image", read_only=False, idempotent=False, open_world=True),
        _tool(image_project_create, "Create image project", read_only=False, idempotent=False),
        _tool(image_project_list, "List image projects", read_only=True, idempotent=True),
        _tool(image_folder_create, "Create image folder", read_only=False, idempotent=False),
        _tool(image_folder_list, "List image folders", read_only=True, idempotent=True),
    ]

"""Assets as MCP resources: ``image-memory://assets/{assetId}``, read, listed and followed.

What the MCP adapter (:mod:`memory_tools.mcp.resources`) serves, as workflows run through the
one call runner, so a resource is read under exactly the checks of ``image_asset_get`` and
listed under those of ``image_asset_list``: another owner's asset (or a deleted one) is
``not_found``, like an id that never existed; a revoked key is ``unauthenticated``.

- :func:`read_asset_resource`: the asset's sanitised preview (a WebP we made, without EXIF;
  never the original) and its metadata (``image_asset_get``'s answer, without links).
- :func:`list_asset_resources`: a page of the caller's most recent assets.
- :func:`follow_asset`: wait for an asset's embedding or OCR to finish (LISTEN/NOTIFY through
  ``Database.asset_states``, never polling) and say so, re-checking the caller on every read.

Size: one read answer stays well below the MCP SDK client's 1 MiB limit for one server-sent
event (:data:`MAX_ANSWER_BYTES`, as for thumbnails). A preview too large for that (a detailed
2,048-px photograph) is sent re-encoded from the preview at a smaller edge, and the metadata's
rendition line says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.to_thread
import pyvips
from anyio.abc import TaskStatus

from memory_db import MemoryDbError, UnitOfWork, get_logger, is_valid_id
from memory_tools.access import Caller
from memory_tools.errors import InvalidInputFailure, NotFoundFailure, ToolFailure, Unauthenticated
from memory_tools.ingest.images import lock_down_libvips
from memory_tools.services import MemoryServices
from memory_tools.workflows.assets import (
    OCR_WAITING_STATES,
    WAITING_STATES,
    AssetListView,
    AssetView,
    ListRequest,
    get_asset,
    get_asset_row,
    list_assets,
    read_preview,
)
from memory_tools.workflows.calls import Credential, invoke

log = get_logger(__name__)

ASSET_URI_PREFIX = "image-memory://assets/"
ASSET_URI_TEMPLATE = ASSET_URI_PREFIX + "{assetId}"
# Resources per resources/list page: a page of names and titles, far below any size limit.
RESOURCE_PAGE_SIZE = 50
# One read answer: the preview as base64 (4/3 of its bytes), its metadata and the JSON-RPC
# framing stay below the MCP SDK client's 1 MiB per event, with room to spare.
MAX_ANSWER_BYTES = 768 * 1024
# Edges tried, in turn, for a preview too large to send whole (px, the long side).
REDUCED_EDGES = (1024, 512, 256)
REDUCED_QUALITY = 75
PREVIEW_MIME_TYPE = "image/webp"
# A follower whose read failed for a passing reason (busy, unavailable) reads again after this.
RETRY_SECONDS = 1.0
PASSING_CODES = frozenset({"busy", "unavailable"})


def asset_uri(asset_id: str) -> str:
    """The resource URI of an asset."""
    return ASSET_URI_PREFIX + asset_id


def asset_id_in(uri: str) -> str:
    """The asset id an ``image-memory://assets/{assetId}`` URI names; ``invalid_input`` else."""
    if not uri.startswith(ASSET_URI_PREFIX):
        raise InvalidInputFailure(f"uri: not an asset resource ({ASSET_URI_TEMPLATE})")
    asset_id = uri.removeprefix(ASSET_URI_PREFIX)
    if not is_valid_id(asset_id, "ast"):
        raise InvalidInputFailure("uri: the assetId is not an asset id (ast_...)")
    return asset_id


@dataclass(frozen=True)
class AssetResource:
    """What reading an asset resource returns: its image and its metadata.

    ``image`` is the sanitised preview (or a smaller rendition of it, see ``rendition``);
    ``None`` when the asset has no readable preview (still processing, or its bytes are gone),
    and ``rendition`` says why.
    """

    metadata: AssetView
    image: bytes | None
    rendition: str
    mime_type: str = PREVIEW_MIME_TYPE


def reduce_preview(preview: bytes, max_bytes: int) -> tuple[bytes, int] | None:
    """The preview as WebP at the largest of :data:`REDUCED_EDGES` within ``max_bytes``.

    Returns the bytes and the edge; ``None`` when not even the smallest fits.
    """
    lock_down_libvips()
    for edge in REDUCED_EDGES:
        image = pyvips.Image.thumbnail_buffer(
            preview, edge, height=edge, size="down", option_string="fail_on=error"
        )
        encoded = image.webpsave_buffer(Q=REDUCED_QUALITY, keep=pyvips.enums.ForeignKeep.NONE)
        if len(encoded) <= max_bytes:
            return encoded, edge
    return None


async def read_asset_resource(
    caller: Caller, services: MemoryServices, *, asset_id: str
) -> AssetResource:
    """Read an asset as a resource: ``image_asset_get``'s checks, then its preview's bytes.

    The caller was checked by the call runner; the asset is read in one transaction with the
    tool's own workflow (``not_found`` for what the caller may not see), and the preview is read
    after it, verified against its recorded SHA-256.
    """
    async with services.database.unit_of_work() as uow:
        view, stored = await get_asset_row(uow, caller, services, asset_id=asset_id)
    metadata = view.model_dump_json()
    room = max(0, (MAX_ANSWER_BYTES - len(metadata)) * 3 // 4)
    if stored.preview_storage_key is None or stored.object_status != "available":
        return AssetResource(view, None, "none: the preview is not available (yet)")
    edge = services.settings.asset_preview_max_edge
    try:
        preview = await read_preview(services, stored.preview_storage_key, stored.preview_sha256)
        if len(preview) <= room:
            return AssetResource(view, preview, "preview")
        async with services.decode_admission.admit(edge * edge):
            reduced = await anyio.to_thread.run_sync(reduce_preview, preview, room)
    except (MemoryDbError, pyvips.Error):
        log.warning("asset_resource_preview_failed", asset_id=asset_id, exc_info=True)
        return AssetResource(view, None, "none: the preview could not be read")
    if reduced is None:
        return AssetResource(view, None, "none: the preview does not fit one answer")
    image, reduced_edge = reduced
    return AssetResource(view, image, f"preview reduced to {reduced_edge} px to fit one answer")


async def list_asset_resources(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, cursor: str | None
) -> AssetListView:
    """A page of the caller's most recent readable assets (``image_asset_list``, newest first)."""
    request = ListRequest(order="newest", limit=RESOURCE_PAGE_SIZE, cursor=cursor)
    return await list_assets(uow, caller, services, request)


Progress = tuple[str, str | None]  # (embeddingStatus, the newest OCR job's status or None)


def progress_of(view: AssetView) -> Progress:
    """What a follower compares between two reads of an asset."""
    ocr = view.text_in_image
    return view.embedding_status, None if ocr is None else ocr.status


def finished(before: Progress, after: Progress) -> bool:
    """Whether the embedding or the OCR finished between two reads (an update to announce).

    Finished: it moved into a settled state (embedding ``ready``, ``partial`` or ``failed``;
    OCR ``done``, ``failed`` or ``cancelled``) from any other state.
    """
    (embedding_was, ocr_was), (embedding, ocr) = before, after
    if embedding != embedding_was and embedding not in WAITING_STATES:
        return True
    return ocr != ocr_was and ocr is not None and ocr not in OCR_WAITING_STATES


async def _progress(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> Progress:
    return progress_of(
        await get_asset(uow, caller, services, asset_id=asset_id, include_preview=False)
    )


async def follow_asset(
    services: MemoryServices,
    credential: Credential,
    asset_id: str,
    announce: Callable[[], Awaitable[None]],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> Literal["unreadable"]:
    """Call ``announce`` each time the asset's embedding or OCR finishes, until it is unreadable.

    Subscribes to the asset's state changes first, then reads it as ``credential``'s caller
    (through the call runner: admitted, the key checked in the read's transaction): a caller who
    may not read it fails here, before ``task_status.started()``, with the tool's own failure.
    From then on each change notified for the asset (or a re-established listening connection)
    is read again the same way; a read that finds the asset gone or the key revoked ends the
    follow (returns ``"unreadable"``). A read refused for a passing reason (``busy``,
    ``unavailable``) is tried again after :data:`RETRY_SECONDS`. Runs until cancelled otherwise.
    """
    async with services.database.asset_states.watching(asset_id) as changes:
        last = await invoke(services, credential, _progress, asset_id=asset_id)
        task_status.started()
        while True:
            await changes.changed()
            while True:
                try:
                    now = await invoke(services, credential, _progress, asset_id=asset_id)
                    break
                except (NotFoundFailure, Unauthenticated):
                    return "unreadable"
                except ToolFailure as failure:
                    if failure.code not in PASSING_CODES:
                        log.warning("asset_follow_failed", code=failure.code, exc_info=failure)
                        return "unreadable"
                    await anyio.sleep(RETRY_SECONDS)
            if finished(last, now):
                await announce()
            last = now

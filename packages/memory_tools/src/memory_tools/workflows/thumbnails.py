"""Thumbnails an agent can see: small JPEGs of the results, made from the sanitised previews.

``includeThumbnails`` on ``image_asset_get``, ``image_asset_search`` and ``image_asset_list``:
the workflow asks for one thumbnail per result (``Thumbnail.wanted``: its preview); the
call runner makes them after the transaction, still inside the call's admission
(:func:`render`); the tool registry sends each as MCP image content, after a text line naming
its ``assetId``, beside the unchanged structured answer.

Made on the fly from the preview (a WebP of at most ``ASSET_PREVIEW_MAX_EDGE`` px that we made
and whose SHA-256 we recorded), never from the original: reading it back is verified, and
libvips shrinks a WebP while loading it. Measured on the 2-core development machine: about
20 ms per thumbnail of a 2,048-px preview; a 30-result search over a real server took
630-665 ms with thumbnails against 36-77 ms without (docs/design.md#thumbnails). Storing
thumbnails would need a third object variant (and a migration); not worth it at this cost.

Bounds per answer, so one answer stays well below the MCP SDK client's 1 MiB limit for one
SSE event (the structured answer travels twice: as structured content and as its JSON text):

- at most :data:`MAX_THUMBNAILS` thumbnails (the first results; a list page may hold more);
- at most :data:`MAX_THUMBNAIL_BYTES` of JPEG in total (base64 makes that a third larger);
- and no more than fits in :data:`MAX_ANSWER_BYTES` beside the answer's JSON, twice, and a
  text line per result (a long list page leaves less room).

A result past either bound, or whose preview is not available, gets no thumbnail and the
answer says why (``Thumbnail.missing``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import anyio
import anyio.to_thread
import pyvips

from memory_db import MemoryDbError, get_logger
from memory_tools.ingest.images import lock_down_libvips
from memory_tools.services import MemoryServices
from memory_tools.wire import Thumbnail, WireModel
from memory_tools.workflows.assets import read_preview

log = get_logger(__name__)

THUMBNAIL_EDGE = 256  # px, the long side
THUMBNAIL_QUALITY = 75
MAX_THUMBNAILS = 30
MAX_THUMBNAIL_BYTES = 512 * 1024  # JPEG bytes per answer; about 683 KiB once base64
# What one answer with thumbnails may take: its JSON twice, the base64 thumbnails and their
# lines; a quarter below the MCP SDK client's 1 MiB for one event, for the JSON-RPC framing.
MAX_ANSWER_BYTES = 768 * 1024
LINE_BYTES = 160  # a generous bound on the text line before each result's thumbnail

UNREADABLE = "its preview could not be read"
PAST_COUNT = f"only the first {MAX_THUMBNAILS} results of an answer get a thumbnail"
PAST_BYTES = "the answer's thumbnails reached its size bound"

A = TypeVar("A")


def shrink(preview: bytes) -> tuple[bytes, int, int]:
    """A JPEG of at most ``THUMBNAIL_EDGE`` px on the long side, flattened onto white."""
    lock_down_libvips()
    image = pyvips.Image.thumbnail_buffer(
        preview,
        THUMBNAIL_EDGE,
        height=THUMBNAIL_EDGE,
        size="down",
        option_string="fail_on=error",
    )
    if image.hasalpha():
        image = image.flatten(background=[255, 255, 255])
    jpeg = image.jpegsave_buffer(Q=THUMBNAIL_QUALITY, keep=pyvips.enums.ForeignKeep.NONE)
    return jpeg, image.width, image.height


async def _make(services: MemoryServices, thumb: Thumbnail) -> Thumbnail:
    if thumb.preview_key is None:
        return thumb
    # A preview's pixels are bounded by ASSET_PREVIEW_MAX_EDGE (WebP shrinks on load, so this
    # is generous); its bytes are read only once the decode is admitted.
    edge = services.settings.asset_preview_max_edge
    try:
        async with services.decode_admission.admit(edge * edge):
            preview = await read_preview(services, thumb.preview_key, thumb.preview_sha256)
            jpeg, width, height = await anyio.to_thread.run_sync(shrink, preview)
    except (MemoryDbError, pyvips.Error):
        log.warning("thumbnail_failed", asset_id=thumb.asset_id, exc_info=True)
        return replace(thumb, preview_key=None, missing=UNREADABLE)
    return replace(thumb, jpeg=jpeg, width=width, height=height)


async def render(services: MemoryServices, answer: A) -> A:
    """``answer`` with the thumbnails it asked for made; any other answer as it is.

    The first ``MAX_THUMBNAILS`` are made, concurrently (the decode admission bounds the
    pixels in flight), then kept in result order while they fit the size bounds.
    """
    if not isinstance(answer, WireModel) or not answer.thumbnails:
        return answer
    asked = tuple(
        thumb if position < MAX_THUMBNAILS else Thumbnail(thumb.asset_id, missing=PAST_COUNT)
        for position, thumb in enumerate(answer.thumbnails)
    )
    made: list[Thumbnail] = list(asked)

    async def make(position: int) -> None:
        made[position] = await _make(services, asked[position])

    async with anyio.create_task_group() as group:
        for position in range(len(asked)):
            group.start_soon(make, position)
    # What base64 leaves of the answer's room once its JSON (sent twice) and lines are in.
    room = MAX_ANSWER_BYTES - 2 * len(answer.model_dump_json()) - LINE_BYTES * (len(made) + 1)
    budget = min(MAX_THUMBNAIL_BYTES, max(0, room) * 3 // 4)
    total = 0
    for position, thumb in enumerate(made):
        if thumb.jpeg is None:
            continue
        total += len(thumb.jpeg)
        if total > budget:
            made[position] = Thumbnail(thumb.asset_id, missing=PAST_BYTES)
    return answer.with_thumbnails(tuple(made))

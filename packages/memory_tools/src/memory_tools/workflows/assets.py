"""Reading assets: ``get`` and ``list``.

``get`` adds the embedding state, a fresh preview link and, when asked, a fresh download link
to the original; ``list`` takes exact filters and a stable cursor. Nothing here returns image
bytes, and no signed link is ever stored. Every link handed out is counted
(:mod:`memory_tools.metrics`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal, Protocol

import anyio
from pydantic import Field

from memory_db import (
    AssetRecord,
    ChecksumMismatch,
    MemoryDbError,
    ObjectNotFound,
    UnitOfWork,
    get_logger,
    is_valid_id,
)
from memory_db.repositories import AssetFilter, OcrState, StoredAsset
from memory_db.schema import SOURCE_KINDS, UNDATED_TAKEN_AT
from memory_db.storage import read_verified
from memory_tools import metrics, policy
from memory_tools.access import (
    Caller,
    ResolvedVault,
    readable_vaults,
    resolve_vault,
    still_authenticated,
)
from memory_tools.errors import InvalidInputFailure, NotFoundFailure, translate
from memory_tools.ingest.images import FORMATS
from memory_tools.services import MemoryServices
from memory_tools.text import refuse_nul
from memory_tools.wire import NearDuplicate, Thumbnail, WireModel, fitting
from memory_tools.workflows.contexts import GeneratedContextView, context_view
from memory_tools.workflows.near_duplicates import near_duplicates_of

log = get_logger(__name__)

MIME_TYPES = tuple(image_format.mime_type for image_format in FORMATS.values())
# Previews are small by construction (bounded edge, WebP); a larger one is not ours to read.
MAX_PREVIEW_BYTES = 32 * 1024 * 1024
MAX_LIST_LIMIT = 100


class PreviewLink(WireModel):
    """A short-lived link to the sanitised WebP preview (never stored; ask again when expired)."""

    url: str | None = Field(description="The signed link; null when unavailable says why.")
    expires_at: datetime | None
    unavailable: str | None = Field(
        default=None,
        description="Why no link can be given (e.g. a stdio server with nothing serving its "
        "links); null when url is set.",
    )


class DownloadLink(WireModel):
    """A short-lived link that downloads the original bytes (never stored; ask again)."""

    url: str | None = Field(
        description="The signed link, answered with the original's MIME type as a download "
        "(Content-Disposition: attachment); null when unavailable says why."
    )
    expires_at: datetime | None
    filename: str = Field(description="The download's file name: the asset id and extension.")
    unavailable: str | None = Field(
        default=None,
        description="Why no link can be given (e.g. a stdio server with nothing serving its "
        "links); null when url is set.",
    )


class RepresentationState(WireModel):
    """The embedding state of one representation."""

    representation: str = Field(description="visual or fused.")
    status: str = Field(description="queued, running, retry, done, failed or cancelled.")
    attempts: int
    model: str
    last_error_code: str | None
    completed_at: datetime | None


class TextInImage(WireModel):
    """The text OCR read in an image (docs/ocr.md): verbatim, never invented or corrected.

    ``done`` always comes with the text: a string, ``""`` with ``noText`` when the image has
    none.
    """

    status: str = Field(
        description="Its newest OCR job: queued, running, retry, done, failed or cancelled."
    )
    text: str | None = Field(
        description="What was read; '' when the image has no text (noText); null while it has "
        "not been read (yet) or its reading failed. Never null when status is done."
    )
    no_text: bool = Field(
        description="True when the image was read and has no text in it (text is '')."
    )
    language: str | None = Field(description="The language data it was read with (eng).")
    confidence: float | None = Field(description="Mean confidence of the words kept, 0-100.")
    engine: str | None
    engine_version: str | None
    input_sha256: str | None = Field(description="SHA-256 of the image bytes that were read.")
    skipped: str | None = Field(
        default=None,
        description="Why the engine was not run (noText is then true): too_small (no line of "
        "readable text fits in the image) or uniform (no edge a glyph could be drawn with).",
    )
    read_at: str | None
    last_error_code: str | None = Field(
        description="Why the newest job failed (ocr_unavailable, ocr_failed, ocr_timeout...)."
    )


class SavedBy(WireModel):
    """The key whose call saved an asset (its id and label, never its secret)."""

    key_id: str
    label: str | None


class Camera(WireModel):
    """The camera EXIF names (either may be null)."""

    make: str | None
    model: str | None


class Location(WireModel):
    """Where EXIF says it was taken (stored only with ASSET_KEEP_LOCATION)."""

    latitude: float
    longitude: float


def taken_at_text(asset: AssetRecord) -> str | None:
    """The capture time as ISO 8601: in the camera's offset, or without a zone when it had none.

    A time without a zone is the camera's wall clock; filters and sorting read it as UTC.
    """
    if asset.taken_at is None:
        return None
    offset = asset.taken_offset_minutes
    if offset is None:
        return asset.taken_at.astimezone(UTC).replace(tzinfo=None).isoformat()
    return asset.taken_at.astimezone(timezone(timedelta(minutes=offset))).isoformat()


class AssetView(WireModel):
    """An asset with its embedding state."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    title: str
    description: str | None
    alt_text: str | None
    original_file_name: str | None = Field(
        default=None,
        description="The base name of the file the image was uploaded as (fileName); null "
        "when none was given.",
    )
    tags: list[str]
    source_url: str | None
    source_kind: str
    source_ref: dict[str, str | int | float | bool | None]
    status: str = Field(description="processing, ready or failed.")
    embedding_status: str = Field(description="pending, running, ready, partial or failed.")
    failure_code: str | None
    failure_message: str | None
    mime_type: str
    width: int
    height: int
    bytes: int
    created_at: datetime
    updated_at: datetime
    representations: list[RepresentationState]
    fused_note: str | None = Field(description="Why no fused vector was made, if none was.")
    preview: PreviewLink | None
    original: DownloadLink | None = Field(
        default=None, description="A download link to the original bytes, when asked for."
    )
    text_in_image: TextInImage | None = Field(
        default=None, description="The text OCR read in the image; null when it was never read."
    )
    generated_context: GeneratedContextView | None = Field(
        default=None,
        description="What a vision model said about the image, with its model and time; null "
        "when none was generated, it was cleared, or the image's bytes changed since.",
    )
    saved_by: SavedBy | None = Field(default=None, description="The key that saved it.")
    taken_at: str | None = Field(
        default=None, description="EXIF capture time; no zone if the camera gave none."
    )
    camera: Camera | None = None
    orientation: int | None = Field(default=None, description="EXIF orientation, 1-8.")
    location: Location | None = None
    near_duplicates: list[NearDuplicate] | None = Field(
        default=None, description="Up to 3 lookalikes in its vault; null until embedded."
    )


class AssetSummary(WireModel):
    """One listed asset: compact metadata, never image bytes."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    title: str
    tags: list[str]
    source_kind: str
    source_url: str | None
    status: str
    embedding_status: str
    mime_type: str
    width: int
    height: int
    bytes: int
    created_at: datetime


class AssetListView(WireModel):
    """One page of assets."""

    items: list[AssetSummary]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null at the end."
    )


def _handles(vaults: list[ResolvedVault]) -> dict[tuple[str, str], str]:
    return {(v.record.owner_identity, v.record.physical_vault): v.display_handle for v in vaults}


async def read_preview(services: MemoryServices, key: str, expected_sha256: str | None) -> bytes:
    """The bytes of a stored preview, verified against the SHA-256 the database recorded.

    ``ChecksumMismatch`` (logged) when the bytes are not the ones recorded: they are never
    used. ``expected_sha256`` is ``None`` only for objects stored before previews were hashed
    (revision 0007); those are checked against the store's own recorded checksum instead.
    Other ``MemoryDbError``s when the preview is unreadable or implausibly large.
    """
    if expected_sha256 is None:
        head = await services.store.head(key)
        if not head.exists or head.checksum_sha256 is None:
            raise ObjectNotFound("the preview is missing or has no recorded checksum")
        expected_sha256 = head.checksum_sha256
    try:
        return await read_verified(
            services.store, key, expected_sha256, max_bytes=MAX_PREVIEW_BYTES
        )
    except ChecksumMismatch:
        log.error("asset_preview_integrity_failed", object_id=key.rsplit("/", 2)[1], exc_info=True)
        raise


class PreviewSource(Protocol):
    """What a preview link is made from: an asset's preview key and its object's status."""

    @property
    def preview_storage_key(self) -> str | None: ...  # noqa: D102

    @property
    def object_status(self) -> str: ...  # noqa: D102


async def signed_preview(
    services: MemoryServices, stored: PreviewSource, *, trashed: bool = False
) -> PreviewLink | None:
    """A fresh short-lived link to the asset's preview; ``None`` when there is no preview.

    ``trashed``: the asset is deleted but restorable, so its object may be ``deleting`` (the
    signed-object route serves such a preview, never the original). When this server's links
    cannot be opened (``MemoryServices.links_unavailable``) the link is replaced by the reason,
    never handed out dead.
    """
    servable = ("available", "deleting") if trashed else ("available",)
    if stored.preview_storage_key is None or stored.object_status not in servable:
        return None
    if services.links_unavailable is not None:
        return PreviewLink(url=None, expires_at=None, unavailable=services.links_unavailable)
    ttl = services.settings.asset_signed_get_ttl_seconds
    url = await services.store.create_signed_get_url(stored.preview_storage_key, ttl)
    metrics.SIGNED_READS_ISSUED.labels(purpose="preview").inc()
    return PreviewLink(url=url, expires_at=datetime.now(UTC) + timedelta(seconds=ttl))


async def signed_original(services: MemoryServices, stored: StoredAsset) -> DownloadLink | None:
    """A fresh short-lived download link to the asset's original bytes.

    Served with the original's MIME type as ``attachment`` named ``<assetId>.<ext>``, never
    inline (``memory_db.storage.served_as``). ``None`` when the bytes are not available.
    """
    key = stored.storage_key
    if key is None or stored.object_status != "available":
        return None
    filename = f"{stored.asset.id}.{key.rsplit('.', 1)[1]}"
    if services.links_unavailable is not None:
        return DownloadLink(
            url=None, expires_at=None, filename=filename, unavailable=services.links_unavailable
        )
    ttl = services.settings.asset_signed_get_ttl_seconds
    url = await services.store.create_signed_get_url(key, ttl, filename=filename)
    metrics.SIGNED_READS_ISSUED.labels(purpose="original").inc()
    return DownloadLink(
        url=url, expires_at=datetime.now(UTC) + timedelta(seconds=ttl), filename=filename
    )


def _summary(stored: StoredAsset, vault: str) -> AssetSummary:
    asset = stored.asset
    return AssetSummary(
        asset_id=asset.id,
        vault=vault,
        project_id=asset.project_id,
        folder_id=asset.folder_id,
        title=asset.title,
        tags=list(asset.tags),
        source_kind=asset.source_kind,
        source_url=asset.source_url,
        status=asset.status,
        embedding_status=asset.embedding_status,
        mime_type=stored.mime_type,
        width=stored.width,
        height=stored.height,
        bytes=stored.bytes,
        created_at=asset.created_at,
    )


def _view(
    stored: StoredAsset,
    vault: str,
    representations: list[RepresentationState],
    preview: PreviewLink | None,
    original: DownloadLink | None,
    text_in_image: TextInImage | None = None,
) -> AssetView:
    asset = stored.asset
    note = asset.metadata.get("embedding", {}).get("fused")
    # Every field of the summary, plus what only a full view carries.
    return AssetView(
        **dict(_summary(stored, vault)),
        description=asset.description,
        alt_text=asset.alt_text,
        original_file_name=asset.original_file_name,
        source_ref=dict(asset.source_ref),
        failure_code=asset.failure_code,
        failure_message=asset.failure_message,
        updated_at=asset.updated_at,
        representations=representations,
        fused_note=note if isinstance(note, str) and note.startswith("skipped") else None,
        preview=preview,
        original=original,
        text_in_image=text_in_image,
        taken_at=taken_at_text(asset),
        camera=(
            Camera(make=asset.camera_make, model=asset.camera_model)
            if asset.camera_make or asset.camera_model
            else None
        ),
        orientation=asset.orientation,
        location=(
            Location(latitude=asset.latitude, longitude=asset.longitude)
            if asset.latitude is not None and asset.longitude is not None
            else None
        ),
    )


def _text_in_image(state: OcrState | None) -> TextInImage | None:
    """The asset's OCR text with its provenance and its newest OCR job's state.

    ``state`` is read in one statement (``AssetRepository.ocr_state``): a ``done`` job comes
    with what it wrote. A reading that found no text stores no text: it is shown as ``""``
    with ``noText``; so is an older reading without text while a new job runs.
    """
    if state is None:
        return None
    read = state.reading or {}
    # Done: this job's reading is stored (the same commit). Otherwise a reading is known only
    # from its recorded provenance (readings before provenance was kept for empty results
    # show as not read).
    no_text = state.text is None and (state.status == "done" or state.reading is not None)
    return TextInImage(
        status=state.status,
        text="" if no_text else state.text,
        no_text=no_text,
        language=read.get("language"),
        confidence=read.get("confidence"),
        engine=read.get("engine"),
        engine_version=read.get("engineVersion"),
        input_sha256=read.get("inputSha256"),
        skipped=read.get("skipped"),
        read_at=read.get("readAt"),
        last_error_code=state.last_error_code,
    )


async def get_asset(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    include_preview: bool,
    include_original: bool = False,
    include_thumbnails: bool = False,
) -> AssetView:
    """An asset in any vault the caller may read; ``not_found`` otherwise.

    Never ``forbidden``: another owner's ids answer exactly like ids that do not exist. A
    reader may download the original (``include_original``): whoever may read an asset may
    read its bytes.
    """
    view, stored = await get_asset_row(uow, caller, services, asset_id=asset_id)
    # Links are signed (and counted) only when asked for.
    preview = await signed_preview(services, stored) if include_preview else None
    original = await signed_original(services, stored) if include_original else None
    view = view.model_copy(update={"preview": preview, "original": original})
    # Made after the transaction (memory_tools.workflows.thumbnails.render), sent beside the answer.
    if include_thumbnails:
        view = view.with_thumbnails((Thumbnail.wanted(stored),))
    return view


async def get_asset_row(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> tuple[AssetView, StoredAsset]:
    """``get_asset`` without links or thumbnails, with the stored row it was read from.

    For callers that hand out more than the view, such as the asset resource's preview bytes
    (:mod:`memory_tools.workflows.asset_resources`); the same checks, the same ``not_found``.
    """
    policy.require(services.settings)
    vaults = await readable_vaults(uow, caller)
    stored = await uow.assets.get_visible([v.record.scope for v in vaults], asset_id)
    if stored is None:
        raise NotFoundFailure("asset not found")
    asset = stored.asset
    jobs = await uow.jobs.for_asset(asset.owner_identity, asset.id)
    latest: dict[str, RepresentationState] = {}
    for job in jobs:  # oldest first: later jobs of a representation win
        if job.representation is None:  # not an embedding (OCR, descriptions)
            continue
        if job.status == "cancelled" and job.representation in latest:
            continue
        latest[job.representation] = RepresentationState(
            representation=job.representation,
            status=job.status,
            attempts=job.attempts,
            model=job.model,
            last_error_code=job.last_error_code,
            completed_at=job.completed_at,
        )
    handle = _handles(vaults)[(asset.owner_identity, asset.vault)]
    states = [latest[k] for k in sorted(latest)]
    ocr = await uow.assets.ocr_state(asset.owner_identity, asset.id)
    view = _view(
        stored, handle, states, preview=None, original=None, text_in_image=_text_in_image(ocr)
    )
    context = context_view(await uow.contexts.get(asset.owner_identity, asset.id))
    if context is not None:
        view = view.model_copy(update={"generated_context": context})
    if (key_id := asset.saved_by_key_id) is not None:
        saved_by = SavedBy(key_id=key_id, label=stored.saved_by_label)
        view = view.model_copy(update={"saved_by": saved_by})
    visual = latest.get("visual")
    if visual is not None and visual.status == "done":
        # Pairs are found when the visual vector is written: before that there is nothing
        # to read, and no statement is spent on it.
        near = await near_duplicates_of(uow, services, asset.owner_identity, asset.id)
        view = view.model_copy(update={"near_duplicates": near})
    return view, stored


# Embedding states a wait waits through; any other state is an answer (ready, partial, failed).
WAITING_STATES = ("pending", "running")
# OCR job states a wait waits through; done, failed and cancelled are answers.
OCR_WAITING_STATES = ("queued", "running", "retry")
MAX_WAIT_SECONDS = 30.0
# What ``waitFor`` may name: the embedding, and the enrichments whose state the answer shows.
WAIT_FOR = ("embedding", "ocr")
DEFAULT_WAIT_FOR = ("embedding",)


def check_wait_for(wait_for: Sequence[str]) -> frozenset[str]:
    """The states ``waitFor`` names, validated (``invalid_input``)."""
    if not wait_for:
        raise InvalidInputFailure(f"waitFor: name at least one of {', '.join(WAIT_FOR)}")
    if len(wait_for) > len(WAIT_FOR):
        raise InvalidInputFailure(f"waitFor: at most {len(WAIT_FOR)} of {', '.join(WAIT_FOR)}")
    unknown = sorted({str(name) for name in wait_for} - set(WAIT_FOR))
    if unknown:
        raise InvalidInputFailure(
            f"waitFor: {', '.join(map(repr, unknown))[:200]} is not one of {', '.join(WAIT_FOR)}"
        )
    return frozenset(wait_for)


def unsettled(view: AssetView, wait_for: frozenset[str]) -> bool:
    """Whether any state ``wait_for`` names may still change on its own (a wait goes on).

    ``ocr``: an image without an OCR job has nothing to wait for; its job's ``done``,
    ``failed`` or ``cancelled`` is an answer.
    """
    if "embedding" in wait_for and view.embedding_status in WAITING_STATES:
        return True
    ocr = view.text_in_image
    return "ocr" in wait_for and ocr is not None and ocr.status in OCR_WAITING_STATES


async def get_asset_waiting(
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    include_preview: bool,
    include_original: bool = False,
    include_thumbnails: bool = False,
    wait_seconds: float,
    wait_for: Sequence[str] = DEFAULT_WAIT_FOR,
) -> AssetView:
    """``get_asset``, after waiting up to ``wait_seconds`` for the states ``wait_for`` names.

    ``wait_for``: ``embedding`` (the default) waits for the embedding state to leave
    ``pending`` and ``running``; ``ocr`` for the newest OCR job to be ``done`` (its text
    readable), ``failed`` or ``cancelled``. Returns as soon as every named state is settled
    (at once when they are to begin with), or at the deadline with the states then: a state
    still waiting in the answer means the wait timed out. No polling: a state that is not
    settled at the first read is read again once subscribed
    (:mod:`memory_db.repositories.asset_states`), then only when this asset was notified (or
    listening was re-established), and once at the deadline. While waiting the call holds no
    pooled connection and gives its admission turn to other callers. Each read is a fresh
    ``get_asset``, so a caller who may not read the asset gets ``not_found`` at once, exactly
    as without waiting. Links and thumbnails are made once, for the answer: reads while waiting
    issue none (each issued link is counted).
    """
    policy.require(services.settings)
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise InvalidInputFailure(f"waitSeconds: between 0 and {MAX_WAIT_SECONDS:g}")
    waits = check_wait_for(wait_for)
    extras = include_preview or include_original or include_thumbnails

    async def read(*, answer: bool, waited: bool = True) -> AssetView:
        async with services.database.unit_of_work() as uow:
            if waited:  # the key was checked when the call began; it may be revoked since
                await still_authenticated(uow, caller)
            return await get_asset(
                uow,
                caller,
                services,
                asset_id=asset_id,
                include_preview=include_preview and answer,
                include_original=include_original and answer,
                include_thumbnails=include_thumbnails and answer,
            )

    if wait_seconds == 0:
        return await read(answer=True, waited=False)
    deadline = anyio.current_time() + wait_seconds
    view = await read(answer=False, waited=False)  # settled, or not readable: no listening
    if not unsettled(view, waits):
        return await read(answer=True, waited=False) if extras else view
    async with services.database.asset_states.watching(asset_id) as subscription:
        view = await read(answer=False)  # again, now subscribed: a later change is heard
        while unsettled(view, waits):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                break
            async with services.call_admission.stepped_aside():
                with anyio.move_on_after(remaining):
                    await subscription.changed()
            view = await read(answer=False)
    return await read(answer=True) if extras else view


@dataclass(frozen=True, kw_only=True)
class FilterFields:
    """Where listing and search look, and their exact filters (docs/design.md#filters).

    ``vault``, ``project_id``, ``folder_id`` and ``include_subfolders`` are checked against the
    caller's vaults (:func:`resolve_filters`); ``filters`` holds every other exact filter, in
    the one definition both listing and search apply (``memory_db.repositories.AssetFilter``).
    """

    vault: str | None = None
    project_id: str | None = None
    folder_id: str | None = None
    include_subfolders: bool = False
    filters: AssetFilter = field(default_factory=AssetFilter)


@dataclass(frozen=True, kw_only=True)
class ListRequest(FilterFields):
    """What ``image_asset_list`` was asked."""

    order: ListOrder = "newest"
    limit: int = 25
    cursor: str | None = None
    include_thumbnails: bool = False


# How a listing is ordered: by creation (newest or oldest first) or by capture time (``taken``:
# newest capture first, undated last). ``takenReversed`` is ``taken`` read backwards (undated
# first), the web library's way to the page before; the tools do not offer it.
ListOrder = Literal["newest", "oldest", "taken", "takenReversed"]
ORDERS: tuple[ListOrder, ...] = ("newest", "oldest", "taken", "takenReversed")
_OPPOSITE: dict[str, ListOrder] = {
    "newest": "oldest",
    "oldest": "newest",
    "taken": "takenReversed",
    "takenReversed": "taken",
}
_UNDATED = datetime.fromisoformat(UNDATED_TAKEN_AT)


def opposite_order(order: str) -> ListOrder:
    """The same listing read backwards."""
    return _OPPOSITE[order]


def by_taken(order: str) -> bool:
    """Whether ``order`` sorts by capture time."""
    return order in ("taken", "takenReversed")


def list_position(asset: AssetRecord, order: str) -> datetime:
    """The key a cursor of ``order`` records for ``asset`` (undated: the year 1000)."""
    if by_taken(order):
        return asset.taken_at or _UNDATED
    return asset.created_at


def encode_cursor(created_at: datetime, asset_id: str, order: str) -> str:
    """An opaque position: created time and id of the last item, and the order."""
    raw = json.dumps({"t": created_at.isoformat(), "i": asset_id, "o": order})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, order: str) -> tuple[datetime, str]:
    """The position a cursor names; ``invalid_input`` for anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        created = datetime.fromisoformat(data["t"])
        asset_id = str(data["i"])
        cursor_order = data["o"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidInputFailure("cursor: not a cursor this server returned") from None
    if created.tzinfo is None or not is_valid_id(asset_id, "ast"):
        raise InvalidInputFailure("cursor: not a cursor this server returned")
    if cursor_order != order:
        raise InvalidInputFailure(f"cursor: it belongs to order {cursor_order!r}, not {order!r}")
    return created, asset_id


def check_filters(request: FilterFields) -> None:
    """Refuse malformed filters before any database work."""
    filters = request.filters
    for name, value in (
        ("vault", request.vault),
        ("projectId", request.project_id),
        ("folderId", request.folder_id),
        ("sourceHost", filters.source_host),
    ):
        if value is not None:
            refuse_nul(value, name)
    for tag in filters.tags:
        refuse_nul(tag, "tags")
    if filters.untagged and filters.tags:
        raise InvalidInputFailure("untagged: cannot be combined with tags")
    for kind in filters.source_kinds:
        if kind not in SOURCE_KINDS:
            raise InvalidInputFailure(
                f"sourceKinds: {kind!r} is not one of {', '.join(SOURCE_KINDS)}"
            )
    for mime in filters.mime_types:
        if mime not in MIME_TYPES:
            raise InvalidInputFailure(f"mimeTypes: {mime!r} is not one of {', '.join(MIME_TYPES)}")
    if request.folder_id is not None and request.project_id is None:
        raise InvalidInputFailure("folderId: give the folder's projectId as well")
    if request.include_subfolders and request.folder_id is None:
        raise InvalidInputFailure("includeSubfolders: needs a folderId")
    for name, value in (
        ("createdAfter", filters.created_after),
        ("createdBefore", filters.created_before),
        ("takenAfter", filters.taken_after),
        ("takenBefore", filters.taken_before),
    ):
        if value is not None and value.tzinfo is None:
            raise InvalidInputFailure(f"{name}: give a time zone (e.g. 2026-11-30T12:00:00Z)")
    for after, before, names in (
        (filters.created_after, filters.created_before, ("createdAfter", "createdBefore")),
        (filters.taken_after, filters.taken_before, ("takenAfter", "takenBefore")),
    ):
        if after is not None and before is not None and after >= before:
            raise InvalidInputFailure(f"{names[0]}: must be earlier than {names[1]}")


async def resolve_filters(
    uow: UnitOfWork, caller: Caller, request: FilterFields
) -> tuple[list[ResolvedVault], AssetFilter]:
    """The vaults to read and the exact filter, with project and folder checked in the vault.

    A ``projectId`` without a ``vault`` names its vault (a project id is unique): the one of
    the caller's readable vaults that holds it, and only that one is read. A project of a vault
    the caller may not read is ``not_found`` in the same words as a missing one.
    """
    project_checked = False
    if request.vault is not None:
        vaults = [await resolve_vault(uow, caller, request.vault, "read")]
    else:
        vaults = await readable_vaults(uow, caller)
        if request.project_id is not None:
            # Found here, so not looked for again below.
            vaults = await _vault_of_project(uow, vaults, request.project_id)
            project_checked = True
    folder_ids: tuple[str, ...] | None = None
    if request.folder_id is not None:
        scope = vaults[0].record.scope
        try:
            folder = await uow.folders.get(scope, request.folder_id)
            if folder.project_id != request.project_id:
                raise NotFoundFailure("folder not found")
            folder_ids = (folder.id,)
            if request.include_subfolders:
                folders = await uow.folders.list(scope, folder.project_id)
                folder_ids = descendants(folder.id, [(f.id, f.parent_id) for f in folders])
        except MemoryDbError as exc:
            raise translate(exc) from None
    elif request.project_id is not None and not project_checked:
        try:
            await uow.projects.get(vaults[0].record.scope, request.project_id)
        except MemoryDbError as exc:
            raise translate(exc) from None
    filters = replace(
        normalised_filters(request), project_id=request.project_id, folder_ids=folder_ids
    )
    return vaults, filters


async def _vault_of_project(
    uow: UnitOfWork, vaults: list[ResolvedVault], project_id: str
) -> list[ResolvedVault]:
    """The one of ``vaults`` that holds the project; ``not_found`` as for a missing project."""
    try:
        project = await uow.projects.find_in([v.record.scope for v in vaults], project_id)
    except MemoryDbError as exc:
        raise translate(exc) from None
    return [
        v
        for v in vaults
        if (v.record.owner_identity, v.record.physical_vault)
        == (project.owner_identity, project.vault)
    ]


def normalised_filters(request: FilterFields) -> AssetFilter:
    """The caller's filters as stored values compare: tags and source host lower-cased."""
    given = request.filters
    return replace(
        given,
        tags=tuple(t.strip().lower() for t in given.tags),
        source_host=given.source_host.strip().lower().rstrip(".") if given.source_host else None,
    )


def vault_handles(vaults: list[ResolvedVault]) -> dict[tuple[str, str], str]:
    """How the caller names each (owner, physical vault)."""
    return _handles(vaults)


async def list_assets(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, request: ListRequest
) -> AssetListView:
    """One page of the caller's readable assets, newest (or oldest) first."""
    view, _ = await list_asset_rows(uow, caller, services, request)
    return view


async def list_asset_rows(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, request: ListRequest
) -> tuple[AssetListView, list[StoredAsset]]:
    """``list_assets``, with the stored rows of the page's items (in the same order).

    For callers that hand out more than the summary, such as the web library's preview links
    (:mod:`memory_tools.workflows.browsing`).
    """
    policy.require(services.settings)
    if not 1 <= request.limit <= MAX_LIST_LIMIT:
        raise InvalidInputFailure(f"limit: between 1 and {MAX_LIST_LIMIT}")
    check_filters(request)
    if request.order not in ORDERS:
        raise InvalidInputFailure("order: newest, oldest or taken")
    after = decode_cursor(request.cursor, request.order) if request.cursor else None
    vaults, filters = await resolve_filters(uow, caller, request)
    rows = await uow.assets.list_visible(
        [v.record.scope for v in vaults],
        filters,
        newest_first=request.order in ("newest", "taken"),
        limit=request.limit + 1,
        after=after,
        by_taken=by_taken(request.order),
    )
    handles = _handles(vaults)
    page = rows[: request.limit]
    items = [_summary(row, handles[(row.asset.owner_identity, row.asset.vault)]) for row in page]
    # A page whose items would not fit one answer ends early; nextCursor goes on from there.
    kept = fitting(items)
    more = len(rows) > request.limit or kept < len(items)
    page, items = page[:kept], items[:kept]
    next_cursor = None
    if more and page:
        last = page[-1].asset
        next_cursor = encode_cursor(list_position(last, request.order), last.id, request.order)
    view = AssetListView(items=items, next_cursor=next_cursor)
    if request.include_thumbnails:
        view = view.with_thumbnails(tuple(Thumbnail.wanted(row) for row in page))
    return view, page


def descendants(root: str, edges: list[tuple[str, str | None]]) -> tuple[str, ...]:
    """``root`` and every folder below it, given (folder, parent) edges."""
    children: dict[str, list[str]] = {}
    for folder_id, parent in edges:
        if parent is not None:
            children.setdefault(parent, []).append(folder_id)
    found = [root]
    for current in found:  # grows while walking: breadth-first over a tree of depth <= 8
        found.extend(children.get(current, []))
    return tuple(found)

"""Enrichment: text read in images (OCR) as durable jobs, and re-running it (docs/ocr.md).

- :class:`OcrHandler` runs an ``ocr`` job (:mod:`memory_tools.jobs.handlers`): it reads the
  sanitised preview (or, when the preview is too small to read, a larger rendition made from
  the verified original by the same sanitising decode as a save), runs Tesseract
  (:mod:`memory_tools.jobs.ocr`) in a thread, and stores the verbatim text with its provenance on
  the
  asset. The text feeds the full-text document (its own field, below a person's words), the
  fused text (after a person's words, bounded) and ``image_asset_get``.
- :func:`memory_tools.ingest.plan.ocr_wanted` is the ``ASSET_OCR`` policy for new saves.
- :func:`enrich_asset` (the ``image_asset_enrich`` tool) queues the work again for one image
  (``memory-server enrich`` does it for a whole vault: :mod:`memory_tools.operations.enrich`).
  Enrichments are named (``what``): each name maps to an :class:`Enricher` (its feature switch
  and the function that queues its job), so a new kind is one more entry in :data:`ENRICHERS`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import anyio
import pyvips
from pydantic import Field

from memory_db import AssetRecord, UnitOfWork, VaultScope, get_logger
from memory_db.priority import run_cpu
from memory_tools import policy
from memory_tools.access import Caller
from memory_tools.errors import (
    FeatureDisabled,
    InvalidInputFailure,
    NotFoundFailure,
    ToolFailure,
)
from memory_tools.ingest.images import inspect_image
from memory_tools.ingest.plan import NO_FUSED_TEXT, asset_fused_text
from memory_tools.jobs.handlers import (
    JobFailed,
    JobResult,
    JobSubject,
    read_subject_original,
    read_subject_preview,
)
from memory_tools.jobs.ocr import OcrError, OcrReading, queue_ocr, read_text
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel
from memory_tools.workflows.changes import locate_asset
from memory_tools.workflows.edits import reembed_fused

log = get_logger(__name__)

# A preview whose long edge is below this is too small to read when the original is larger:
# OCR then reads a rendition of the original at OCR_EDGE (small text needs the pixels).
OCR_MIN_EDGE = 1024
OCR_EDGE = 2048
OCR_ACTOR = "system:ocr"  # who re-queues the fused vector after text was read


# --- the job ---------------------------------------------------------------------------------


class OcrHandler:
    """Runs ``ocr`` jobs (registered by :func:`memory_tools.jobs.handlers.build_job_handlers`)."""

    kind = "ocr"

    def __init__(self, services: MemoryServices) -> None:
        self._services = services

    async def run(self, subject: JobSubject) -> JobResult:
        """Read the image's text; the result's ``write`` stores it on the asset."""
        preview = await read_subject_preview(self._services, subject)
        data, source = await self._rendition(subject, preview)
        timeout = self._services.settings.asset_ocr_timeout_seconds
        try:
            # In the worker, a niced thread: Tesseract, started from it, inherits the value.
            reading = await run_cpu(functools.partial(read_text, data, timeout=timeout))
        except OcrError as exc:
            # Missing, failing or overrunning engine: recorded on the job; the image stays
            # ready for its visual search. Re-run with image_asset_enrich once fixed.
            raise JobFailed(exc.code, exc.message) from None
        job_id = subject.job.id

        async def write(uow: UnitOfWork, asset: AssetRecord) -> None:
            await _store_reading(uow, self._services, asset, reading, source, job_id)

        return JobResult(write=write, usage={"words": reading.words})

    async def _rendition(self, subject: JobSubject, preview: bytes) -> tuple[bytes, str]:
        """The preview, or a larger sanitised rendition when the preview is too small."""
        stored = subject.stored
        edge = await anyio.to_thread.run_sync(_long_edge, preview)
        if edge >= OCR_MIN_EDGE or max(stored.width, stored.height) <= edge:
            return preview, "preview"
        settings = self._services.settings
        original = await read_subject_original(self._services, subject)
        try:
            # The save's sanitising decode, waiting for room in this process's decode budget
            # (ASSET_DECODE_BUDGET_PIXELS) like every other decode of an untrusted image.
            rendition = await inspect_image(
                original,
                max_pixels=settings.asset_max_decoded_pixels,
                preview_edge=OCR_EDGE,
                admission=self._services.decode_admission,
            )
        except ToolFailure:
            return preview, "preview"  # validated at save; read what the save made of it
        return rendition.preview, "rendition"


def _long_edge(data: bytes) -> int:
    try:
        image = pyvips.Image.new_from_buffer(data, "")
    except pyvips.Error:
        return 0
    return max(image.width, image.height)


async def _store_reading(
    uow: UnitOfWork,
    services: MemoryServices,
    asset: AssetRecord,
    reading: OcrReading,
    source: str,
    job_id: str,
) -> None:
    """Store what was read (inside the job's completion), and re-embed the fused text."""
    # Recorded for a reading without text too: image_asset_get then says which engine found
    # no text, and when (noText), instead of looking like an image never read.
    provenance: dict[str, Any] = {
        "engine": reading.engine,
        "engineVersion": reading.engine_version,
        # How it ran: a warm child (tesserocr) or a tesseract process per call (pytesseract).
        "binding": reading.binding,
        "language": reading.language,
        "confidence": reading.confidence,
        "words": reading.words,
        "input": source,
        "inputSha256": reading.input_sha256,
        "jobId": job_id,
        "readAt": datetime.now(UTC).isoformat(),
    }
    if reading.skipped is not None:
        # The engine was not run: the image cannot hold readable text (docs/ocr.md#skipped).
        provenance["skipped"] = reading.skipped
    before = asset_fused_text(asset)
    after = asset_fused_text(replace(asset, ocr_text=reading.text))
    metadata: dict[str, Any] | None = None
    if before != after:
        scope = VaultScope(asset.owner_identity, asset.vault)
        try:
            async with uow.savepoint():
                await reembed_fused(uow, services, scope, asset.id, after, OCR_ACTOR)
        except ToolFailure:
            # No room in the quota for a first fused vector, or no embedder here: the text is
            # stored and searchable all the same; the fused vector keeps the person's words.
            log.warning("ocr_fused_not_requeued", asset_id=asset.id, exc_info=True)
        else:
            # What image_asset_get says about the fused vector follows (as an edit's does).
            embedding = dict(asset.metadata.get("embedding") or {})
            embedding["fused"] = "queued" if after else NO_FUSED_TEXT
            metadata = {**asset.metadata, "embedding": embedding}
    await uow.assets.set_ocr(
        asset.owner_identity, asset.id, reading.text, provenance, metadata=metadata
    )


# --- re-running it ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Enricher:
    """One named enrichment: whether the server has it on, and how its job is queued."""

    switched_off: Callable[[MemoryServices], str | None]  # why it is off, or None
    # True: queued now; False: one is queued or running already.
    queue: Callable[[UnitOfWork, MemoryServices, str, str], Awaitable[bool]]


def _ocr_off(services: MemoryServices) -> str | None:
    if services.settings.asset_ocr == "off":
        return "OCR is switched off on this server (ASSET_OCR=off)"
    return None


def _describe_off(services: MemoryServices) -> str | None:
    if services.describer is None:
        return "generated context is off on this server (ASSET_DESCRIBE_BASE_URL is not set)"
    return None


async def _queue_ocr(uow: UnitOfWork, services: MemoryServices, owner: str, asset_id: str) -> bool:
    return await queue_ocr(uow, owner, asset_id)


async def _queue_describe(
    uow: UnitOfWork, services: MemoryServices, owner: str, asset_id: str
) -> bool:
    describer = services.describer
    if describer is None:  # require_on refused it already
        raise FeatureDisabled(_describe_off(services) or "generated context is off")
    job = await uow.jobs.create_kind(owner, asset_id, kind="describe", model=describer.model)
    return job is not None


def _never_off(services: MemoryServices) -> str | None:
    return None


async def _queue_capture(
    uow: UnitOfWork, services: MemoryServices, owner: str, asset_id: str
) -> bool:
    # The EXIF reader is part of the server (memory_tools.jobs.capture); "libvips" names it.
    job = await uow.jobs.create_kind(owner, asset_id, kind="capture", model="libvips-exif")
    return job is not None


async def _queue_duplicates(
    uow: UnitOfWork, services: MemoryServices, owner: str, asset_id: str
) -> bool:
    # The pair search reads stored vectors (memory_tools.jobs.duplicates); "pgvector" names it.
    job = await uow.jobs.create_kind(owner, asset_id, kind="duplicates", model="pgvector")
    return job is not None


# What ``what`` may name: each enrichment says whether it is off and queues its job.
ENRICHERS: dict[str, Enricher] = {
    "ocr": Enricher(switched_off=_ocr_off, queue=_queue_ocr),
    "describe": Enricher(switched_off=_describe_off, queue=_queue_describe),
    # When and with what it was taken, from the original's EXIF (memory_tools.jobs.capture).
    "capture": Enricher(switched_off=_never_off, queue=_queue_capture),
    # Near-duplicate pairs from the stored visual vectors (memory_tools.jobs.duplicates).
    "duplicates": Enricher(switched_off=_never_off, queue=_queue_duplicates),
}


def _switched_on(services: MemoryServices) -> list[str]:
    """The enrichments this server runs (an empty ``what`` means these)."""
    return [kind for kind, enricher in ENRICHERS.items() if enricher.switched_off(services) is None]


def require_on(services: MemoryServices, kinds: Sequence[str]) -> None:
    """``feature_disabled`` before anything is read when an asked enrichment is off."""
    for kind in kinds:
        why = ENRICHERS[kind].switched_off(services)
        if why is not None:
            raise FeatureDisabled(why)


class Enrichment(WireModel):
    """An image's enrichment jobs after ``image_asset_enrich``."""

    asset_id: str
    queued: list[str] = Field(description="Enrichments queued by this call.")
    already_queued: list[str] = Field(
        description="Enrichments whose job was queued or running already (it does the work)."
    )


def check_what(what: Sequence[str] | None, services: MemoryServices | None = None) -> list[str]:
    """The enrichments asked for, validated; when ``what`` is empty, those switched on.

    Nothing switched on: the first, whose refusal says how to switch it on.
    """
    if not what:
        if services is None:
            return list(ENRICHERS)
        return _switched_on(services) or list(ENRICHERS)[:1]
    unknown = sorted(set(what) - set(ENRICHERS))
    if unknown:
        raise InvalidInputFailure(f"what: one or more of {', '.join(ENRICHERS)}")
    return sorted(set(what), key=list(ENRICHERS).index)


async def enrich_asset(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    what: Sequence[str] | None = None,
) -> Enrichment:
    """Queue the enrichments of one image again (write access to its vault).

    Another owner's image answers ``not_found`` exactly like a missing one; one the caller may
    read but not change is ``forbidden``.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    kinds = check_what(what, services)
    require_on(services, kinds)
    resolved, record = await locate_asset(uow, caller, asset_id, "write")
    if record.status in ("deleting", "deleted"):
        raise NotFoundFailure("asset not found")
    queued: list[str] = []
    waiting: list[str] = []
    for kind in kinds:
        made = await ENRICHERS[kind].queue(uow, services, record.owner_identity, asset_id)
        (queued if made else waiting).append(kind)
    if queued:
        await uow.jobs.notify()
    await uow.provenance.record_in_vault(
        "asset_enrich",
        resolved.record.scope,
        "asset",
        asset_id,
        actor_identity=caller.identity,
        detail={"queued": queued, "alreadyQueued": waiting},
    )
    return Enrichment(asset_id=asset_id, queued=queued, already_queued=waiting)


__all__ = [
    "ENRICHERS",
    "Enricher",
    "Enrichment",
    "OcrHandler",
    "check_what",
    "enrich_asset",
    "require_on",
]

"""Scraper artifacts (docs/design.md#artifacts): validated image bytes an owner holds a while.

A scraper tool stores what it fetched (a downloaded image, a screenshot) as an artifact of its
caller: the bytes are validated exactly as a save validates them (:func:`inspect_image` with
the same limits and decode budget, ``ASSET_MAX_BYTES``), written under the caller's namespace
prefix (``memory_db.storage.build_artifact_key``) and recorded with an expiry
(``SCRAPER_ARTIFACT_TTL_SECONDS``). ``image_asset_save`` with the ``artifactId`` turns it into
an asset through the one save plan (``memory_tools.ingest.sources.StoredArtifact``).

Artifacts count against no quota until saved. What bounds them instead: each owner holds at
most ``SCRAPER_ARTIFACT_MAX_LIVE`` live artifacts and ``SCRAPER_ARTIFACT_MAX_LIVE_BYTES`` bytes
of them (checked under the owner's namespace lock, so concurrent stores cannot both pass), each
at most ``ASSET_MAX_BYTES``, and the worker's sweep deletes expired ones, rows and bytes
(:func:`sweep_expired_artifacts`).

The row is committed before the bytes are written: the live-artifact bound is then exact, and
reconciliation never meets artifact bytes without a row except after a failed write whose row
could not be removed either (the sweep removes it at expiry; reconciliation its bytes).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

import anyio
from pydantic import Field

from memory_db import MemoryDbError, NotFound, get_logger, new_id
from memory_db.repositories import ArtifactRecord
from memory_db.storage import build_artifact_key
from memory_tools import metrics, policy
from memory_tools.access import Caller, require_scope
from memory_tools.errors import (
    InvalidImage,
    QuotaExceeded,
    ToolFailure,
    translate,
)
from memory_tools.ingest import inputs
from memory_tools.ingest.images import inspect_image
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel

log = get_logger(__name__)

OPERATION = "artifact_store"
ArtifactSourceKind = Literal["scrape", "screenshot"]
ARTIFACT_SOURCE_KINDS: tuple[ArtifactSourceKind, ...] = ("scrape", "screenshot")


class ArtifactView(WireModel):
    """A stored artifact: pass its artifactId to image_asset_save before it expires."""

    artifact_id: str = Field(description="Opaque artifact id (art_...); yours alone.")
    mime_type: str = Field(description="image/jpeg, image/png, image/webp or image/gif.")
    bytes: int = Field(description="Size of the stored image in bytes.")
    width: int = Field(description="Width in pixels, as displayed.")
    height: int = Field(description="Height in pixels, as displayed.")
    expires_at: datetime = Field(
        description="After this the artifact is gone: save it with image_asset_save first."
    )


def artifact_view(record: ArtifactRecord) -> ArtifactView:
    """The wire shape of one artifact."""
    return ArtifactView(
        artifact_id=record.id,
        mime_type=record.mime_type,
        bytes=record.bytes,
        width=record.width,
        height=record.height,
        expires_at=record.expires_at,
    )


def _check_kind(source_kind: str) -> ArtifactSourceKind:
    for kind in ARTIFACT_SOURCE_KINDS:
        if source_kind == kind:
            return kind
    raise ValueError(f"an artifact's source kind is one of {ARTIFACT_SOURCE_KINDS}")


async def store_artifact(
    services: MemoryServices,
    caller: Caller,
    data: bytes,
    *,
    source_kind: ArtifactSourceKind,
    source_ref: dict[str, Any],
) -> ArtifactView:
    """Validate ``data`` as a save does and store it as ``caller``'s artifact until it expires.

    ``source_ref``: where the bytes came from (``imageUrl``, ``pageUrl``, ``pageTitle``,
    ``altText``, ``caption``...), bounded and scrubbed like a save's ``sourceRef``. Refusals:
    ``feature_disabled``, ``forbidden`` (no ``write`` scope), ``invalid_image`` (what a save
    refuses, or larger than ``ASSET_MAX_BYTES``), ``invalid_input`` (the source ref),
    ``quota_exceeded`` (the owner's live-artifact bound); a refusal stores nothing.

    Opens its own short transactions: call it outside any unit of work.
    """
    settings = services.settings
    policy.require(settings)
    require_scope(caller, "write")
    kind = _check_kind(source_kind)
    ref = inputs.source_ref(source_ref)
    if len(data) > settings.asset_max_bytes:
        raise InvalidImage(
            "the image is larger than the ASSET_MAX_BYTES limit of "
            f"{settings.asset_max_bytes} bytes"
        )
    image = await inspect_image(
        data,
        max_pixels=settings.asset_max_decoded_pixels,
        preview_edge=settings.asset_preview_max_edge,
        admission=services.decode_admission,
    )
    owner = caller.identity
    artifact_id = new_id("art")
    try:
        async with services.database.unit_of_work() as uow:
            # The namespace lock serialises an owner's stores, so the bound below is exact.
            usage = await uow.quota.usage(owner, lock=True)
            live = await uow.artifacts.live_usage(owner)
            if live.count >= settings.scraper_artifact_max_live:
                metrics.QUOTA_REJECTIONS.labels("artifact").inc()
                raise QuotaExceeded(
                    f"you hold {live.count} unexpired artifacts, the most allowed "
                    "(SCRAPER_ARTIFACT_MAX_LIVE): save or wait for some to expire"
                )
            if live.bytes + image.bytes > settings.scraper_artifact_max_live_bytes:
                metrics.QUOTA_REJECTIONS.labels("artifact").inc()
                raise QuotaExceeded(
                    "your unexpired artifacts would exceed SCRAPER_ARTIFACT_MAX_LIVE_BYTES "
                    f"({settings.scraper_artifact_max_live_bytes} bytes): save or wait for "
                    "some to expire"
                )
            key = build_artifact_key(
                settings.asset_storage_env_prefix,
                usage.namespace_id,
                artifact_id,
                image.format.extension,
            )
            record = await uow.artifacts.create(
                artifact_id=artifact_id,
                owner=owner,
                namespace_id=usage.namespace_id,
                storage_key=key,
                sha256=image.sha256,
                mime_type=image.format.mime_type,
                nbytes=image.bytes,
                width=image.width,
                height=image.height,
                source_kind=kind,
                source_ref=ref,
                ttl=timedelta(seconds=settings.scraper_artifact_ttl_seconds),
            )
            await uow.provenance.record(
                OPERATION,
                actor_identity=owner,
                owner_identity=owner,
                target_kind="artifact",
                target_id=artifact_id,
                detail={"sourceKind": kind, "bytes": image.bytes},
            )
    except NotFound as exc:
        raise translate(exc) from None
    try:
        await services.store.put(
            record.storage_key, data, content_type=record.mime_type, checksum_sha256=record.sha256
        )
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await _forget(services, owner, artifact_id)
        if isinstance(exc, MemoryDbError):
            raise ToolFailure("the object store could not take the image; try again") from None
        raise
    log.info("artifact_stored", artifact_id=artifact_id, bytes=image.bytes, source_kind=kind)
    return artifact_view(record)


async def _forget(services: MemoryServices, owner: str, artifact_id: str) -> None:
    """Remove the row of an artifact whose bytes could not be written (the sweep otherwise)."""
    try:
        async with services.database.unit_of_work() as uow:
            await uow.artifacts.delete_owned(owner, artifact_id)
            await uow.provenance.record(
                OPERATION,
                actor_identity=owner,
                owner_identity=owner,
                outcome="failed",
                target_kind="artifact",
                target_id=artifact_id,
                detail={"reason": "the object store did not take the bytes"},
            )
    except Exception:
        log.warning("artifact_forget_failed", artifact_id=artifact_id, exc_info=True)


async def sweep_expired_artifacts(services: MemoryServices, *, limit: int = 500) -> int:
    """Delete expired artifacts, bytes first, then rows; returns how many rows went.

    A delete the store refuses keeps its row for the next sweep, so no bytes lose their row.
    """
    async with services.database.unit_of_work() as uow:
        expired = await uow.artifacts.expired(limit=limit)
    gone: list[str] = []
    for record in expired:
        try:
            await services.store.delete(record.storage_key)
        except MemoryDbError:
            log.warning("artifact_delete_failed", artifact_id=record.id, exc_info=True)
            continue
        gone.append(record.id)
    if not gone:
        return 0
    async with services.database.unit_of_work() as uow:
        return await uow.artifacts.delete(gone)

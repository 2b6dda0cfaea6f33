"""The describe job and a person's review of generated image context (docs/generated-context.md).

A ``describe`` job runs in the durable queue (:mod:`memory_tools.jobs.handlers`): it reads the
asset's sanitised preview, asks the configured :class:`~memory_db.describing.Describer` for
one JSON object, gates the answer (:mod:`memory_db.describing.gating`) and, when it passes,
stores it bound to the preview's SHA-256 with its whitelisted words; what the call cost goes to
the usage ledger (``describe_image``) whether or not the answer passed. A refusal is the job's
failure reason (``context_not_json``, ``context_too_large``, ``context_schema``) and stores
nothing. A person with write access may accept a context or clear it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime

from memory_db import AssetRecord, UnitOfWork, VaultScope
from memory_db.describing import BoundContext, DescribeAnswer, Describer, DescribeRequest, bind
from memory_db.errors import ContextRefused, EmbeddingError
from memory_db.logs import get_logger
from memory_tools import policy
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure, InvalidInputFailure, NotFoundFailure
from memory_tools.ingest.plan import NO_FUSED_TEXT, asset_fused_text
from memory_tools.ingest.save import vector_bytes
from memory_tools.jobs.handlers import (
    JobFailed,
    JobResult,
    JobSubject,
    read_subject_preview,
)
from memory_tools.services import MemoryServices
from memory_tools.workflows.changes import lock_live_asset
from memory_tools.workflows.contexts import (
    GeneratedContextView,
    context_view,
    generated_words,
    page_context,
)
from memory_tools.workflows.edits import reembed_fused

log = get_logger(__name__)

FUSED = "fused"
REVIEW_DECISIONS = ("accept", "clear")
USAGE_SOURCE = "describe_image"
# Previews are WebP (memory_tools.ingest.images): the model is shown the sanitised rendition.
PREVIEW_MEDIA_TYPE = "image/webp"


class DescribeHandler:
    """Runs ``describe`` jobs: preview → model → gate → stored context (or a failure reason)."""

    kind = "describe"

    def __init__(self, services: MemoryServices, describer: Describer) -> None:
        self._services = services
        self._describer = describer

    async def run(self, subject: JobSubject) -> JobResult:
        """Describe one image; ``JobFailed`` with the gate's code when the answer is refused."""
        preview = await read_subject_preview(self._services, subject)
        # The rendition the model sees, hashed here: the binding names exactly these bytes.
        source_sha256 = hashlib.sha256(preview).hexdigest()
        request = DescribeRequest(
            image=preview, media_type=PREVIEW_MEDIA_TYPE, page=page_context(subject.asset)
        )
        try:
            answer = await self._describer.describe(request)
        except EmbeddingError as exc:
            # Provider errors: an outage waits (spending no attempt), a rejection is final.
            raise JobFailed(
                exc.code, str(exc), retryable=exc.retryable, outage=exc.retryable
            ) from exc
        usage = {
            "total_tokens": answer.usage.total_tokens,
            "prompt_tokens": answer.usage.prompt_tokens,
        }
        # The call was made: its tokens count whatever becomes of the answer (refused, stale,
        # or the job's lease lost before it is stored).
        async with self._services.database.unit_of_work() as uow:
            await _record_usage(uow, subject, answer)
        try:
            bound = bind(
                answer.text,
                source_sha256=source_sha256,
                model=answer.model,
                generated_at=datetime.now(UTC),
            )
        except ContextRefused as exc:
            log.info("describe_refused", code=exc.code, asset_id=subject.asset.id)
            raise JobFailed(exc.code, str(exc)) from exc

        async def write(uow: UnitOfWork, asset: AssetRecord) -> None:
            await store_context(uow, self._services, asset, bound, subject)

        return JobResult(write=write, usage=usage)


async def _record_usage(uow: UnitOfWork, subject: JobSubject, answer: DescribeAnswer) -> None:
    await uow.usage.record(
        owner_identity=subject.job.owner_identity,
        source=USAGE_SOURCE,
        model=answer.model,
        total_tokens=answer.usage.total_tokens,
        prompt_tokens=answer.usage.prompt_tokens,
        asset_id=subject.asset.id,
        job_id=subject.job.id,
        request_id=answer.request_id,
    )


async def store_context(
    uow: UnitOfWork,
    services: MemoryServices,
    asset: AssetRecord,
    bound: BoundContext,
    subject: JobSubject,
) -> None:
    """Store a gated context for ``asset`` (locked) if it still describes the asset's bytes.

    ``JobFailed`` (``context_stale``), and nothing stored, when the asset's object changed
    while the model answered: the context would be stale from the start.
    """
    if asset.object_id != subject.stored.id or (
        subject.stored.preview_sha256 not in (None, bound.source_sha256)
    ):
        log.info("describe_stale_on_arrival", asset_id=asset.id)
        raise JobFailed(
            "context_stale",
            "the image's bytes changed while the model described them; nothing was stored",
        )
    words = generated_words(bound.context)
    await refresh_fused(uow, services, asset, words)
    await uow.contexts.put(
        asset.owner_identity,
        asset.id,
        object_id=asset.object_id,
        source_sha256=bound.source_sha256,
        model=bound.model,
        context=bound.context.to_json(),
        generated_at=bound.generated_at,
        generated_text=words,
        job_id=subject.job.id,
    )


async def refresh_fused(
    uow: UnitOfWork, services: MemoryServices, asset: AssetRecord, words: str | None
) -> None:
    """Re-embed the fused vector when the asset's generated words change its fused text.

    The asset row is locked by the caller. The first fused vector an asset gets is charged
    to the quota like an edit's; over the quota the fused vector is left as it is (the words
    still reach the full-text document) rather than failing the whole change.
    """
    before = asset_fused_text(asset)
    after = asset_fused_text(dataclasses.replace(asset, generated_text=words))
    if before == after or services.embedder is None:
        return
    owner = asset.owner_identity
    history = {job.representation for job in await uow.jobs.for_asset(owner, asset.id)}
    if FUSED not in history:
        usage = await uow.quota.usage(owner, lock=True)
        if usage.used_bytes + usage.reserved_bytes + vector_bytes(services, 1) > (
            usage.quota_bytes
        ):
            log.info("generated_context_not_fused", asset_id=asset.id, reason="quota")
            return
    scope = VaultScope(owner_identity=owner, physical_vault=asset.vault)
    await reembed_fused(uow, services, scope, asset.id, after, "generated-context")
    await uow.contexts.set_fused_note(owner, asset.id, "queued" if after else NO_FUSED_TEXT)
    await uow.assets.reconcile_embedding(owner, asset.id)


async def review_context(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    decision: str,
) -> GeneratedContextView | None:
    """Accept an image's generated context, or clear it (write access to its vault).

    Accepting records that a person read it; clearing deletes it and takes its words out of
    search at once (the fused vector is embedded again without them). A stale context cannot
    be accepted. Answers the context as it is afterwards (``None`` once cleared).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if decision not in REVIEW_DECISIONS:
        raise InvalidInputFailure(f"decision: one of {', '.join(REVIEW_DECISIONS)}")
    scope, asset = await lock_live_asset(uow, caller, asset_id)
    owner = scope.owner_identity
    stored = await uow.contexts.get(owner, asset_id)
    if stored is None:
        raise NotFoundFailure("the image has no generated context")
    if decision == "accept":
        if not stored.current:
            raise ConflictFailure(
                "context_stale: the image's bytes changed since its context was generated"
            )
        await uow.contexts.accept(owner, asset_id, actor=caller.identity)
    else:
        await refresh_fused(uow, services, asset, None)
        await uow.contexts.clear(owner, asset_id)
    await uow.provenance.record_in_vault(
        "asset_context_review",
        scope,
        "asset",
        asset_id,
        actor_identity=caller.identity,
        detail={"decision": decision, "model": stored.model},
    )
    return context_view(await uow.contexts.get(owner, asset_id))


__all__ = [
    "REVIEW_DECISIONS",
    "DescribeHandler",
    "refresh_fused",
    "review_context",
    "store_context",
]

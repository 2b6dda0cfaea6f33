"""The describe job and a person's review of generated image context (docs/generated-context.md).

A ``describe`` job runs in the durable queue (:mod:`memory_tools.job_handlers`): it reads the
asset's sanitised preview, asks the configured :class:`~memory_db.describing.Describer` for
one JSON object, gates the answer (:mod:`memory_db.describing.gating`) and, when it passes,
stores it bound to the preview's SHA-256 with its whitelisted words; what the call cost goes to
the usage ledger (``describe_image``) whether or not the answer passed. A refusal is the job's
failure reason (``context_not_json``, ``context_too_large``, ``context_schema``) and stores
nothing. A person with write access may accept a context or clear it.
"""

from __future__ import annotations

import dataclasses

from memory_db import AssetRecord, UnitOfWork, VaultScope
from memory_db.logs import get_logger
from memory_tools import policy
from memory_tools.access import Caller
from memory_tools.changes import locate_asset
from memory_tools.contexts import GeneratedContextView, context_view
from memory_tools.edits import reembed_fused
from memory_tools.errors import ConflictFailure, InvalidInputFailure, NotFoundFailure
from memory_tools.ingest.plan import NO_FUSED_TEXT, asset_fused_text
from memory_tools.ingest.save import vector_bytes
from memory_tools.services import MemoryServices

log = get_logger(__name__)

FUSED = "fused"
REVIEW_ACTIONS = ("accept", "clear")


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
    action: str,
) -> GeneratedContextView | None:
    """Accept an image's generated context, or clear it (write access to its vault).

    Accepting records that a person read it; clearing deletes it and takes its words out of
    search at once (the fused vector is embedded again without them). A stale context cannot
    be accepted. Answers the context as it is afterwards (``None`` once cleared).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    if action not in REVIEW_ACTIONS:
        raise InvalidInputFailure(f"action: one of {', '.join(REVIEW_ACTIONS)}")
    resolved, record = await locate_asset(uow, caller, asset_id, "write")
    if record.status in ("deleting", "deleted"):
        raise NotFoundFailure("asset not found")
    scope = resolved.record.scope
    owner = scope.owner_identity
    asset = await uow.assets.lock(scope, asset_id)
    if asset is None:
        raise NotFoundFailure("asset not found")
    stored = await uow.contexts.get(owner, asset_id)
    if stored is None:
        raise NotFoundFailure("the image has no generated context")
    if action == "accept":
        if not stored.current:
            raise ConflictFailure(
                "context_stale: the image's bytes changed since its context was generated"
            )
        await uow.contexts.accept(owner, asset_id, actor=caller.identity)
    else:
        await refresh_fused(uow, services, asset, None)
        await uow.contexts.clear(owner, asset_id)
    await uow.provenance.record(
        "asset_context_review",
        actor_identity=caller.identity,
        owner_identity=owner,
        vault=scope.physical_vault,
        target_kind="asset",
        target_id=asset_id,
        detail={"action": action, "model": stored.model},
    )
    return context_view(await uow.contexts.get(owner, asset_id))


__all__ = ["REVIEW_ACTIONS", "refresh_fused", "review_context"]
